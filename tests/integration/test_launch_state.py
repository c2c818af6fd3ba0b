"""Fail fast, stay whole, say why, secrets out of sight - on the GB300 rehearsal pair, one deployment for the module.

(a) an upgrade to the image whose head crashes at start fails and is rolled back within 90 s with the default
    launch settings (only the sim limits of preflight are relaxed, preflight does not run in upgrade.yml);
(b) a follower that dies while loading -> the group fails within seconds, one summary naming the follower first
    with its log tail (once; the recap charges the follower), and launch-<host>.log in the artifacts directory;
(c) a deploy with a digest the registry does not have fails at the image stage naming every node and the reference,
    before any container is touched, and leaves the deployed record (state.json, the deployed -> plans/<id> pointer
    and its files) describing what runs;
(d) deploy -vvv with an API key and an HF token never shows either (runner stdout, every event, docker inspect,
    container argv, plan files, artifacts); the containers get them as read-only files (HF_TOKEN_PATH,
    VLLM_API_KEY_FILE), the stand-in found the token through HF_TOKEN_PATH (it refuses to start without one here)
    and the API needs the key; a keyless deployment afterwards removes the secret files again;
(e) a worker whose container is gone: the next deploy restarts the group and says which node's container was
    missing; status.yml reports drift per node, and none after the deploy.

The interrupted upgrade and the upgrade to a second image are drilled on the real engine
(tests/integration/test_real_engine.py c, e), not here.

Needs `sim/simctl up --cluster gb300` (or KIMI_SIM_AUTO_UP=1). The module deploys once and shares one artifacts
directory (the state record lives there); every test leaves the inventory's deployment healthy, and the `deployed`
fixture deploys again only when a test did not (so a failing test cannot leave the next one a wrong deployment).
The deployment is torn down at the end.
"""
import glob
import json
import os
import re
import secrets
import tempfile
import threading
import time

import pytest

from tests.helpers.http import status as _http
from tests.helpers.runner import failed_tasks, run_playbook

pytestmark = pytest.mark.sim

NAME = "vllm-kimi-k3"
HEAD, WORKER = "gb300-tray01", "gb300-tray02"
FOLLOWER = WORKER
HEAD_URL = "http://127.0.0.11:8000"
# Only what the shared sim needs; the launch watch runs with its defaults.
SIM = {"preflight_min_free_disk_gb": 1, "preflight_min_shm": "32m", "preflight_max_gpu_memory_used_pct": 100}
# (b) watches the launch closely: it must fail well within its ready timeout
FAST_LAUNCH = {"launch_poll_interval_s": 2, "launch_ready_timeout_s": 60, "launch_progress_every_s": 10}


def _inspect(sim, node):
    p = sim.docker(node, "inspect", NAME, check=False)
    return json.loads(p.stdout)[0] if p.returncode == 0 else None


def _images(sim):
    return [(_inspect(sim, n["name"]) or {}).get("Config", {}).get("Image") for n in sim.nodes]


def _ids(sim):
    out = {}
    for n in sim.nodes:
        c = _inspect(sim, n["name"])
        out[n["name"]] = (c["Id"], c["State"]["StartedAt"], c["State"]["Running"]) if c else None
    return out


def _running_plan(sim):
    """What each node runs: the image and the plan's hash label (any change of the plan, its env included, changes
    the hash), or None when its container is not running."""
    out = {}
    for n in sim.nodes:
        c = _inspect(sim, n["name"])
        out[n["name"]] = None if not c or not c["State"]["Running"] else (
            c["Config"]["Image"], (c["Config"].get("Labels") or {}).get("io.gpufleet.kimi_k3.plan_hash"))
    return out


@pytest.fixture(scope="module")
def art():
    return tempfile.mkdtemp(prefix="launch-state-art-")


def _state(art):
    with open(os.path.join(art, "plan", "state.json")) as f:
        return json.load(f)


def _run(sim, art, playbook, extra=None, **kw):
    ev = dict(SIM, kimi_k3_artifacts_dir=art, **(extra or {}))
    return run_playbook(playbook, sim.inventory, extravars=ev, timeout=kw.pop("timeout", 900), **kw)


@pytest.fixture(scope="module")
def sim(sim_cluster, art):
    s = sim_cluster("gb300")
    yield s
    r = run_playbook("teardown.yml", s.inventory)
    assert r.status == "successful", failed_tasks(r)


def _deploy(sim, art):
    r = _run(sim, art, "deploy.yml", skip_tags="preflight")
    assert r.status == "successful", failed_tasks(r)
    assert _http(HEAD_URL + "/health") == 200


