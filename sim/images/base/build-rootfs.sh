#!/usr/bin/env bash
# Build the sim base rootfs tarball offline with debootstrap (Debian bookworm minbase) from this machine's apt
# mirror. Usage: build-rootfs.sh OUT.tar.gz
# Result: a gzip'd tar of / suitable for `docker import`. Caller caches it (/var/cache/kimi-sim).
set -euo pipefail
out=${1:?usage: build-rootfs.sh OUT.tar.gz}
suite=${KIMI_SIM_SUITE:-bookworm}
include=python3,openssh-server,python3-requests,ca-certificates,procps,iproute2,sudo

mirror=${KIMI_SIM_MIRROR:-}
if [ -z "$mirror" ]; then
    # deb822 sources first, then one-line sources; skip security/updates suites and cdrom entries.
    mirror=$(awk '/^URIs:/ {print $2}' /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -v -- '-security' | head -n1 || true)
    if [ -z "$mirror" ]; then
        mirror=$(grep -hE '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
                 | grep -v -- '-security' | grep -E 'debian' | awk '{print $2}' | head -n1 || true)
    fi
    mirror=${mirror:-http://deb.debian.org/debian}
fi

work=$(mktemp -d /var/tmp/kimi-sim-rootfs.XXXXXX)
trap 'umount -R "$work/root/proc" 2>/dev/null || true; rm -rf "$work"' EXIT
echo "build-rootfs: debootstrap --variant=minbase $suite from $mirror" >&2
debootstrap --variant=minbase --include="$include" "$suite" "$work/root" "$mirror" >"$work/debootstrap.log" 2>&1 || {
    tail -n 40 "$work/debootstrap.log" >&2; exit 1; }
r=$work/root
# Slim down: no apt caches/lists, no baked host keys (generated at container start), no docs/man pages.
rm -rf "$r"/var/cache/apt/archives/*.deb "$r"/var/lib/apt/lists/* "$r"/usr/share/doc/* "$r"/usr/share/man/* \
       "$r"/usr/share/locale/* "$r"/etc/ssh/ssh_host_* "$r"/var/log/*.log "$r"/tmp/* 2>/dev/null || true
mkdir -p "$r/run/sshd" "$r/root/.ssh"
chmod 700 "$r/root/.ssh"
echo "kimi-sim" > "$r/etc/hostname"
tmp="$out.tmp.$$"
tar --numeric-owner --xattrs -C "$r" -czf "$tmp" .
mv -f "$tmp" "$out"
echo "build-rootfs: wrote $out ($(du -h "$out" | cut -f1))" >&2
