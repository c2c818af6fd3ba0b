"""Preflight against the rehearsal cluster: green on healthy profiles; one faulty node fails naming node + check.

Needs `sim/simctl up --cluster gb300` / `--cluster mi355x` (or KIMI_SIM_AUTO_UP=1). Faults are injected with
`sim/simctl fault NODE FAULT` and always cleared afterwards. Results come from runner events, the fact cache and
the written report - never from stdout.

Sim limits passed as extra vars (SIM_LIMITS): the node containers have Docker's default 64 MiB /dev/shm and the
machine has far less than 1.7 TB of disk, so those two thresholds are lowered here - every other threshold is the
role default. (With fake weights in the sim's model cache, the disk waiver would apply instead.)
"""
import json
import os
import re
import subprocess
import tempfile

import pytest

from tests.helpers.runner import failed_tasks, run_playbook, task_results

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# the sim's models directory (mounted at the same path in every node) and the checkpoint commit its inventories pin
# (kimisim: tests/conftest.py puts sim/ on the path)
from kimisim.settings import MODELS_DIR, SIM_MODEL_REVISION  # noqa: E402  pylint: disable=wrong-import-position

pytestmark = pytest.mark.sim

SIMCTL = os.path.join(REPO, "sim", "simctl")
SIM_LIMITS = {"preflight_min_free_disk_gb": 1, "preflight_min_shm": "32m",
              # The sim is shared: other sessions may run stand-in containers on these nodes, and the faked
              # nvidia-smi/amd-smi then report their GPU memory as used. test_gpu_busy checks the gate itself.
              "preflight_max_gpu_memory_used_pct": 100}
FAIL_TASK = "Stop here when any node fails a check"
PROBE_TASK = "Probe the node (read-only; runs in check mode too)"


def preflight(sim, check=False, extra=None):
    art = tempfile.mkdtemp(prefix="preflight-art-")
    ev = dict(SIM_LIMITS, preflight_artifacts_dir=art, **(extra or {}))
    r = run_playbook("preflight.yml", sim.inventory, extravars=ev, check=check, timeout=600)
    report = None
    path = os.path.join(art, "preflight-report.json")
    if os.path.exists(path):
        with open(path) as f:
            report = json.load(f)
    return r, report, art


def failing(report):
    return sorted((f["host"], f["check"]) for f in report["findings"] if f["status"] == "fail")