@pytest.fixture(scope="module")
def inventory_deployment(sim, art):
    """deploy.yml once for the module -> what each node runs for the inventory's deployment."""
    _deploy(sim, art)
    return _running_plan(sim)


@pytest.fixture()
def deployed(sim, art, inventory_deployment):
    """The inventory's deployment, healthy and keyless, before each test; deployed again only when the test before
    left anything else running."""
    if not (_running_plan(sim) == inventory_deployment and _http(HEAD_URL + "/health") == 200
            and _http(HEAD_URL + "/v1/models") == 200):
        _deploy(sim, art)
        assert _running_plan(sim) == inventory_deployment
    return sim


def _text(runner):
    """The run's stdout with whitespace runs (YAML result folding at ~80 columns) collapsed to one space."""
    with open(os.path.join(runner.config.artifact_dir, "stdout")) as f:
        return " ".join(f.read().split())


def test_a_head_crash_upgrade_rolls_back_within_90s(deployed, art):
    sim = deployed
    before = _images(sim)
    deployed_id = _state(art)["deployed"]["plan_id"]
    r = _run(sim, art, "upgrade.yml", {"kimi_k3_image": sim.images["standin-broken"]})
    assert r.status == "failed"
    assert r.elapsed_s < 90, r.elapsed_s
    msgs = [m for h, t, m in failed_tasks(r) if t == "Fail the upgrade after a successful rollback"]
    assert len(msgs) == 1, failed_tasks(r)
    assert "The vLLM group failed: %s: its vLLM container stopped" % HEAD in msgs[0], msgs[0]
    summary = [m for h, t, m in failed_tasks(r) if t == "Fail with one summary of the group"]
    assert [h for h, t, m in failed_tasks(r) if t == "Fail with one summary of the group"] == [HEAD]
    assert "stopped waiting: %s failed first" % HEAD in summary[0]
    assert "illegal memory access" in summary[0]
    assert _images(sim) == before
    assert _http(HEAD_URL + "/health") == 200
    st = _state(art)
    assert st["upgrade"] is None and st["deployed"]["plan_id"] == deployed_id


class _KillFollowerWhenStarted(threading.Thread):
    """Kill the follower's new vLLM container as soon as it runs (while the stand-in loads its weights)."""

    def __init__(self, sim, old_id, deadline_s=120):
        super().__init__(daemon=True)
        self.sim, self.old_id, self.deadline = sim, old_id, time.monotonic() + deadline_s
        self.killed_id, self.kill_result, self.stop = None, None, threading.Event()

    def run(self):
        while not self.stop.is_set() and time.monotonic() < self.deadline:
            c = _inspect(self.sim, FOLLOWER)
            if c and c["Id"] != self.old_id and c["State"]["Running"]:
                time.sleep(1)          # let it log its first loading lines
                p = self.sim.docker(FOLLOWER, "kill", c["Id"], check=False)
                self.kill_result = (p.returncode, p.stderr.strip())
                if p.returncode == 0:
                    self.killed_id = c["Id"]
                    return
            time.sleep(0.2)


