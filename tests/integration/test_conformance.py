"""Conformance of the stand-in to the real engine (docs/sim.md "The stand-in against the real engine").

The real engine is the cpu rehearsal cluster's deployment (vLLM's CPU build 0.32.0, TP 2 over two nodes); the
stand-in is `sim/standin` started here as a local process on a loopback address with the head's own model, served
name, context and parsers (read from the head container's argv), and stopped by its PID. The same probe
(tests/helpers/conformance.py) and the same smoke and capacity step run against both; every observable must be equal
or listed with its reason in sim/conformance.yml.

(a) ready: /health, /version, /v1/models, chats (plain, streamed, streamed with thinking), a forced tool call, the two
    refusals, /metrics, the head's log, the smoke step and a capacity sweep;
(b) /health through start-up and after a dead follower: the follower is killed, a client's view is recorded, and
    launch.yml brings the deployment back while /health is polled.

Needs `sim/simctl up --cluster cpu` (or KIMI_SIM_AUTO_UP=1). Group `cpu` (scripts/test.sh stage realengine).
"""
import json
import os
import signal
import sys
import tempfile
import threading
import time

import pytest

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.capacity import runner as capacity_runner
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import runner as smoke_runner
from ansible_collections.gpufleet.kimi_k3.plugins.modules import vllm_capacity_step
from ansible_collections.gpufleet.kimi_k3.plugins.modules import vllm_smoke

from tests.helpers import conformance as conf
from tests.helpers.runner import failed_tasks, run_playbook

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "sim", "standin"))

from vllm_standin import testing  # noqa: E402

pytestmark = [pytest.mark.sim, pytest.mark.sim_group("cpu")]

HEAD, FOLLOWER = "cpu-node01", "cpu-node02"
HEAD_ROOT = "http://127.0.0.61:8000"
NAME = "vllm-kimi-k3"
STANDIN_HOST = "127.0.0.69"
API_KEY = os.environ.get("KIMI_K3_API_KEY", "test-placeholder-api-key")
# the cpu profile's smoke (inventories/sim-cpu): thinking off, tool calls forced and non-streaming
NO_THINKING = {"chat_template_kwargs": {"thinking": False}}
FAST = {"launch_poll_interval_s": 2, "launch_progress_every_s": 15, "preflight_min_free_disk_gb": 1,
        "preflight_min_shm": "32m"}


def _run(sim, playbook, extra=None, timeout=1500):
    art = tempfile.mkdtemp(prefix="conformance-art-")
    return run_playbook(playbook, sim.inventory, extravars=dict(FAST, kimi_k3_artifacts_dir=art, **(extra or {})),
                        timeout=timeout)


@pytest.fixture(scope="module")
def cpu(sim_cluster):
    sim = sim_cluster("cpu")
    r = _run(sim, "deploy.yml")
    assert r.status == "successful", failed_tasks(r)
    yield sim
    r = run_playbook("teardown.yml", sim.inventory)
    assert r.status == "successful", failed_tasks(r)


def _head_args(sim):
    (info,) = json.loads(sim.docker(HEAD, "inspect", NAME).stdout)
    return list(info["Config"]["Cmd"] or [])


def _head_log(sim):
    p = sim.docker(HEAD, "logs", NAME, timeout=60)
    return p.stdout + p.stderr


@pytest.fixture(scope="module")
def standin(cpu):
    """A stand-in serving like the real head, as a local process (stopped by its PID)."""
    port = testing.free_port(STANDIN_HOST)
    args = conf.standin_args(_head_args(cpu), STANDIN_HOST, port)
    proc = testing.Proc(args, env=testing.fast_env(VLLM_STANDIN_VERSION="0.32.0", VLLM_API_KEY=API_KEY))
    try:
        assert testing.wait_status(STANDIN_HOST, port, 200, timeout=60, proc=proc), proc.log()
        yield "http://%s:%d" % (STANDIN_HOST, port), proc
    finally:
        proc.stop()


