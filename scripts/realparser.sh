#!/usr/bin/env bash
# vLLM's own parser as the judge (the optional `realparser` stage of scripts/test.sh; docs/dev/testing.md).
#
#   scripts/realparser.sh [--versions 0.28.0,0.33.0] [--venv-dir DIR] [--no-install]
#
# For every supported vLLM release (data/vllm_flags/vllm-<v>.json): a cached venv with that release from PyPI
# (first run: ~6-10 GB and a few minutes per release), the snapshot regenerated from the real parser and diffed
# against the shipped one, and every plan the project renders (example inventories, golden/unit tests, the mistake
# corpus's valid bases) parsed by that release's real `vllm serve` parser. No GPU; the engine is never started.
# Venvs: $KIMI_K3_VLLM_VENVS (default ~/.cache/kimi-k3/vllm-venvs). Report: build/realparser/report.{md,json}.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
[ -x .venv/bin/python ] || { echo "no .venv: run scripts/setup.sh first" >&2; exit 2; }
[ -d build/collections/ansible_collections ] || scripts/setup.sh
export PATH="$here/.venv/bin:$PATH"
# build/collections: the collection's import root (ansible_collections.gpufleet.kimi_k3), as tests/conftest.py sets it
export PYTHONPATH="$here/build/collections${PYTHONPATH:+:$PYTHONPATH}"
exec .venv/bin/python -m tests.realparser.run "$@"