class fault(object):
    """Context manager: inject a sim fault on a node, always clear it."""

    def __init__(self, node, name):
        self.node, self.name = node, name

    def __enter__(self):
        p = subprocess.run([SIMCTL, "fault", self.node, self.name], capture_output=True, text=True, timeout=120, check=False)
        if p.returncode != 0:
            pytest.fail("simctl fault %s %s failed: %s" % (self.node, self.name, p.stderr[-500:]))

    def __exit__(self, *exc):
        subprocess.run([SIMCTL, "fault", self.node, "--clear"], capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("cluster,model,count", [("gb300", "gb300", 4), ("mi355x", "mi355x", 8)])
def test_healthy_profile_is_green(sim_cluster, cluster, model, count):
    sim = sim_cluster(cluster)
    r, report, art = preflight(sim)
    assert r.status == "successful", (failed_tasks(r), report and failing(report))
    assert report["summary"]["ok"] is True and failing(report) == []
    # Facts from the probe task's events (ansible-runner 2.4.3's get_fact_cache cannot read ansible-core 2.21's
    # jsonfile cache format, whose files are "s1_<host>" with a "__payload__" wrapper).
    probes = task_results(r, PROBE_TASK)
    for n in sim.nodes:
        facts = probes[n["name"]]["ansible_facts"]["node_probe"]
        assert facts["gpu_model"] == model and facts["gpu_count"] == count
        assert report["nodes"][n["name"]]["gpu_model"] == model
    assert os.path.exists(os.path.join(art, "preflight-report.md"))
    # one probe per node
    probe_events = [e for e in r.events if e.get("event") == "runner_on_ok"
                    and e["event_data"].get("task") == PROBE_TASK]
    assert sorted(e["event_data"]["host"] for e in probe_events) == sorted(n["name"] for n in sim.nodes)


@pytest.mark.parametrize("cluster,node_index,fault_name,check", [
    ("gb300", 1, "old_driver", "gpu_driver"),
    ("gb300", 1, "imex_down", "imex"),
    ("gb300", 0, "missing_gpu", "gpu_count"),
    ("gb300", 1, "fabric_not_completed", "fabric"),
    ("gb300", 1, "no_nvidia_smi", "gpu_tools"),
    ("mi355x", 1, "ib_port_down", "rdma"),
    ("mi355x", 1, "rocm_old", "rocm_version"),
    ("gb300", 1, "gpu_busy", "gpu_busy"),
    ("mi355x", 0, "no_python_requests", "python_requests"),
    ("gb300", 1, "socket_ifname_down", "socket_ifname"),
    ("mi355x", 1, "socket_ifname_missing", "socket_ifname"),
])
def test_one_faulty_node_fails_naming_node_and_check(sim_cluster, cluster, node_index, fault_name, check):
    sim = sim_cluster(cluster)
    node = sim.nodes[node_index]["name"]
    extra = {"preflight_max_gpu_memory_used_pct": 5} if check == "gpu_busy" else None
    if check == "gpu_busy":
        # GPU memory held by this collection's own running container is not "busy" (a converged re-run of
        # deploy.yml); earlier tests may have left a deployment on the shared sim: the GPUs must be idle here.
        for n in sim.nodes:
            sim.docker(n["name"], "rm", "-f", "vllm-kimi-k3", check=False)
    with fault(node, fault_name):
        r, report, _art = preflight(sim, extra=extra)
    assert r.status == "failed"
    assert (node, check) in failing(report), failing(report)
    # the healthy node has no failing per-host check - except 'ports': the sim is shared, and another session's
    # stand-in vLLM may hold the head's API port while this test runs (the check is right to fail then)
    others = [n["name"] for n in sim.nodes if n["name"] != node]
    assert not [f for f in failing(report) if f[0] in others and f[1] != "ports"], failing(report)
    msgs = dict((h, m) for h, t, m in failed_tasks(r) if t == FAIL_TASK)
    assert ("%s %s" % (node, check)) in msgs[node], msgs
    assert r.stats["failures"].get(node) == 1                # the recap charges the faulty node itself


def test_driver_not_loaded_is_one_root_failure_and_the_worker_is_failed(sim_cluster):
    """Root cause first: the kernel module missing on the worker is one failure (gpu_tools, with the
    modprobe fix); everything that needs the driver is skipped naming what it depends on; the recap marks the
    worker failed, not the head that ran the cluster-wide judgement."""
    sim = sim_cluster("gb300")
    head, worker = sim.nodes[0]["name"], sim.nodes[1]["name"]
    with fault(worker, "driver_not_loaded"):
        r, report, _art = preflight(sim)
    assert r.status == "failed"
    assert [c for h, c in failing(report) if h == worker] == ["gpu_tools"], failing(report)
    root = [f for f in report["findings"] if f["host"] == worker and f["check"] == "gpu_tools"][0]
    assert root["observed"] == "nvidia-smi: driver_not_loaded" and "modprobe nvidia" in root["fix"]
    skipped = dict((f["check"], f["observed"]) for f in report["findings"]
                   if f["host"] == worker and f["status"] == "skip")
    for check in ("gpu_driver", "cuda_version", "gpu_model", "gpu_count", "gpu_memory", "gpu_busy", "fabric", "imex",
                  "imex_channel", "nvlink_domain"):
        assert skipped.get(check, "").startswith("not checked: depends on "), (check, skipped)
    fixes = " ".join(f["fix"] for f in report["findings"])
    assert "same rack" not in fixes and "r580" not in fixes and "kimi_k3_accelerator" not in fixes
    # no failure charged to the healthy head, no drift failure from values the worker could not measure
    assert not [f for f in failing(report) if f[0] in (head, "(cluster)")], failing(report)
    assert r.stats["failures"].get(worker) == 1 and not r.stats["failures"].get(head), r.stats
    msgs = dict((h, m) for h, t, m in failed_tasks(r) if t == FAIL_TASK)
    assert list(msgs) == [worker] and msgs[worker].startswith("Preflight failed on %s - %s gpu_tools" % (worker, worker))


def test_check_mode_still_probes_and_reports(sim_cluster):
    sim = sim_cluster("gb300")
    with fault(sim.nodes[1]["name"], "old_driver"):
        r, report, _art = preflight(sim, check=True)
    assert r.status == "failed"                       # check mode tells the truth
    assert (sim.nodes[1]["name"], "gpu_driver") in failing(report)


def test_nothing_further_runs_after_a_failed_preflight(sim_cluster, tmp_path):
    """A later play in the same playbook (as in deploy.yml) must not run when preflight fails."""
    sim = sim_cluster("gb300")
    pb = tmp_path / "pf_then_more.yml"
    pb.write_text(
        "- import_playbook: %s\n"
        "- name: Next play\n  hosts: vllm_cluster\n  gather_facts: false\n  tasks:\n"
        "    - name: Must not run\n      ansible.builtin.debug:\n        msg: ran\n"
        % os.path.join(REPO, "playbooks", "preflight.yml"))
    with fault(sim.nodes[1]["name"], "old_driver"):
        r = run_playbook(str(pb), sim.inventory, extravars=dict(SIM_LIMITS, preflight_artifacts_dir=str(tmp_path)),
                         timeout=600)
    assert r.status == "failed"
    assert not [e for e in r.events if e["event_data"].get("task") == "Must not run"
                and e.get("event", "").startswith("runner_on_")]


def test_socket_mtu_mismatch_fails_the_odd_node(sim_cluster):
    """One MTU on the NCCL/Gloo interface of every node; the node off the head's MTU is charged."""
    sim = sim_cluster("gb300")
    head, worker = sim.nodes[0]["name"], sim.nodes[1]["name"]
    with fault(worker, "socket_mtu_mismatch"):
        r, report, _art = preflight(sim)
    assert r.status == "failed"
    mtu = [f for f in report["findings"] if f["check"] == "socket_mtu"][0]
    assert mtu["status"] == "fail" and mtu["hosts"] == [worker] and "MTU 1500: %s" % worker in mtu["observed"]
    assert "ip link set dev" in mtu["fix"]
    assert r.stats["failures"].get(worker) == 1 and not r.stats["failures"].get(head), r.stats


def test_inter_node_ports_next_to_another_network_warn_with_the_firewall_fix(sim_cluster):
    """A routable interface next to the cluster network on the head (faked eth1 203.0.113.7/24; the sim's
    cluster network is lo): port_exposure warns naming the rendezvous port and its variable, the interface and
    the firewall fix; a warning stops nothing. The worker (no port on every address) is not judged."""
    sim = sim_cluster("gb300")
    head, worker = sim.nodes[0]["name"], sim.nodes[1]["name"]
    with fault(head, "internode_port_exposed"):
        r, report, _art = preflight(sim)
    # the sim is shared: another session's stand-in may hold the head's API port (see above)
    assert not [f for f in failing(report) if f[1] != "ports"], failing(report)
    hits = [f for f in report["findings"] if f["check"] == "port_exposure"]
    assert [(f["host"], f["status"]) for f in hits] == [(head, "warn")], hits
    assert "29501 (kimi_k3_master_port) listen on all addresses" in hits[0]["observed"]
    assert "eth1 203.0.113.7/24 outside the cluster network 127.0.0.0/8 (lo)" in hits[0]["observed"]
    assert "allow them only from the cluster network 127.0.0.0/8 and drop them on eth1" in hits[0]["fix"]
    assert "on %s" % head in hits[0]["fix"] and worker not in hits[0]["fix"]
    if not failing(report):
        assert r.status == "successful"


READ_RE = re.compile(r"; read ([0-9.]+) MiB/s")


def _timed_cache():
    """A checkpoint large enough to time a read (4 x 32 MiB of random bytes, HF layout, the pinned revision) in its
    own cache directory under the sim's models directory."""
    root = os.path.join(MODELS_DIR, ".read-test")
    snap = os.path.join(root, "hub", "models--moonshotai--Kimi-K3", "snapshots", SIM_MODEL_REVISION)
    os.makedirs(snap, exist_ok=True)
    names = ["model-%05d-of-00004.safetensors" % i for i in range(1, 5)]
    for name in names:
        path = os.path.join(snap, name)
        if not os.path.exists(path) or os.path.getsize(path) != 32 * 1024 ** 2:
            with open(path, "wb") as f:
                f.write(os.urandom(32 * 1024 ** 2))
    with open(os.path.join(snap, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": dict(("w%d" % i, n) for i, n in enumerate(names))}, f)
    return root


def _node_plan(sim, rate):
    art = tempfile.mkdtemp(prefix="plan-art-")
    r = run_playbook("plan.yml", sim.inventory, extravars={"kimi_k3_weight_read_mib_s": rate,
                                                           "kimi_k3_artifacts_dir": art}, timeout=300)
    assert r.status == "successful", failed_tasks(r)
    with open(os.path.join(art, "plan", "%s.json" % sim.nodes[0]["name"])) as f:
        return json.load(f)


def test_slow_weights_disk_fails_weight_read_and_the_measured_rates_set_the_timeouts(sim_cluster):
    """A real 16 MiB/s read limit on the worker's disk (fault slow_weights_disk: blkio on the models device):
    preflight's direct-I/O sample read measures it, and with the plan's timeouts sized for 200 MiB/s the worker
    fails `weight_read` naming itself, the variable and the measured rate; the head (the machine's own disk)
    passes. Each measured rate, given to the plan, derives its own launch timeouts."""
    sim = sim_cluster("gb300")
    head, worker = sim.nodes[0]["name"], sim.nodes[1]["name"]
    extra = {"kimi_k3_model_cache_dir": _timed_cache(), "kimi_k3_weight_read_mib_s": 200,
             "preflight_weight_read_sample_mib": 64, "preflight_weight_read_max_s": 5}
    with fault(worker, "slow_weights_disk"):
        _r, report, _art = preflight(sim, extra=extra)
    found = dict((f["host"], f) for f in report["findings"] if f["check"] == "weight_read")
    rates = dict((f["host"], float(READ_RE.search(f["observed"]).group(1))) for f in report["findings"]
                 if f["check"] == "disk" and READ_RE.search(f["observed"]))
    print("\nweight read: %s" % rates)
    assert 8 <= rates[worker] <= 20, rates
    assert rates[head] > 200, rates
    assert found[head]["status"] == "pass", found
    assert found[worker]["status"] == "fail", found
    assert "kimi_k3_weight_read_mib_s: %d for %s" % (int(rates[worker]), worker) in found[worker]["fix"]
    fast, slow = _node_plan(sim, int(rates[head])), _node_plan(sim, int(rates[worker]))
    for plan in (fast, slow):
        assert plan["env"]["VLLM_ENGINE_READY_TIMEOUT_S"] == str(plan["timeouts"]["engine_ready_timeout_s"])
    print("timeouts at %d MiB/s: %s; at %d MiB/s: %s" % (
        int(rates[head]), fast["timeouts"], int(rates[worker]), slow["timeouts"]))
    for plan, rate in ((fast, int(rates[head])), (slow, int(rates[worker]))):
        assert plan["timeouts"]["basis"].startswith("%d MiB/s weight read" % rate), plan["timeouts"]
    # the 1.56 TB checkpoint at 16 MiB/s: the engine and launch limits are their ceilings (the stall window follows
    # the largest shard the controller found in the cache); a faster disk never gets longer limits
    assert slow["timeouts"]["engine_ready_timeout_s"] == 3600 and slow["timeouts"]["launch_ready_timeout_s"] == 3900
    for key in ("engine_ready_timeout_s", "launch_ready_timeout_s", "stall_timeout_s"):
        assert fast["timeouts"][key] <= slow["timeouts"][key], key
