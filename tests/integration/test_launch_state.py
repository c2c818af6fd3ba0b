"""Fail fast, stay whole, say why, secrets out of docker inspect - on the GB300 rehearsal pair.

(a) an upgrade to the image whose head crashes at start fails and is rolled back within 90 s with the default
    launch settings (only the sim limits of preflight are relaxed, preflight does not run in upgrade.yml);
(b) the interrupted upgrade is drilled on the real engine (tests/integration/test_real_engine.py e), not here;
(c) a deploy with a digest the registry does not have fails and leaves the deployed record (state.json, the
    deployed -> plans/<id> pointer and its files) describing what runs;
(d) with an API key and an HF token, docker inspect holds neither value (names and paths only), the API needs the
    key, and the stand-in found the token through HF_TOKEN_PATH (it refuses to start without one here);
(e) a worker whose container is gone: the next deploy restarts the group and says which node's container was
    missing; status.yml reports drift per node, and none after the deploy.

Needs `sim/simctl up --cluster gb300` (or KIMI_SIM_AUTO_UP=1). The module shares one artifacts directory (the state
record lives there) and tears its deployment down at the end.
"""
import json
import os
import re
import secrets
import tempfile

import pytest

from tests.helpers.http import status as _http
from tests.helpers.runner import failed_tasks, run_playbook

pytestmark = pytest.mark.sim

NAME = "vllm-kimi-k3"
HEAD, WORKER = "gb300-tray01", "gb300-tray02"
HEAD_URL = "http://127.0.0.11:8000"
# Only what the shared sim needs; the launch watch runs with its defaults.
SIM = {"preflight_min_free_disk_gb": 1, "preflight_min_shm": "32m", "preflight_max_gpu_memory_used_pct": 100}


def _inspect(sim, node):
    p = sim.docker(node, "inspect", NAME, check=False)
    return json.loads(p.stdout)[0] if p.returncode == 0 else None


def _images(sim):
    return [(_inspect(sim, n["name"]) or {}).get("Config", {}).get("Image") for n in sim.nodes]


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


@pytest.fixture()
def deployed(sim, art):
    r = _run(sim, art, "deploy.yml", skip_tags="preflight")
    assert r.status == "successful", failed_tasks(r)
    assert _http(HEAD_URL + "/health") == 200
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


def test_c_failed_deploy_keeps_the_deployed_record(deployed, art):
    sim = deployed
    st = _state(art)
    link = os.path.join(art, "plan", "deployed")
    target = os.readlink(link)
    with open(os.path.join(link, HEAD + ".json")) as f:
        head_plan = f.read()
    repo = sim.images["standin-a"].split("@", 1)[0]
    ref = repo + "@sha256:" + "0" * 64
    r = _run(sim, art, "deploy.yml", {"kimi_k3_image": ref}, skip_tags="preflight")
    assert r.status == "failed"
    after = _state(art)
    assert after["deployed"] == st["deployed"]
    assert os.readlink(link) == target
    with open(os.path.join(link, HEAD + ".json")) as f:
        assert f.read() == head_plan
    assert json.loads(head_plan)["image"] == _inspect(sim, HEAD)["Config"]["Image"]
    # the failed plan is kept beside it, by its own id
    kept = os.listdir(os.path.join(art, "plan", "plans"))
    assert any(ref in open(os.path.join(art, "plan", "plans", k, HEAD + ".json")).read() for k in kept)


def test_d_docker_inspect_holds_no_secret(deployed, art):
    sim = deployed
    key, token = "sk-" + secrets.token_hex(16), "hf_" + secrets.token_hex(16)
    extra = {"kimi_k3_api_key": key, "kimi_k3_hf_token": token,
             "kimi_k3_extra_env": {"VLLM_STANDIN_LOAD_S": "3", "VLLM_STANDIN_REQUIRE_HF_TOKEN": "1"},
             # a stand-in switch (require the token file), not a secret: the plan refuses secret-looking names
             "kimi_k3_extra_env_not_secret": ["VLLM_STANDIN_REQUIRE_HF_TOKEN"]}
    r = _run(sim, art, "deploy.yml", extra, skip_tags="preflight", verbosity=1)
    assert r.status == "successful", failed_tasks(r)
    try:
        for n in sim.nodes:
            raw = sim.docker(n["name"], "inspect", NAME).stdout
            assert key not in raw and token not in raw, n["name"]
            env = json.loads(raw)[0]["Config"]["Env"]
            assert "HF_TOKEN_PATH=/run/secrets/kimi-k3/HF_TOKEN" in env
            assert "VLLM_API_KEY_FILE=/run/secrets/kimi-k3/VLLM_API_KEY" in env
            mounts = json.loads(raw)[0]["Mounts"]
            assert [m["RW"] for m in mounts if m["Destination"] == "/run/secrets/kimi-k3"] == [False]
            logs = sim.docker(n["name"], "logs", NAME)
            assert "Hugging Face token found (HF_TOKEN_PATH /run/secrets/kimi-k3/HF_TOKEN)" in logs.stdout + logs.stderr
        assert key not in _text(r) and token not in _text(r)
        assert _http(HEAD_URL + "/v1/models") == 401
        assert _http(HEAD_URL + "/v1/models", key=key) == 200
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
