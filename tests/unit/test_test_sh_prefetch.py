"""scripts/test.sh builds the real engine's site (sim/simctl prefetch-engine, at low priority) and then every
cluster's images (sim/simctl images, at normal priority) in the background from the first stage after setup when the
realengine stage is to run, waits for them before realengine, shows them in the summary and never fails the run for
them; the sim stage then keeps the registry and images for realengine (per-cluster down). Run against a copy of the
script with stand-ins for the venv's python and sim/simctl."""
import os
import shutil
import subprocess
import time

from tests.unit.sim.test_simctl_router import REPO

# python stand-in: every pytest run passes; `python -c` (the timings note) prints nothing
PYTHON = """#!/bin/sh
[ "$1" = -m ] && echo "1 passed in 0.01s"
exit 0
"""
# simctl stand-in: records what it was asked and when; prefetch-engine sleeps, then exits with $PREFETCH_RC;
# status says nothing runs
SIMCTL = """#!/bin/sh
[ "$1" = status ] && { echo '{}'; exit 0; }
echo "$(date +%s.%N) start $1 nice=$(nice) $2 $3" >> "$CALLS"
if [ "$1" = prefetch-engine ]; then
  echo $$ > "$CALLS.pid"
  sleep "${PREFETCH_SLEEP:-1}"
  echo "engine site /c/site-x: built in 1.0 s"
  rc="${PREFETCH_RC:-0}"
else
  rc=0
fi
echo "$(date +%s.%N) end $1" >> "$CALLS"
exit "$rc"
"""
# molecule stand-in: records the scenario, takes $MOLECULE_SLEEP seconds, fails the scenario named $MOLECULE_FAIL;
# with $MOLECULE_UNTIL it also waits (at most 60 s) until that text is in the calls: an order that holds however
# slowly a busy machine starts the other stage
MOLECULE = """#!/bin/sh
echo "$(date +%s.%N) start molecule $3" >> "$CALLS"
sleep "${MOLECULE_SLEEP:-0}"
n=0
while [ -n "${MOLECULE_UNTIL:-}" ] && ! grep -q -- "$MOLECULE_UNTIL" "$CALLS" && [ $n -lt 600 ]; do
  sleep 0.1; n=$((n + 1))
done
echo "$(date +%s.%N) end molecule $3" >> "$CALLS"
[ "$3" != "${MOLECULE_FAIL:-}" ]
"""
# what the script exports to its stages: never inherited from the shell that runs these tests
ENV_OF_THE_RUN = ("KIMI_K3_STAGES", "KIMI_K3_SIM_WAS_UP", "KIMI_K3_REALENGINE_NEXT", "KIMI_K3_MOLECULE_NEXT",
                  "KIMI_K3_BESIDE", "KIMI_K3_BESIDE_ACTIVE")


def _repo(tmp_path):
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(os.path.join(REPO, "scripts", "test.sh"), str(repo / "scripts" / "test.sh"))
    (repo / "sim" / "clusters").mkdir(parents=True)
    (repo / "sim" / "clusters" / "cpu.yml").write_text("{}\n")
    (repo / ".venv" / "bin").mkdir(parents=True)
    for path, text in ((repo / ".venv" / "bin" / "python", PYTHON), (repo / "sim" / "simctl", SIMCTL)):
        path.write_text(text)
        path.chmod(0o755)
    return repo


def _run(repo, tmp_path, stages, **env):
    calls = tmp_path / "calls"
    e = dict(os.environ, CALLS=str(calls), KIMI_K3_BG_IMAGES="0")
    e.update(env)
    for name in ENV_OF_THE_RUN:
        e.pop(name, None)
    p = subprocess.run(["bash", str(repo / "scripts" / "test.sh"), "--stage", stages], cwd=str(repo), env=e,
                       capture_output=True, text=True, timeout=120, check=False)
    lines = calls.read_text().splitlines() if calls.exists() else []
    return p, [line.split()[1:] for line in lines]


def _alive(pid_file):
    try:
        os.kill(int(pid_file.read_text()), 0)
    except (OSError, ValueError):
        return False
    return True


