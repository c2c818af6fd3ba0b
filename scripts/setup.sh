#!/usr/bin/env bash
# Set up the development environment: Python venv (>= 3.12 preferred), requirements-dev.txt (= the controller
# requirements.txt + test/lint tools, pinned), and the
# collection link that lets playbooks in this working tree resolve gpufleet.kimi_k3.* by FQCN.
# Idempotent. Usage:
#   scripts/setup.sh            the dev venv .venv (newest ansible-core, the `ansible` package's collections)
#   scripts/setup.sh --oldest   build/venv-<oldest>: the oldest ansible-core meta/runtime.yml declares, for the
#                               version matrix (scripts/test.sh --stage matrix; docs/dev/testing.md)
# Both venvs install with a lock as pip constraints (-c): requirements-lock.txt for .venv,
# requirements-lock-oldest.txt for build/venv-<oldest>, every transitive release pinned, so that a new release of
# a dependency's dependency cannot change CI under us. Refresh them with `scripts/lock.sh` (uv pip compile; see
# docs/dev/testing.md "The lock") after changing a requirements*.txt or OLDEST_CORE. A lock change rebuilds the venv.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"

log() { printf '[setup] %s\n' "$*"; }

# lock_note LOCK: which lock, and which version of it, the install uses (CI's log shows it)
lock_note() {
  [ -f "$1" ] || { log "$1 missing: run scripts/lock.sh"; exit 1; }
  printf 'constraints %s (sha256 %s)' "$1" "$(sha256sum "$1" | cut -c1-16)"
}

# ---- the oldest leg of the version matrix ----------------------------------------------------------------------
# ansible-core 2.17 (meta/runtime.yml requires_ansible >=2.17.0; its last patch release), controller Python
# 3.11-3.12 (2.17 runs on 3.10 too, but requirements-test.txt's hypothesis needs 3.11). community.docker: the lowest major of galaxy.yml's range (4.x), taken from the `ansible` 11 wheel
# (no Galaxy access; pip download of the wheel, only its two collections are unpacked into the venv's
# site-packages, where the `ansible` package would put them).
OLDEST_CORE=2.17.14
OLDEST_DOCKER_FROM=ansible==11.13.0   # ships community.docker 4.8.5 + community.library_inventory_filtering_v1
OLDEST_VENV="build/venv-2.17"
OLDEST_LOCK="requirements-lock-oldest.txt"

pick_oldest_python() {
  local c
  for c in "${PYTHON_OLDEST:-}" python3.12 /root/.pyenv/versions/3.12*/bin/python3 python3.11 python3; do
    [ -n "$c" ] || continue
    if command -v "$c" >/dev/null 2>&1 && "$c" -c 'import sys, venv, ensurepip; sys.exit(0 if (3, 11) <= sys.version_info[:2] <= (3, 12) else 1)' 2>/dev/null; then
      command -v "$c"; return 0
    fi
  done
  return 1
}

core_version() { "$OLDEST_VENV/bin/python" -c 'import ansible.release; print(ansible.release.__version__)'; }

# Install into a venv with uv (parallel downloads; the byte code compiled once, here, because the test runs never
# write any: PYTHONDONTWRITEBYTECODE), from the sources and with the certificate and constraints pip is configured
# with on this machine (sim/kimisim/pipconf.py), the lock as constraints; with pip when uv cannot.
#   venv_install VENV LOCK PIP-ARGS...
venv_install() {
  local venv="$1" lock="$2"; shift 2
  local uvpin conf cert src=()
  uvpin="$(grep -E '^uv==' requirements-lock.txt | head -1)"
  if [ -n "$uvpin" ] && "$venv/bin/python" -m pip install -q "$uvpin" 2>/dev/null; then
    conf="$("$venv/bin/python" -m pip config list 2>/dev/null)"
    mapfile -t src < <("$venv/bin/python" sim/kimisim/pipconf.py args <<< "$conf")
    cert="$("$venv/bin/python" sim/kimisim/pipconf.py cert <<< "$conf")"
    if SSL_CERT_FILE="${SSL_CERT_FILE:-$cert}" "$venv/bin/python" -m uv pip install --quiet --python "$venv/bin/python" \
         --compile-bytecode --index-strategy unsafe-best-match -c "$lock" "${src[@]}" "$@"; then
      return 0
    fi
    log "uv could not install into $venv: pip instead"
  fi
  "$venv/bin/python" -m pip install -q --upgrade pip
  "$venv/bin/python" -m pip install -q -c "$lock" "$@"
}

