#!/usr/bin/env bash
# Render the plan files of every inventory under inventories/ into OUT/<inventory>/ (contacts no host).
# Used to prove a refactoring leaves plan files byte-identical:
#   scripts/plan_snapshot.sh /tmp/plan-before   # on the old tree
#   scripts/plan_snapshot.sh /tmp/plan-after    # on the new tree
#   diff -r /tmp/plan-before /tmp/plan-after
# Sim inventories get their image from sim/simctl up (group_vars/all/sim_image.yml); when that file is absent a
# fixed stand-in digest is passed so they render too.
set -euo pipefail
out=${1:?usage: $0 OUTDIR}
cd "$(dirname "$0")/.."
SIM_IMAGE=${SIM_IMAGE:-127.0.0.1:5000/vllm/vllm-openai@sha256:$(printf 'e%.0s' $(seq 64))}
# The examples read the API key from the environment (refused without one); a placeholder renders them.
export KIMI_K3_API_KEY=${KIMI_K3_API_KEY:-plan-snapshot-placeholder}
rc=0
for inv in inventories/*/; do
  name=$(basename "$inv")
  extra=()
  if [[ $name == sim-* && ! -f $inv/group_vars/all/sim_image.yml ]]; then
    image=$SIM_IMAGE
    [[ $name == sim-mi355x ]] && image=${image/vllm-openai@/vllm-openai-rocm@}
    extra=(-e "kimi_k3_image=$image" -e "kimi_k3_router_image=${image%%/*}/vllm-router@${image#*@}")
  fi
  rm -rf "${out:?}/$name"
  if ! ansible-playbook playbooks/plan.yml -i "$inv" -e "plan_dir=$out/$name" "${extra[@]}" >"$out.$name.log" 2>&1; then
    echo "plan_snapshot: $name refused, see $out.$name.log" >&2
    rc=1
  fi
done
exit $rc
