"""Deploy acceptance on the GB300 rehearsal pair: failures are clear, fast and harmless; secrets stay secret.

(a) a follower that dies while loading -> the group fails within seconds, one summary naming the follower first
    with its log tail (once; the recap charges the follower), and launch-<host>.log in the artifacts directory;
(b) a digest the registry does not have -> deploy fails at the image stage naming node and reference, before any
    container is touched (the upgrade and its rollback are drilled on the real engine: test_real_engine c, d);
(d) deploy -vvv with an API key and an HF token never shows either (runner stdout, every event, docker inspect,
    container argv, plan files); the API then requires the key. A keyless deployment is restored afterwards.

How the follower fails in (a): the group is restarted with a longer simulated weight load
(VLLM_STANDIN_LOAD_S=10, a cluster-wide knob, so the plan still agrees across nodes) and, as soon as the new
follower container is running, it is killed through its node's engine (`docker kill`, SIGKILL) - what an OOM kill
or a crashed process looks like to the launch role. kimi_k3_* cluster variables must agree across nodes, so a
per-host broken image or env is not a realistic option.

Needs `sim/simctl up --cluster gb300` (or KIMI_SIM_AUTO_UP=1). Results come from runner events and docker inspect.
The sim is shared: each test restores a healthy deployment of the inventory's kimi_k3_image when it ends, and the
module tears its deployment down at the end.
"""
import glob
import json
import os
import secrets
import tempfile
import threading
import time

import pytest

from tests.helpers.http import status as _http
from tests.helpers.runner import failed_tasks, run_playbook

pytestmark = pytest.mark.sim

FAST = {"launch_poll_interval_s": 2, "launch_ready_timeout_s": 60, "launch_progress_every_s": 10,
        # sim limits, as in test_preflight_sim.py (64 MiB /dev/shm, small disk, shared GPUs)
        "preflight_min_free_disk_gb": 1, "preflight_min_shm": "32m", "preflight_max_gpu_memory_used_pct": 100}
NAME = "vllm-kimi-k3"
HEAD, FOLLOWER = "gb300-tray01", "gb300-tray02"
HEAD_URL = "http://127.0.0.11:8000"


def _run(sim, playbook, extra=None, **kw):
    art = tempfile.mkdtemp(prefix="deploy-faults-art-")
    ev = dict(FAST, kimi_k3_artifacts_dir=art, **(extra or {}))
    r = run_playbook(playbook, sim.inventory, extravars=ev, timeout=kw.pop("timeout", 900), **kw)
    r.artifacts_dir = art
    return r


def _inspect(sim, node):
    p = sim.docker(node, "inspect", NAME, check=False)
    if p.returncode != 0:
        return None
    return json.loads(p.stdout)[0]


def _ids(sim):
    out = {}
    for n in sim.nodes:
        c = _inspect(sim, n["name"])
        out[n["name"]] = (c["Id"], c["State"]["StartedAt"], c["State"]["Running"]) if c else None
    return out


def _restore(sim):
    """The inventory's deployment (kimi_k3_image, no secrets, default knobs), healthy."""
    r = _run(sim, "launch.yml")
    assert r.status == "successful", failed_tasks(r)
    assert _http(HEAD_URL + "/health") == 200


@pytest.fixture(scope="module", autouse=True)
def _teardown_at_the_end(sim_cluster):
    """Leave no deployment behind for later modules (test_sim_cluster, preflight need idle nodes)."""
    yield
    sim = sim_cluster("gb300")
    r = run_playbook("teardown.yml", sim.inventory)
    assert r.status == "successful", failed_tasks(r)


@pytest.fixture()
def deployed(sim_cluster):
    """A healthy deployment of the inventory's image before the test; restored after it."""
    sim = sim_cluster("gb300")
    _restore(sim)
    yield sim
    _restore(sim)


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


