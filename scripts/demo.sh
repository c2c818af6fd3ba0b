#!/usr/bin/env bash
# The one-command demo (README command 1): on a fresh Debian/Ubuntu machine, as root, set up everything and
# deploy Kimi-K3 (stand-in) to the local rehearsal cluster end to end, then print the smoke report and timings.
#
#   scripts/demo.sh                      GB300 rehearsal cluster (2 trays, TP8 over "NVLink")
#   scripts/demo.sh --cluster mi355x     MI355X rehearsal cluster (2 nodes, DEP16 hybrid LB over "RDMA")
#   scripts/demo.sh --cluster cpu        the real engine: vLLM's CPU build on 2 CPU nodes (TP 2 over gloo) serving
#                                        a tiny locally made model (first run: ~10 min to build the engine image)
#   scripts/demo.sh --cluster all        all three, one after the other
#   scripts/demo.sh --down               remove the rehearsal cluster afterwards (default: leave it up)
#
# Steps: host packages (Docker engine, registry, debootstrap: sim/install.sh) -> Python venv (scripts/setup.sh)
# -> rehearsal cluster (sim/simctl up) -> playbooks/deploy.yml (plan, preflight, image, launch, smoke).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
clusters=(gb300)
down=0
usage() { sed -n '2,14p' "$0"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --cluster)
      case "${2:-}" in
        gb300|mi355x|cpu) clusters=("$2") ;;
        all) clusters=(gb300 mi355x cpu) ;;
        *) echo "--cluster needs a value: gb300, mi355x, cpu or all${2:+ (not \"$2\")}" >&2; usage >&2; exit 2 ;;
      esac
      shift ;;
    --down) down=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "unknown option $1" >&2; usage >&2; exit 2 ;;
  esac
  shift
done
[ "$(id -u)" = 0 ] || { echo "run as root (it installs packages and starts Docker engines)" >&2; exit 2; }

declare -a step_names=() step_secs=()
t_all=$(date +%s)
step() {  # step NAME command... -> the command's exit status (a failed step is marked in the timing table)
  local name="$1"; shift
  local t0 status=0; t0=$(date +%s)
  printf '\n==> %s\n' "$name"
  "$@" || status=$?
  [ "$status" = 0 ] || name="$name (FAILED, exit $status)"
  step_names+=("$name"); step_secs+=($(( $(date +%s) - t0 )))
  return "$status"
}
# shellcheck disable=SC2317  # called by the EXIT trap below
timing() {
  printf '\n==> timing\n'
  for i in "${!step_names[@]}"; do printf '  %-40s %5ss\n' "${step_names[$i]}" "${step_secs[$i]}"; done
  printf '  %-40s %5ss\n' "total" "$(( $(date +%s) - t_all ))"
}
# The table is printed however the script ends: after the last step, or when set -e stops it at a failed setup step.
trap timing EXIT

if ! command -v dockerd >/dev/null || ! command -v debootstrap >/dev/null || ! command -v docker-registry >/dev/null \
   || ! command -v make >/dev/null || ! python3 -c 'import ensurepip' 2>/dev/null; then
  step "host packages" bash -c 'export DEBIAN_FRONTEND=noninteractive; apt-get update -qq &&
    apt-get install -y -qq --no-install-recommends make git python3 python3-venv openssh-client ca-certificates >/dev/null &&
    sim/install.sh'
fi
step "python venv + collection link" scripts/setup.sh
for c in "${clusters[@]}"; do
  step "rehearsal cluster $c up" sim/simctl up --cluster "$c"
done

export ANSIBLE_CONFIG="$here/ansible.cfg" ANSIBLE_INJECT_FACT_VARS=false
rc=0
for c in "${clusters[@]}"; do
  inv="inventories/sim-$c"
  art="$here/artifacts/demo-$c"
  step "deploy.yml on $inv" .venv/bin/ansible-playbook playbooks/deploy.yml -i "$inv" \
      -e kimi_k3_artifacts_dir="$art" -e launch_poll_interval_s=2 -e launch_progress_every_s=10 || rc=$?
  # An inventory that does not parse (the deploy failed on it) leaves no report to show, not an exit under set -e.
  head="$(.venv/bin/ansible-inventory -i "$inv" --graph vllm_head 2>/dev/null | sed -n 's/^ *|--//p' | head -1)" \
    || head=""
  if [ -f "$art/smoke/smoke-$head.md" ]; then
    printf '\n==> smoke report (%s)\n' "$art/smoke/smoke-$head.md"
    cat "$art/smoke/smoke-$head.md"
  fi
  printf '\nartifacts: %s (plan/, preflight-report.md, smoke/)\n' "$art"
done
if [ "$down" = 1 ]; then
  step "rehearsal cluster down" sim/simctl down || { s=$?; [ "$rc" != 0 ] || rc=$s; }
fi
[ "$rc" = 0 ] || printf '\ndemo: a step failed (exit %s): see its output above and the artifacts\n' "$rc" >&2
exit "$rc"