def test_the_site_is_built_in_the_background_and_waited_for_before_realengine(tmp_path):
    repo = _repo(tmp_path)
    p, calls = _run(repo, tmp_path, "unit,realengine", PREFETCH_SLEEP="3", KIMI_K3_BG_IMAGES="1")
    assert p.returncode == 0, p.stdout + p.stderr
    order = [c[:2] for c in calls]
    # started before the unit stage ended (the unit stage is one pytest stand-in: well under 3 s), then the images,
    # both ended before up
    assert order.index(["start", "prefetch-engine"]) == 0
    assert order.index(["end", "prefetch-engine"]) < order.index(["start", "images"]) < order.index(["end", "images"])
    assert order.index(["end", "images"]) < order.index(["start", "up"])
    assert calls[0][2] == "nice=19" and calls[order.index(["start", "images"])][2] == "nice=%d" % os.nice(0)
    assert "engine site /c/site-x: built" in (repo / "build" / "test-logs" / "prefetch-engine.log").read_text()
    summary = (repo / "build" / "test-logs" / "summary.txt").read_text()
    row = [line for line in summary.splitlines() if line.startswith("prefetch ")]
    assert len(row) == 1 and " PASS " in row[0] and "background: engine site /c/site-x: built" in row[0]
    assert summary.index("prefetch ") < summary.index("realengine ")
    assert [line for line in summary.splitlines() if line.startswith("images ") and " PASS " in line]
    assert not _alive(tmp_path / "calls.pid")


