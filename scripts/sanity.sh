#!/usr/bin/env bash
# Run `ansible-test sanity` and/or `ansible-test units` for gpufleet.kimi_k3 OFFLINE (PyPI reachable, nothing else).
#
#   scripts/sanity.sh [sanity|units|all] [-- extra ansible-test args]     (default: all)
#
# Why the detour (docs/dev/testing.md, reference ansible-practices.md §5.3):
#  * ansible-test only runs from a directory named .../ansible_collections/<namespace>/<name>/ and resolves
#    symlinks, so the build/collections link does not do. We copy the git-tracked and untracked-but-not-ignored
#    files into build/ansible-test/ansible_collections/gpufleet/kimi_k3/ and run there. That copy gets its own
#    (empty) git repo: ansible-test lists files through the nearest enclosing .git, which would otherwise be the
#    main repo where build/ is ignored ("All targets skipped"). So git is a hard requirement.
#  * ANSIBLE_COLLECTIONS_PATH is set by ansible-test to that copy's collection root, so the dependency
#    community.docker (from the venv's `ansible` package) is copied next to it.
#  * Every sanity/units virtualenv is bootstrapped with get-pip-<ver>.py from ci-files.testing.ansible.com, which is
#    not reachable. ansible-test first looks for ~/.ansible/test/cache/get_pip_<ver with _>.py; we generate a small
#    stand-in there (ensurepip + `pip install` from PyPI). <ver> is read from the installed ansible-test, so the
#    name follows ansible-core upgrades (25.2 -> get_pip_25_2.py for ansible-core 2.21.5).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"

what="${1:-all}"
[ $# -gt 0 ] && shift
[ "${1:-}" = "--" ] && shift
extra=("$@")

log() { printf '[sanity] %s\n' "$*"; }
die() { printf '[sanity] ERROR: %s\n' "$*" >&2; exit 2; }

case "$what" in sanity|units|all) ;; *) die "usage: $0 [sanity|units|all] [-- ansible-test args]";; esac
# KIMI_K3_SANITY_VENV: the venv whose ansible-test runs (default .venv; build/venv-2.17 for the oldest core:
# scripts/setup.sh --oldest). Each ansible-core version reads its own tests/sanity/ignore-<major.minor>.txt.
venv="${KIMI_K3_SANITY_VENV:-.venv}"
venv="$(cd "$venv" 2>/dev/null && pwd)" || die "${KIMI_K3_SANITY_VENV:-.venv} missing: run scripts/setup.sh first"
[ -x "$venv/bin/ansible-test" ] || die "$venv/bin/ansible-test missing: run scripts/setup.sh first"
command -v git >/dev/null || die "git is needed to list the collection's files"

export PATH="$venv/bin:$PATH"
py="$venv/bin/python"
pyver="$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
export ANSIBLE_TEST_PREFER_PODMAN=0
export ANSIBLE_INJECT_FACT_VARS=false

# ---- 1. the get-pip stand-in ---------------------------------------------------------------------------------
pip_ver="$("$py" - <<'EOF'
import re, types
try:
    from ansible_test._internal.python_requirements import get_venv_packages
    print(get_venv_packages(types.SimpleNamespace(version=''))['pip'])
except Exception:  # layout changed: fall back to reading the pin from the source
    import ansible_test, os
    src = open(os.path.join(os.path.dirname(ansible_test.__file__), '_internal', 'python_requirements.py')).read()
    print(re.search(r"pip='([0-9.]+)'", src).group(1))
EOF
)"
cache_dir="$HOME/.ansible/test/cache"
get_pip="$cache_dir/get_pip_${pip_ver//./_}.py"
marker="# gpufleet.kimi_k3 offline get-pip stand-in"
mkdir -p "$cache_dir"
if [ -f "$get_pip" ] && ! grep -qF "$marker" "$get_pip"; then
  log "using existing bootstrap script $get_pip (not ours, left alone)"
else
  cat > "$get_pip.tmp" <<EOF
$marker (written by scripts/sanity.sh for pip $pip_ver).
# ansible-test runs it as: python get_pip_${pip_ver//./_}.py [pip options] [packages] --no-setuptools --no-wheel
import subprocess
import sys

