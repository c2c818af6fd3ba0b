#!/usr/bin/env bash
# Install the host packages the rehearsal cluster (sim/simctl) needs. Idempotent; run as root on Debian/Ubuntu.
#   docker.io        dockerd + containerd + runc (not started here: simctl starts its own engines)
#   docker-registry  Debian's build of the CNCF distribution registry (/usr/bin/docker-registry)
#   debootstrap      builds the node/stand-in base rootfs offline from the apt mirror
#   openssh-client   Ansible/ssh to the node containers; iproute2 for `ip addr`; python3 for simctl
#   openssh-server   the host sshd the lightweight bench nodes run (`simctl up --cluster light`, 127.0.3.0/24)
#   apache2-utils    htpasswd -B for the authenticated registry (127.0.0.1:5001)
#   olah (PyPI)      self-hosted Hugging Face mirror, in its own venv /opt/kimi-sim/olah (python3-venv, git)
set -euo pipefail

if [ "$(id -u)" != 0 ]; then
    echo "install.sh: must run as root" >&2
    exit 1
fi

PKGS=(docker.io docker-registry debootstrap openssh-client openssh-server iproute2 python3 python3-yaml python3-venv git
      apache2-utils ca-certificates curl xz-utils procps tar gzip)

missing=()
for p in "${PKGS[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done

if [ "${#missing[@]}" -gt 0 ]; then
    echo "install.sh: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # policy-rc.d: keep the packages' init scripts from starting dockerd/registry behind our back
    created_policy=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
        chmod 755 /usr/sbin/policy-rc.d
        created_policy=1
    fi
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}"
    if [ "$created_policy" = 1 ]; then rm -f /usr/sbin/policy-rc.d; fi
else
    echo "install.sh: all packages present"
fi

# The package's registry may have been started by a postinst (not with policy-rc.d, but be safe):
# simctl runs its own registry with its own config on 127.0.0.1:5000.
for b in dockerd containerd runc docker-registry debootstrap ssh ssh-keygen ip; do
    command -v "$b" >/dev/null || { echo "install.sh: $b not found after install" >&2; exit 1; }
done
# A docker client: /usr/local/bin/docker may pre-exist; docker.io ships /usr/bin/docker.
command -v docker >/dev/null || { echo "install.sh: no docker client" >&2; exit 1; }
# olah: the self-hosted Hugging Face mirror serving the sim's stand-in model repository (weights staging tests).
OLAH_VERSION=0.5.4
if ! /opt/kimi-sim/olah/bin/pip show olah 2>/dev/null | grep -qx "Version: $OLAH_VERSION"; then
    echo "install.sh: installing olah $OLAH_VERSION into /opt/kimi-sim/olah"
    python3 -m venv /opt/kimi-sim/olah
    /opt/kimi-sim/olah/bin/pip install -q "olah==$OLAH_VERSION"
fi
echo "install.sh: ok ($(dockerd --version))"