def test_a_follower_failing_to_start_fails_with_its_log(deployed):
    sim = deployed
    old = _ids(sim)
    killer = _KillFollowerWhenStarted(sim, old[FOLLOWER][0] if old[FOLLOWER] else None)
    killer.start()
    try:
        r = _run(sim, "launch.yml", {"kimi_k3_extra_env": {"VLLM_STANDIN_LOAD_S": "10"}})
    finally:
        killer.stop.set()
        killer.join(10)
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
    logfile = os.path.join(r.artifacts_dir, "launch-%s.log" % FOLLOWER)
    assert os.path.exists(logfile), os.listdir(r.artifacts_dir)
    with open(logfile) as f:
        assert tail[-1] in f.read()


def test_b_absent_digest_fails_before_touching_containers(deployed):
    sim = deployed
    repo = sim.images["standin-a"].split("@", 1)[0]
    ref = repo + "@sha256:" + "0" * 64
    before = _ids(sim)
    # preflight skipped: it does not touch the image, and on the shared sim another session's injected node fault
    # would fail the run at that stage instead (smoke never runs after a failed stage anyway)
    r = _run(sim, "deploy.yml", {"kimi_k3_image": ref}, skip_tags="preflight")
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


def _role(event):
    """Short role name of a runner event (``gpufleet.kimi_k3.launch`` -> ``launch``)."""
    return str(event["event_data"].get("role", "")).rsplit(".", maxsplit=1)[-1]


def test_d_secrets_never_shown(deployed):
    sim = deployed
    key, token = "sk-" + secrets.token_hex(16), "hf_" + secrets.token_hex(16)
    r = _run(sim, "deploy.yml", {"kimi_k3_api_key": key, "kimi_k3_hf_token": token}, verbosity=3)
    assert r.status == "successful", failed_tasks(r)
    with open(os.path.join(r.config.artifact_dir, "stdout")) as f:
        stdout = f.read()
    assert "ESTABLISH SSH CONNECTION" in stdout or "<127.0.0.11>" in stdout, "not a -vvv run"
    for secret in (key, token):
        assert secret not in stdout, "secret in the runner's stdout"
        for ev in glob.glob(os.path.join(r.config.artifact_dir, "job_events", "*.json")):
            with open(ev) as f:
                assert secret not in f.read(), "secret in event %s" % ev
    # container argv (what ps shows), the whole docker inspect, and the plan files hold no secret
    for n in sim.nodes:
        raw = sim.docker(n["name"], "inspect", NAME).stdout
        assert key not in raw and token not in raw, "secret in docker inspect of %s" % n["name"]
        c = _inspect(sim, n["name"])
        argv = json.dumps([c["Path"], c["Args"], c["Config"]["Cmd"], c["Config"]["Entrypoint"]])
        assert key not in argv and token not in argv
        top = sim.docker(n["name"], "top", NAME, "-eo", "pid,args", check=False)
        assert top.returncode == 0 and "vllm" in top.stdout, top.stderr
        assert key not in top.stdout and token not in top.stdout
    plan_files = [os.path.join(d, f) for d, _dirs, fs in os.walk(os.path.join(r.artifacts_dir, "plan")) for f in fs]
    assert plan_files, os.listdir(r.artifacts_dir)
    for p in plan_files:
        with open(p) as f:
            text = f.read()
        assert key not in text and token not in text, p
    for p in glob.glob(os.path.join(r.artifacts_dir, "*")):
        if os.path.isfile(p):
            with open(p, errors="replace") as f:
                assert key not in f.read(), p
    # the API requires the key
    assert _http(HEAD_URL + "/v1/models") == 401
    assert _http(HEAD_URL + "/v1/models", key=key) == 200
    assert _http(HEAD_URL + "/v1/models", key="sk-wrong") == 401
    # the fixture restores a keyless deployment; check that it does
    _restore(sim)
    assert _http(HEAD_URL + "/v1/models") == 200