args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
if subprocess.call([sys.executable, "-c", "import pip"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL):
    rc = subprocess.call([sys.executable, "-m", "ensurepip", "--default-pip"])
    if rc:
        sys.exit(rc)
sys.exit(subprocess.call([sys.executable, "-m", "pip", "install"] + args))
EOF
  mv "$get_pip.tmp" "$get_pip"
  log "get-pip stand-in for pip $pip_ver at $get_pip"
fi

# ---- 2. the copy under .../ansible_collections/gpufleet/kimi_k3 ---------------------------------------------
root="$here/build/ansible-test"
dest="$root/ansible_collections/gpufleet/kimi_k3"
# keep ansible-test's delegation venv (units requirements live there) across runs: same absolute path, so it stays
# valid, and `pip install` is a no-op when nothing changed. Everything else is copied afresh.
keep="$root/.delegation-cache"
rm -rf "$keep"
[ -d "$dest/tests/output/.tmp/delegation" ] && mv "$dest/tests/output/.tmp/delegation" "$keep"
rm -rf "$dest"
mkdir -p "$dest"
# tracked + untracked-not-ignored files that exist; never tool caches or earlier test output
git ls-files -co --exclude-standard -z \
  | "$py" -c '
import os, sys
skip = (".ansible/", "tests/output/", "build/", ".venv/")
names = [n for n in sys.stdin.buffer.read().split(b"\0") if n]
out = [n for n in names if os.path.lexists(n) and not n.decode().startswith(skip) and n != b".venv"]
sys.stdout.buffer.write(b"\0".join(out) + (b"\0" if out else b""))' \
  | tar --null --no-recursion -T - -cf - | tar -xf - -C "$dest"
# ansible-test picks its file list from the nearest enclosing .git (walking up). Without a repo of its own the
# copy would be listed through /work/main's git, where build/ is ignored, and every target would be skipped.
# An empty repo is enough: ansible-test lists `git ls-files --cached --others --exclude-standard`.
git -C "$dest" init -q
# tests/sanity/ignore-<ver>.txt ship in the collection tarball (Galaxy's importer runs sanity on it), so they may only
# name files that ship; entries for development-only files (sim/, benchmarks/, scripts/, tests/unit/; galaxy.yml
# build_ignore) live in tests/sanity/dev-ignore.txt and are appended to every version's file in this copy.
if [ -f "$dest/tests/sanity/dev-ignore.txt" ]; then
  for f in "$dest"/tests/sanity/ignore-*.txt; do cat "$dest/tests/sanity/dev-ignore.txt" >> "$f"; done
  rm "$dest/tests/sanity/dev-ignore.txt"
fi
if [ -d "$keep" ]; then mkdir -p "$dest/tests/output/.tmp"; mv "$keep" "$dest/tests/output/.tmp/delegation"; fi
log "copied $(find "$dest" -type f -not -path '*/.git/*' | wc -l) files to $dest"

dep_src="$("$py" -c 'import site, os; print(next((os.path.join(p, "ansible_collections", "community", "docker") for p in site.getsitepackages() if os.path.isdir(os.path.join(p, "ansible_collections", "community", "docker"))), ""))')"
if [ -n "$dep_src" ]; then
  rm -rf "$root/ansible_collections/community/docker"
  mkdir -p "$root/ansible_collections/community"
  cp -a "$dep_src" "$root/ansible_collections/community/docker"
else
  log "WARNING: community.docker not found in the venv; imports of it will fail in sanity/units"
fi

# ansible-test units installs tests/unit/requirements.txt into its own venv (with its own pinned pytest). When the
# repo has none, derive it in the copy from requirements.txt: the runtime libraries the plugins and their unit tests
# import; never ansible/ansible-core (ansible-test brings its own) nor pytest (ansible-test pins it).
if [ ! -f "$dest/tests/unit/requirements.txt" ] && [ -d "$dest/tests/unit" ]; then
  "$py" - "$here/requirements.txt" "$here/requirements-test.txt" "$dest/tests/unit/requirements.txt" <<'EOF'
import re, sys
keep = {"openai", "jsonschema", "prometheus-client", "requests", "pyyaml", "ansible-runner", "hypothesis"}
out = []
for line in [ln for src in sys.argv[1:3] for ln in open(src)]:
    line = line.split("#", 1)[0].strip()
    m = re.match(r"([A-Za-z0-9_.-]+)", line)
    if m and m.group(1).lower() in keep:
        out.append(line)
open(sys.argv[3], "w").write("# generated by scripts/sanity.sh from requirements*.txt\n" + "\n".join(out) + "\n")
EOF
  log "generated tests/unit/requirements.txt in the copy: $(grep -vc '^#' "$dest/tests/unit/requirements.txt") package(s)"
fi

# ---- 3. run ----------------------------------------------------------------------------------------------------
cd "$dest"
common=(--venv --python "$pyver" --color no)
# pip's download chatter from the venv bootstraps drowns the findings; KIMI_K3_SANITY_VERBOSE=1 keeps it
quiet() {
  if [ "${KIMI_K3_SANITY_VERBOSE:-0}" = 1 ]; then cat; else
    grep --line-buffered -vE '^\s*(Downloading|Collecting|Using cached|Requirement already|Looking in|Processing /tmp|Attempting uninstall|Found existing|Uninstalling|Successfully uninstalled|Installing collected)|^WARNING: Location .* is ignored|━'
  fi
}
rc=0
if [ "$what" = sanity ] || [ "$what" = all ]; then
  log "ansible-test sanity ${common[*]} ${extra[*]:-}"
  ansible-test sanity "${common[@]}" "${extra[@]}" 2>&1 | quiet
  rc=${PIPESTATUS[0]}
  log "ansible-test sanity rc=$rc"
fi
if [ "$what" = units ] || [ "$what" = all ]; then
  if [ -z "$(find tests/unit -name 'test_*.py' 2>/dev/null | head -1)" ]; then
    log "SKIP ansible-test units: no tests/unit/**/test_*.py in the collection"
  else
    urc=0
    log "ansible-test units ${common[*]} ${extra[*]:-}"
    # the plugin tests (tests/unit/plugins), ansible-test's domain; tests/unit/{roles,playbooks} and tests/unit/test_*
    # drive ansible-playbook/ansible-galaxy from the repository and run in the `unit` stage (pytest tests/unit)
    ansible-test units "${common[@]}" --requirements "${extra[@]}" tests/unit/plugins/ 2>&1 | quiet
    urc=${PIPESTATUS[0]}
    log "ansible-test units rc=$urc"
    [ "$urc" -eq 0 ] || rc=$urc
  fi
fi
exit "$rc"