def test_b_follower_failing_to_start_fails_with_its_log(deployed, art):
    """The group is restarted with a longer simulated weight load (VLLM_STANDIN_LOAD_S=10, a cluster-wide knob, so
    the plan still agrees across nodes) and, as soon as the new follower container runs, it is killed through its
    node's engine (`docker kill`, SIGKILL) - what an OOM kill or a crashed process looks like to the launch role.
    kimi_k3_* cluster variables must agree across nodes, so a per-host broken image or env is not an option. The
    failing launch writes into an artifacts directory of its own, so the launch log read below is its own."""
    sim = deployed
    old = _ids(sim)
    own_art = tempfile.mkdtemp(prefix="launch-state-follower-art-")
    killer = _KillFollowerWhenStarted(sim, old[FOLLOWER][0] if old[FOLLOWER] else None)
    killer.start()
    try:
        r = _run(sim, own_art, "launch.yml", dict(FAST_LAUNCH, kimi_k3_extra_env={"VLLM_STANDIN_LOAD_S": "10"}))
    finally:
        killer.stop.set()
        killer.join(10)
    try:
        assert killer.killed_id, "the follower's new container was not killed: %s" % (killer.kill_result,)
        assert r.status == "failed", (killer.killed_id, _ids(sim))
        # fails well within launch_ready_timeout_s (60): the dead follower is noticed, not waited out
        assert r.elapsed_s < 60 + 30, r.elapsed_s
        fails = [(h, m) for h, t, m in failed_tasks(r) if t == "Fail with one summary of the group"]
        assert len(fails) == 1, failed_tasks(r)
        host, msg = fails[0]
        # the follower is named as the node that failed first, and the recap charges it, not the head
        assert host == FOLLOWER, fails
        assert msg.startswith("The vLLM group failed: %s: its vLLM container stopped" % FOLLOWER), msg[:300]
        logs = sim.docker(FOLLOWER, "logs", "--tail", "200", killer.killed_id, check=False)
        tail = [ln.strip() for ln in (logs.stdout + logs.stderr).splitlines() if ln.strip()]
        assert tail, "the killed follower logged nothing"
        assert tail[-1] in msg, (tail[-3:], msg[-2000:])
        assert msg.count(tail[-1]) == 1, "the log tail is shown more than once"
        line = [ln for ln in msg.splitlines() if ln.startswith("  %s:" % FOLLOWER)][0]
        assert "exit code 137" in line, line
        logfile = os.path.join(own_art, "launch-%s.log" % FOLLOWER)
        assert os.path.exists(logfile), os.listdir(own_art)
        with open(logfile) as f:
            assert tail[-1] in f.read()
    finally:
        # the inventory's deployment again, with the module deployment's own variables (launch timeouts can be part
        # of the plan, and another plan would make the next test's `deployed` deploy once more)
        _run(sim, art, "launch.yml")


def _role(event):
    """Short role name of a runner event (``gpufleet.kimi_k3.launch`` -> ``launch``)."""
    return str(event["event_data"].get("role", "")).rsplit(".", maxsplit=1)[-1]


def test_c_absent_digest_fails_before_any_container_and_keeps_the_deployed_record(deployed, art):
    sim = deployed
    st = _state(art)
    link = os.path.join(art, "plan", "deployed")
    target = os.readlink(link)
    with open(os.path.join(link, HEAD + ".json")) as f:
        head_plan = f.read()
    repo = sim.images["standin-a"].split("@", 1)[0]
    ref = repo + "@sha256:" + "0" * 64
    before = _ids(sim)
    # preflight skipped: it does not touch the image, and on the shared sim another session's injected node fault
    # would fail the run at that stage instead (smoke never runs after a failed stage anyway)
    r = _run(sim, art, "deploy.yml", {"kimi_k3_image": ref}, skip_tags="preflight")
    assert r.status == "failed"
    fails = failed_tasks(r)
    assert fails, "no failed task"
    text = "\n".join(m for h, t, m in fails)
    for n in sim.nodes:
        assert n["name"] in text, text
    assert ref in text, text
    # nothing of the launch stage ran, and the containers are the same ones, still running
    launch = [e for e in r.events if e.get("event", "").startswith("runner_on_") and _role(e) == "launch"]
    assert launch == [], [e["event_data"].get("task") for e in launch]
    assert _ids(sim) == before
    assert _http(HEAD_URL + "/health") == 200
    after = _state(art)
    assert after["deployed"] == st["deployed"]
    assert os.readlink(link) == target
    with open(os.path.join(link, HEAD + ".json")) as f:
        assert f.read() == head_plan
    assert json.loads(head_plan)["image"] == _inspect(sim, HEAD)["Config"]["Image"]
    # the failed plan is kept beside it, by its own id
    kept = os.listdir(os.path.join(art, "plan", "plans"))
    assert any(ref in open(os.path.join(art, "plan", "plans", k, HEAD + ".json")).read() for k in kept)


