#!/usr/bin/env bash
# Benchmark (issue #35, item 4): scripts/demo.sh --cluster cpu on a busy machine. CPU hogs (busy loops, each ended
# by `timeout` and by this script's exit) keep the load average above 4 on 2 cores while the demo deploys the real
# engine RUNS times, each from a torn-down deployment (playbooks/teardown.yml first, so the fabric step and the
# start-up really run under load); then once with a fault that breaks the deploy (fabric_port_blocked on the head),
# where the demo must exit non-zero. Prints per run: exit status, seconds, the load average's min / mean / max.
#
#   benchmarks/demo_under_load.sh              RUNS=3 HOGS=4 (environment), logs in build/demo-under-load/
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here" || exit 2
runs="${RUNS:-3}" hogs="${HOGS:-4}" hog_limit_s="${HOG_SECONDS:-5400}"
out="$here/build/demo-under-load"
mkdir -p "$out"
declare -a pids=()
# shellcheck disable=SC2317  # called by the EXIT trap
stop() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; sim/simctl fault cpu-node01 --clear >/dev/null 2>&1 || true; }
trap stop EXIT
for _ in $(seq "$hogs"); do timeout "$hog_limit_s" sh -c 'while :; do :; done' & pids+=("$!"); done
( while :; do printf '%s %s\n' "$(date +%s)" "$(cut -d' ' -f1 /proc/loadavg)"; sleep 5; done ) > "$out/load.txt" &
pids+=("$!")
export ANSIBLE_CONFIG="$here/ansible.cfg" ANSIBLE_INJECT_FACT_VARS=false
sim/simctl up --cluster cpu >/dev/null || exit 2
sleep 60  # the 1-minute load average climbs past 4 before the first run

load_of() {  # load_of T0 T1 -> "min mean max" of the samples between the two times
  awk -v a="$1" -v b="$2" '$1 >= a && $1 <= b { n++; s += $2; if (n == 1 || $2 < lo) lo = $2; if ($2 > hi) hi = $2 }
    END { if (n) printf "%.2f %.2f %.2f", lo, s / n, hi; else print "- - -" }' "$out/load.txt"
}
one() {  # one NAME -> the demo's exit status; a row on stdout
  local name="$1" t0 t1 rc=0
  .venv/bin/ansible-playbook playbooks/teardown.yml -i inventories/sim-cpu >"$out/$name.teardown.log" 2>&1 || true
  t0=$(date +%s)
  scripts/demo.sh --cluster cpu >"$out/$name.log" 2>&1 || rc=$?
  t1=$(date +%s)
  printf '%-8s exit %-3s %5ss  load min/mean/max %s\n' "$name" "$rc" "$(( t1 - t0 ))" "$(load_of "$t0" "$t1")"
  return "$rc"
}
passed=0
for i in $(seq "$runs"); do one "run-$i" && passed=$(( passed + 1 )); done
sim/simctl fault cpu-node01 fabric_port_blocked >/dev/null
fault_rc=0
one "fault" || fault_rc=$?
sim/simctl fault cpu-node01 --clear >/dev/null
printf 'passed %s of %s under load; with fabric_port_blocked the demo exited %s (%s)\n' "$passed" "$runs" \
  "$fault_rc" "$([ "$fault_rc" != 0 ] && echo non-zero, as it must || echo ZERO: wrong)"
[ "$passed" = "$runs" ] && [ "$fault_rc" != 0 ]