def _smoke(root, **kw):
    p = {k: v.get("default") for k, v in vllm_smoke.ARGUMENT_SPEC.items()}
    p.update(base_url=root + "/v1", api_key=API_KEY, groups=["text", "tool_calling"], judge_accuracy=False,
             max_tokens=1024, tool_choice="required", tool_call_modes=["non_stream"], tool_call_retries=8,
             extra_body=NO_THINKING, metrics_interval=0.5,
             fail_policy={"fail_on_group_failure": True, "min_tool_call_success_rate": 0.0}, **kw)
    return conf.norm_smoke(smoke_runner.run_smoke(p))


def _capacity(root, log_text):
    p = {k: v.get("default") for k, v in vllm_capacity_step.ARGUMENT_SPEC.items()}
    p.update(base_url=root + "/v1", api_key=API_KEY, concurrency_levels=[1, 4], max_concurrency=4,
             requests_per_level=1, output_tokens=16, prompt_fraction=0.25, stop_on_saturation=False,
             extra_body=NO_THINKING, metrics_interval=0.5, log_text=log_text, timeout=300)
    return conf.norm_capacity(capacity_runner.run_sweep(p))


def _everything(root, log_text):
    obs = conf.observe(root, api_key=API_KEY, log_text=log_text, extra_body=NO_THINKING)
    obs.update(_smoke(root))
    obs.update(_capacity(root, log_text))
    return obs


def test_a_every_observable_is_equal_or_a_listed_difference(cpu, standin):
    root, proc = standin
    real = _everything(HEAD_ROOT, _head_log(cpu))
    fake = _everything(root, proc.log())
    problems = conf.compare(fake, real, conf.load_table(REPO))
    assert problems == [], "\n".join(problems)
    assert real["version/release"] == "0.32.0" and real["smoke/policy passed"] is True


def _poll_start_up(out, seconds):
    out.extend(conf.health_start_up(HEAD_ROOT, seconds, interval=0.5))


def _wait_gone(seconds=60):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and conf._get(HEAD_ROOT + "/health", timeout=2.0)[0] is not None:
        time.sleep(0.5)


def test_b_health_after_a_dead_follower_and_through_start_up(cpu, standin):
    root, _proc = standin
    fake = {"health/start-up": ["no answer", 200]}  # test_standin_health_through_start_up in tests/unit/sim
    fake["health/after a dead follower"] = _standin_dead_follower()
    cpu.docker(FOLLOWER, "kill", NAME)
    client = conf.client_for(HEAD_ROOT, API_KEY)
    real = {"health/after a dead follower": conf.after_dead_rank(HEAD_ROOT, client, "moonshotai/Kimi-K3")}
    client.close()
    _wait_gone()
    states = []
    poller = threading.Thread(target=_poll_start_up, args=(states, 1200), daemon=True)
    poller.start()
    r = _run(cpu, "launch.yml")
    poller.join(60)
    assert r.status == "successful", failed_tasks(r)
    real["health/start-up"] = states
    problems = conf.compare(fake, real, conf.load_table(REPO))
    assert problems == [], "\n".join(problems)


def _standin_dead_follower():
    """The stand-in's view of the same fault: a head and a follower (``--nnodes 2``), the follower killed."""
    port, master = testing.free_port(STANDIN_HOST), testing.free_port(STANDIN_HOST)
    pair = ["--nnodes", "2", "--master-addr", STANDIN_HOST, "--master-port", str(master)]
    env = testing.fast_env(VLLM_STANDIN_VERSION="0.32.0", VLLM_STANDIN_DEAD_GRACE_S="30")
    base = ["serve", "moonshotai/Kimi-K3", "--host", STANDIN_HOST, "-tp", "8"]
    head = testing.Proc(base + ["--port", str(port), "--node-rank", "0"] + pair, env=env)
    follower = testing.Proc(base + ["--port", str(testing.free_port(STANDIN_HOST)), "--node-rank", "1",
                                    "--headless"] + pair, env=env)
    try:
        assert testing.wait_status(STANDIN_HOST, port, 200, timeout=60, proc=head), head.log()
        os.kill(follower.p.pid, signal.SIGKILL)
        client = conf.client_for("http://%s:%d" % (STANDIN_HOST, port))
        seen = conf.after_dead_rank("http://%s:%d" % (STANDIN_HOST, port), client, "moonshotai/Kimi-K3")
        client.close()
        return seen
    finally:
        follower.stop()
        head.stop()