def test_the_sim_stage_keeps_registry_and_images_when_realengine_follows(tmp_path):
    repo = _repo(tmp_path)
    (repo / "tests" / "integration").mkdir(parents=True)
    (repo / "molecule").mkdir()
    env = {"KIMI_K3_ALLOW_EMPTY": "1", "KIMI_K3_SIM_WORKERS": "1"}
    p, calls = _run(repo, tmp_path, "sim,realengine", **env)
    assert p.returncode == 0, p.stdout + p.stderr
    downs = [c[3:] for c in calls if c[:2] == ["start", "down"]]
    # the sim stage: each of its clusters alone; realengine: everything
    assert downs == [["--cluster", c] for c in ("gb300", "mi355x", "fleet", "gb300pd")] + [[]]
    (tmp_path / "calls").unlink()
    p, calls = _run(repo, tmp_path, "sim", **env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert [c[3:] for c in calls if c[:2] == ["start", "down"]] == [[]]


def test_a_failed_prefetch_fails_no_stage(tmp_path):
    repo = _repo(tmp_path)
    p = _run(repo, tmp_path, "unit,realengine", PREFETCH_RC="3")[0]
    assert p.returncode == 0, p.stdout + p.stderr
    summary = (repo / "build" / "test-logs" / "summary.txt").read_text()
    row = [line for line in summary.splitlines() if line.startswith("prefetch ")][0]
    assert " WARN " in row and "rc 3" in row and "realengine builds the site itself" in row
    assert "TOTAL    PASS" in summary


def test_no_prefetch_without_realengine_or_when_realengine_comes_first(tmp_path):
    repo = _repo(tmp_path)
    p, calls = _run(repo, tmp_path, "unit")
    assert p.returncode == 0 and calls == []
    p, calls = _run(repo, tmp_path, "realengine")
    assert p.returncode == 0
    assert [c[1] for c in calls if c[0] == "start"] == ["up", "down"]
    assert "prefetch " not in (repo / "build" / "test-logs" / "summary.txt").read_text()


def test_an_interrupted_run_leaves_no_prefetch_behind(tmp_path):
    repo = _repo(tmp_path)
    calls = tmp_path / "calls"
    e = dict(os.environ, CALLS=str(calls), PREFETCH_SLEEP="60", KIMI_K3_BG_IMAGES="0")
    for name in ENV_OF_THE_RUN:
        e.pop(name, None)
    # the unit stage's python stand-in waits, so the run is in the unit stage with the prefetch running when the
    # script is ended by a TERM it does not trap: the prefetch notices that the run is gone and ends itself
    (repo / ".venv" / "bin" / "python").write_text("#!/bin/sh\nsleep 3\n")
    p = subprocess.Popen(["bash", str(repo / "scripts" / "test.sh"), "--stage", "unit,realengine"], cwd=str(repo),
                         env=e, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pid_file = tmp_path / "calls.pid"
    for attempt in range(100):
        if pid_file.exists() and pid_file.read_text().strip():
            break
        time.sleep(0.1)
    assert _alive(pid_file)
    p.terminate()
    p.wait(timeout=30)
    for attempt in range(50):
        if not _alive(pid_file):
            break
        time.sleep(0.1)
    assert not _alive(pid_file)


def _molecule_repo(tmp_path):
    repo = _repo(tmp_path)
    (repo / "tests" / "integration").mkdir(parents=True)
    for scenario in ("default", "deploy-mi355x"):
        (repo / "molecule" / scenario).mkdir(parents=True)
        (repo / "molecule" / scenario / "molecule.yml").write_text("{}\n")
    (repo / ".venv" / "bin" / "molecule").write_text(MOLECULE)
    (repo / ".venv" / "bin" / "molecule").chmod(0o755)
    return repo


def test_molecule_runs_beside_realengine_and_the_run_waits_for_it(tmp_path):
    repo = _molecule_repo(tmp_path)
    p, calls = _run(repo, tmp_path, "sim,molecule,realengine", KIMI_K3_SIM_WORKERS="1", MOLECULE_SLEEP="2",
                    MOLECULE_UNTIL="start up nice=[0-9-]* --cluster cpu")
    assert p.returncode == 0, p.stdout + p.stderr
    events = [(c[0], c[1], c[3:]) for c in calls]
    # the sim stage leaves gb300 and mi355x to molecule; realengine's cluster comes up while molecule runs
    assert events.index(("start", "molecule", [])) < events.index(("start", "up", ["--cluster", "cpu"])) \
        < events.index(("end", "molecule", []))
    downs = [c[3:] for c in calls if c[:2] == ["start", "down"]]
    # sim: the router's clusters; realengine: its own; molecule: its two; then the run: everything, once both ended
    assert downs[:2] == [["--cluster", "fleet"], ["--cluster", "gb300pd"]] and downs[-1] == []
    assert sorted(map(tuple, downs[2:-1])) == [("--cluster", "cpu"), ("--cluster", "gb300"), ("--cluster", "mi355x")]
    assert [c[1] for c in calls if c[0] == "start"][-1] == "down" and len([d for d in downs if d == []]) == 1
    summary = (repo / "build" / "test-logs" / "summary.txt").read_text()
    row = [line for line in summary.splitlines() if line.startswith("molecule ")]
    assert len(row) == 1 and " PASS " in row[0] and "passed [default deploy-mi355x]" in row[0]
    # its own seconds (from its first scenario's start to its last one's end), not the time until the run waited
    stamps = [float(line.split()[0]) for line in (tmp_path / "calls").read_text().splitlines() if " molecule " in line]
    assert abs(float(row[0].split()[2]) - (stamps[-1] - stamps[0])) < 1.5 and stamps[-1] - stamps[0] >= 4, row[0]
    assert "[molecule] [test] molecule test -s deploy-mi355x" in p.stdout


def test_a_failed_molecule_scenario_beside_realengine_fails_the_run(tmp_path):
    repo = _molecule_repo(tmp_path)
    p = _run(repo, tmp_path, "sim,molecule,realengine", KIMI_K3_SIM_WORKERS="1", MOLECULE_FAIL="deploy-mi355x")[0]
    assert p.returncode != 0
    summary = (repo / "build" / "test-logs" / "summary.txt").read_text()
    row = [line for line in summary.splitlines() if line.startswith("molecule ")][0]
    assert " FAIL " in row and "failed [deploy-mi355x]" in row and "TOTAL    FAIL" in summary


def test_molecule_as_the_last_stage_runs_in_the_foreground_and_takes_the_sim_down(tmp_path):
    repo = _molecule_repo(tmp_path)
    p, calls = _run(repo, tmp_path, "molecule")
    assert p.returncode == 0, p.stdout + p.stderr
    assert [c[1] for c in calls if c[0] == "start"] == ["molecule", "molecule", "down"]
    assert [c[3:] for c in calls if c[:2] == ["start", "down"]] == [[]]
