#!/usr/bin/env bash
# Regenerate the locks: the constraints files scripts/setup.sh installs the two venvs with, so that CI and every
# developer get the same transitive releases (an unpinned dependency of a dependency changing under us is how a
# fresh machine starts failing). Operators' installs keep the ranges of requirements.txt; only .venv and
# build/venv-2.17 use the locks.
#   requirements-lock.txt          .venv: requirements-dev.txt (+ requirements.txt, requirements-test.txt), one
#                                  universal lock for Python >= 3.11 (markers pick ansible-core 2.19 on 3.11)
#   requirements-lock-oldest.txt   build/venv-2.17: requirements.txt + requirements-test.txt + the ansible-core
#                                  release OLDEST_CORE in scripts/setup.sh, Python >= 3.11
# Usage: scripts/lock.sh    (needs PyPI; takes seconds). Review the diff and give it a CI run of its own.
# Each lock records the sha256 of its inputs; tests/unit/test_requirements_lock.py fails when they no longer match.
# uv is the release requirements-dev.txt pins, installed into build/uv-<version> (not .venv: the dev venv is built
# FROM the lock, which may be the thing that is stale).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"

log() { printf '[lock] %s\n' "$*"; }

uv_version="$(sed -n 's/^uv==\([0-9.]*\).*/\1/p' requirements-dev.txt)"
oldest_core="$(sed -n 's/^OLDEST_CORE=\([0-9.]*\).*/\1/p' scripts/setup.sh)"
[ -n "$uv_version" ] || { log "requirements-dev.txt pins no uv==<version>"; exit 1; }
[ -n "$oldest_core" ] || { log "scripts/setup.sh sets no OLDEST_CORE=<version>"; exit 1; }

uv_venv="build/uv-$uv_version"
if [ ! -x "$uv_venv/bin/uv" ]; then
  log "installing uv $uv_version into $uv_venv"
  rm -rf "$uv_venv"
  python3 -m venv "$uv_venv"
  "$uv_venv/bin/python" -m pip install -q "uv==$uv_version"
fi
uv="$uv_venv/bin/uv"

# with_includes FILE: FILE, then the files its `-r` lines include (recursively, depth first)
with_includes() {
  local inc
  echo "$1"
  sed -n 's/^-r[[:space:]]*\([^[:space:]#]*\).*/\1/p' "$1" | while read -r inc; do with_includes "$inc"; done
}

# compile OUT PYTHON INPUTS...: an input is a requirements file or a literal requirement (name==version), which
# reaches uv on stdin. The input hash is sha256 over the inputs and the files they include, in the order the
# header lists them (files' bytes, a literal as one line): tests/unit/test_requirements_lock.py computes the same.
compile() {
  local out="$1" pyver="$2"; shift 2
  local files=() hashed=() literals="" i sha tmp
  for i in "$@"; do
    if [ -f "$i" ]; then files+=("$i"); mapfile -t -O "${#hashed[@]}" hashed < <(with_includes "$i")
    else literals+="$i"$'\n'; hashed+=("$i"); fi
  done
  sha="$(for i in "${hashed[@]}"; do if [ -f "$i" ]; then cat "$i"; else printf '%s\n' "$i"; fi; done | sha256sum | cut -d' ' -f1)"
  local cmd=(uv pip compile --universal --python-version "$pyver" --no-header "${files[@]}")
  [ -z "$literals" ] || cmd+=(-)
  tmp="$(mktemp)"
  printf '%s' "$literals" | "$uv" "${cmd[@]:1}" --quiet -o "$tmp"
  {
    printf '# %s: constraints (pip install -c) for scripts/setup.sh; every transitive release pinned.\n' "$out"
    printf '# Made by scripts/lock.sh with uv %s: %s%s\n' \
      "$uv_version" "${cmd[*]}" "${literals:+ (stdin: $(printf '%s' "$literals" | tr '\n' ' ' | sed 's/ $//'))}"
    printf '# Refresh: scripts/lock.sh after changing an input; never edit by hand (docs/dev/testing.md "The lock").\n'
    printf '# input-sha256: %s (%s)\n' "$sha" "${hashed[*]}"
    cat "$tmp"
  } > "$out"
  rm -f "$tmp"
  log "$out: $(grep -c '^[a-zA-Z0-9]' "$out") pins (input-sha256 ${sha:0:12})"
}

compile requirements-lock.txt 3.11 requirements-dev.txt
compile requirements-lock-oldest.txt 3.11 requirements.txt requirements-test.txt "ansible-core==$oldest_core"