setup_oldest() {
  local py stamp want sp note
  py="$(pick_oldest_python)" || { log "no Python 3.11-3.12 with venv/ensurepip for ansible-core $OLDEST_CORE (install python3.12-venv, or pyenv 3.12; PYTHON_OLDEST=...)"; exit 1; }
  stamp="$OLDEST_VENV/.kimi-k3.sha256"
  note="$(lock_note "$OLDEST_LOCK")"
  want="$(cat requirements.txt requirements-test.txt "$OLDEST_LOCK" "${BASH_SOURCE[0]}" | sha256sum | cut -d' ' -f1)"
  if [ -x "$OLDEST_VENV/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    log "$OLDEST_VENV up to date (ansible-core $(core_version), installed with $note)"; return 0
  fi
  log "creating $OLDEST_VENV with $py ($("$py" --version 2>&1)), ansible-core $OLDEST_CORE"
  rm -rf "$OLDEST_VENV"
  "$py" -m venv "$OLDEST_VENV"
  log "installing requirements.txt + requirements-test.txt + ansible-core==$OLDEST_CORE with $note"
  venv_install "$OLDEST_VENV" "$OLDEST_LOCK" -r requirements.txt -r requirements-test.txt "ansible-core==$OLDEST_CORE"
  mkdir -p build/cache
  "$OLDEST_VENV/bin/python" -m pip download -q --no-deps -d build/cache "$OLDEST_DOCKER_FROM"
  sp="$("$OLDEST_VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  "$OLDEST_VENV/bin/python" - "build/cache/${OLDEST_DOCKER_FROM/==/-}-py3-none-any.whl" "$sp" <<'EOF'
import sys, zipfile
wheel, dest = sys.argv[1:]
keep = ("ansible_collections/community/docker/", "ansible_collections/community/library_inventory_filtering_v1/")
with zipfile.ZipFile(wheel) as z:
    z.extractall(dest, [n for n in z.namelist() if n.startswith(keep)])
EOF
  echo "$want" > "$stamp"
  log "$OLDEST_VENV ready: ansible-core $(core_version), community.docker $("$OLDEST_VENV/bin/python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["collection_info"]["version"])' "$sp/ansible_collections/community/docker/MANIFEST.json")"
}

if [ "${1:-}" = "--oldest" ]; then
  setup_oldest
  exit 0
fi

pick_python() {
  local c
  for c in "${PYTHON:-}" python3.13 python3.12 /root/.pyenv/versions/3.13*/bin/python3 \
           /root/.pyenv/versions/3.12*/bin/python3 python3; do
    [ -n "$c" ] || continue
    if command -v "$c" >/dev/null 2>&1 && "$c" -c 'import sys, venv; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
      command -v "$c"; return 0
    fi
  done
  return 1
}

if ! py="$(pick_python)"; then
  log "no Python >= 3.11 with venv found; installing Debian's python3"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q && apt-get install -y -q python3 python3-venv python3-dev
  py="$(pick_python)"
fi
if ! "$py" -c 'import ensurepip' 2>/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q && apt-get install -y -q python3-venv
fi
log "using $py ($("$py" --version 2>&1))"

lock="requirements-lock.txt"
note="$(lock_note "$lock")"
stamp=".venv/.requirements.sha256"
want="$(cat requirements.txt requirements-test.txt requirements-dev.txt "$lock" | sha256sum | cut -d' ' -f1)"
if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  [ -x .venv/bin/python ] || "$py" -m venv .venv
  log "installing requirements-dev.txt with $note"
  venv_install .venv "$lock" -r requirements-dev.txt
  echo "$want" > "$stamp"
  log "venv ready"
else
  log "venv up to date (installed with $note)"
fi

link="build/collections/ansible_collections/gpufleet/kimi_k3"
mkdir -p "$(dirname "$link")"
if [ "$(readlink "$link" 2>/dev/null)" != "$here" ]; then
  rm -f "$link"
  ln -s "$here" "$link"
fi
log "collection linked at $link"
