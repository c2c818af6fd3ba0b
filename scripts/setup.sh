#!/usr/bin/env bash
# Set up the development environment: Python venv (>= 3.12 preferred), requirements-dev.txt (= the controller
# requirements.txt + test/lint tools, pinned), and the
# collection link that lets playbooks in this working tree resolve gpufleet.kimi_k3.* by FQCN.
# Idempotent. Usage: scripts/setup.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"

log() { printf '[setup] %s\n' "$*"; }

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

stamp=".venv/.requirements.sha256"
want="$(cat requirements.txt requirements-dev.txt | sha256sum | cut -d' ' -f1)"
if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  [ -x .venv/bin/python ] || "$py" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r requirements-dev.txt
  echo "$want" > "$stamp"
  log "venv ready"
else
  log "venv up to date"
fi

link="build/collections/ansible_collections/gpufleet/kimi_k3"
mkdir -p "$(dirname "$link")"
if [ "$(readlink "$link" 2>/dev/null)" != "$here" ]; then
  rm -f "$link"
  ln -s "$here" "$link"
fi
log "collection linked at $link"
