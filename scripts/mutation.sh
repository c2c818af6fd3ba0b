#!/usr/bin/env bash
# Mutation testing of the measurement/decision code with mutmut 3 (docs/dev/testing.md, "Mutation testing").
#
#   scripts/mutation.sh [smoke|plan|all|MUTANT_GLOB...]   default: smoke
#
#   smoke  the smoke figures and fail policy (plugins/module_utils/smoke/{sse,measure,stats,policy,logs,metrics}.py)
#   plan   the plan validators (plugins/plugin_utils/plan/)
#   validators  the plan's validation rules and the value parsing they use (plan/resolve.py, plan/checks.py, coerce.py) alone:
#          a quicker run than "plan" when only those changed
#   all    all of these
#
# mutmut's configuration is the [mutmut] section of setup.cfg (which files are mutated, which tests run). The run
# happens on a copy of the tree (tracked + untracked-not-ignored files) in
# build/mutation/ansible_collections/gpufleet/kimi_k3/, so the working tree is never mutated and the tests import the
# mutated modules under their real names; mutmut's own state lives in build/mutation/mutants/. At the end
# scripts/mutation_report.py prints killed/total per file and every survivor; the report is also written to
# build/mutation/report.txt. Exit status: 0 when the run completed (survivors are findings to read, not a failure),
# 1 when mutmut could not run (e.g. the clean tests failed).
# Environment: KIMI_K3_MUTATION_JOBS (parallel mutants, default: number of CPUs), KIMI_K3_MUTATION_KEEP=1 (reuse
# the previous build/mutation/mutants results; only changed code is re-tested), KIMI_K3_MUTATION_NAMES (mutant
# names/globs to run instead of the whole scope).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here" || exit 2
py="$here/.venv/bin/python"
[ -x "$here/.venv/bin/mutmut" ] || { echo "mutmut is not installed: .venv/bin/pip install -r requirements-dev.txt" >&2; exit 1; }

scope="${1:-smoke}"
prefix="ansible_collections.gpufleet.kimi_k3."
case "$scope" in
  smoke) globs=("${prefix}plugins.module_utils.smoke.*") ;;
  plan) globs=("${prefix}plugins.plugin_utils.plan.*") ;;
  validators) globs=("${prefix}plugins.plugin_utils.plan.resolve*" "${prefix}plugins.plugin_utils.plan.checks*" "${prefix}plugins.module_utils.common.coerce*") ;;
  all) globs=() ;;
  *) globs=("$@") ;;
esac

# mutmut names a mutant after its file's path below the working directory and the tests must import the mutated
# module under that same name: so the copy lives at build/mutation/ansible_collections/gpufleet/kimi_k3/ and the
# [mutmut] paths of setup.cfg are rewritten below that prefix (build/mutation/setup.cfg).
work="$here/build/mutation"
coll="$work/ansible_collections/gpufleet/kimi_k3"
if [ "${KIMI_K3_MUTATION_KEEP:-0}" != 1 ]; then rm -rf "$work"; fi
mkdir -p "$coll"
# the tree as it is about to be committed
git ls-files -co --exclude-standard | while IFS= read -r f; do [ -e "$f" ] && [ "$f" != .venv ] && printf '%s\n' "$f"; done \
  | tar -cf - -T - | tar -xf - -C "$coll"
# test paths of setup.cfg that do not exist (yet) would make pytest fail: an empty folder instead
mkdir -p "$coll/tests/unit/plan_mistakes"
"$py" - "$here/setup.cfg" "$work/setup.cfg" "$scope" "$coll" <<'PYEOF'
import configparser, os, sys
cfg = configparser.ConfigParser()
cfg.read(sys.argv[1])
m = cfg["mutmut"]
scopes = cfg["kimi_k3_mutation"] if cfg.has_section("kimi_k3_mutation") else {}
tests = scopes.get(sys.argv[3] + "_tests", m.get("pytest_add_cli_args_test_selection", ""))
if sys.argv[3] + "_mutate" in scopes:  # generate mutants of the scope's files only (topology.py alone takes ~1 min)
    from fnmatch import fnmatch
    wanted, patterns = scopes[sys.argv[3] + "_mutate"].split(), m["only_mutate"].split()
    # the [mutmut] entries the scope names (or that match its globs), and the scope's files that an entry's glob
    # matches (plan_validate.py of the entry plan_*.py)
    keep = [p for p in patterns if p in wanted or any(fnmatch(p, w) for w in wanted)]
    keep += [w for w in wanted if w not in keep and any(fnmatch(w, p) for p in patterns)]
    m["only_mutate"] = "\n".join(keep)
m["pytest_add_cli_args_test_selection"] = "\n".join(t for t in tests.split() if os.path.exists(os.path.join(sys.argv[4], t)))
pre = "ansible_collections/gpufleet/kimi_k3/"
for key in ("source_paths", "only_mutate", "also_copy", "pytest_add_cli_args_test_selection"):
    m[key] = "\n" + "\n".join(pre + v for v in m.get(key, "").split() if v)
cfg.remove_section("kimi_k3_mutation")
with open(sys.argv[2], "w") as fh:
    cfg.write(fh)
PYEOF

cd "$work" || exit 2
# only mutants whose files exist in this tree (plan_*.py may not exist yet)
run_globs=()
for g in "${globs[@]}"; do
  f="${g//.//}"; f="${f%\*}"
  if compgen -G "${f}*.py" >/dev/null; then run_globs+=("$g"); else echo "[mutation] no file matches $g: skipped"; fi
done
if [ "$scope" != all ] && [ ${#run_globs[@]} -eq 0 ]; then echo "[mutation] nothing to mutate" >&2; exit 1; fi
# KIMI_K3_MUTATION_NAMES: mutant names or globs (space-separated) to run instead of the whole scope, with the
# scope's files and tests (e.g. the functions of an earlier run, to compare before and after new tests)
if [ -n "${KIMI_K3_MUTATION_NAMES:-}" ]; then read -ra run_globs <<< "$KIMI_K3_MUTATION_NAMES"; fi
export PYTHONDONTWRITEBYTECODE=1
# the copy's tests look for the shared parser fixtures where the working tree's would (tests/conftest.py)
export KIMI_K3_SHARED_FIXTURES="${KIMI_K3_SHARED_FIXTURES:-$(dirname "$here")/shared/fixtures}"
"$here/.venv/bin/mutmut" run --max-children "${KIMI_K3_MUTATION_JOBS:-$(nproc)}" "${run_globs[@]}" \
  > "$work/mutmut-run.log" 2>&1
rc=$?
tr '\r' '\n' < "$work/mutmut-run.log" | grep -Ev '^(\S )?(Generating mutants|Running|Listing|Filtering)|^\s*$' | tail -8
[ $rc -eq 0 ] || { echo "[mutation] mutmut run failed (rc $rc), see $work/mutmut-run.log" >&2; exit 1; }
"$py" "$here/scripts/mutation_report.py" "$work/mutants" "${run_globs[@]}" | tee "$work/report.txt"