def test_d_secrets_never_shown(deployed, art):
    sim = deployed
    key, token = "sk-" + secrets.token_hex(16), "hf_" + secrets.token_hex(16)
    extra = {"kimi_k3_api_key": key, "kimi_k3_hf_token": token,
             "kimi_k3_extra_env": {"VLLM_STANDIN_LOAD_S": "3", "VLLM_STANDIN_REQUIRE_HF_TOKEN": "1"},
             # a stand-in switch (require the token file), not a secret: the plan refuses secret-looking names
             "kimi_k3_extra_env_not_secret": ["VLLM_STANDIN_REQUIRE_HF_TOKEN"]}
    # every stage, preflight included, at -vvv
    r = _run(sim, art, "deploy.yml", extra, verbosity=3)
    assert r.status == "successful", failed_tasks(r)
    try:
        with open(os.path.join(r.config.artifact_dir, "stdout")) as f:
            stdout = f.read()
        assert "ESTABLISH SSH CONNECTION" in stdout or "<127.0.0.11>" in stdout, "not a -vvv run"
        for secret in (key, token):
            assert secret not in stdout, "secret in the runner's stdout"
            assert secret not in _text(r), "secret in the runner's stdout (folded)"
            for ev in glob.glob(os.path.join(r.config.artifact_dir, "job_events", "*.json")):
                with open(ev) as f:
                    assert secret not in f.read(), "secret in event %s" % ev
        # the whole docker inspect, the container argv (what ps shows): no secret; the secrets are read-only files
        for n in sim.nodes:
            raw = sim.docker(n["name"], "inspect", NAME).stdout
            assert key not in raw and token not in raw, "secret in docker inspect of %s" % n["name"]
            c = json.loads(raw)[0]
            env = c["Config"]["Env"]
            assert "HF_TOKEN_PATH=/run/secrets/kimi-k3/HF_TOKEN" in env
            assert "VLLM_API_KEY_FILE=/run/secrets/kimi-k3/VLLM_API_KEY" in env
            assert [m["RW"] for m in c["Mounts"] if m["Destination"] == "/run/secrets/kimi-k3"] == [False]
            argv = json.dumps([c["Path"], c["Args"], c["Config"]["Cmd"], c["Config"]["Entrypoint"]])
            assert key not in argv and token not in argv
            top = sim.docker(n["name"], "top", NAME, "-eo", "pid,args", check=False)
            assert top.returncode == 0 and "vllm" in top.stdout, top.stderr
            assert key not in top.stdout and token not in top.stdout
            logs = sim.docker(n["name"], "logs", NAME)
            assert "Hugging Face token found (HF_TOKEN_PATH /run/secrets/kimi-k3/HF_TOKEN)" in logs.stdout + logs.stderr
        # the plan files and the artifacts hold no secret
        plan_files = [os.path.join(d, f) for d, _dirs, fs in os.walk(os.path.join(art, "plan")) for f in fs]
        assert plan_files, os.listdir(art)
        for p in plan_files:
            with open(p) as f:
                text = f.read()
            assert key not in text and token not in text, p
        for p in glob.glob(os.path.join(art, "*")):
            if os.path.isfile(p):
                with open(p, errors="replace") as f:
                    assert key not in f.read(), p
        # the API requires the key
        assert _http(HEAD_URL + "/v1/models") == 401
        assert _http(HEAD_URL + "/v1/models", key=key) == 200
        assert _http(HEAD_URL + "/v1/models", key="sk-wrong") == 401
    finally:
        r = _run(sim, art, "deploy.yml", skip_tags="preflight")
        assert r.status == "successful", failed_tasks(r)
    assert _http(HEAD_URL + "/v1/models") == 200
    # the keyless deployment removed the secret files again
    for n in sim.nodes:
        p = sim.ssh(n["name"], "ls /var/lib/kimi-sim/models/.secrets/%s/%s.secrets/" % (n["name"], NAME))
        assert p.stdout.split() == [], p.stdout


def test_e_restart_reason_and_status_drift(deployed, art):
    sim = deployed
    sim.docker(WORKER, "rm", "-f", NAME)
    r = _run(sim, art, "status.yml")
    assert r.status == "successful", failed_tasks(r)
    with open(os.path.join(art, "status.json")) as f:
        report = json.load(f)
    rows = {n["host"]: n for n in report["nodes"]}
    assert rows[WORKER]["drift"] == ["no vLLM container"] and rows[HEAD]["drift"] == []
    assert rows[HEAD]["digest"] and rows[HEAD]["digest"].startswith("sha256:")
    assert rows[HEAD]["plan_hash"] == _inspect(sim, HEAD)["Config"]["Labels"]["io.gpufleet.kimi_k3.plan_hash"]
    r = _run(sim, art, "deploy.yml", skip_tags="preflight")
    assert r.status == "successful", failed_tasks(r)
    out = _text(r)
    assert "Restarting the whole group (ranks restart together) because:" in out
    assert re.search(r"%s: no vLLM container" % WORKER, out), out[-3000:]
    r = _run(sim, art, "status.yml", {"kimi_k3_extra_env": {"VLLM_STANDIN_LOAD_S": "4"}})
    with open(os.path.join(art, "status.json")) as f:
        report = json.load(f)
    assert report["drift"] and all("env.VLLM_STANDIN_LOAD_S" in n["drift"][0] for n in report["nodes"]), report
    r = _run(sim, art, "status.yml", {"status_fail_on_drift": True})
    assert r.status == "successful", failed_tasks(r)
