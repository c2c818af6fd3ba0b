"""The fabric job (roles/fabric/files/fabric_job.py) run for real: two processes on 127.0.0.1 as the two nodes of
a CPU-profile deployment, their specs built from a plan by plugin_utils.fabric.specs and their results judged by
plugin_utils.fabric.report.

- with torch (gloo over lo): a real all-reduce (every element 1 + 2 = 3), a checked all-to-all, send/recv between
  the two nodes, every planned port answered from the peer; the provenance read through ``vllm --version``;
- a fault: the socket interface is one that exists but does not carry the address, and one planned port has no
  listener: both named with the pair and the fix, while gloo itself still runs (why the job checks explicitly);
- without torch (the GPU stand-in images): the same protocol, ports real, collective "not run: no torch in image".

The torch interpreter: $KIMI_FABRIC_TORCH_PYTHON, else build/torchvenv/bin/python (docs/dev/testing.md says how to
make it: ``python3 -m venv build/torchvenv && build/torchvenv/bin/python -m pip install torch==2.13.0``); the torch
tests skip without one.
"""
import copy
import importlib.util
import json
import os
import socket
import stat
import subprocess
import sys
import time

import pytest

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.fabric import specs as fabric
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.fabric import report as fabric_report
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import recipe_data

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
JOB = os.path.join(REPO, "roles", "fabric", "files", "fabric_job.py")
FABRIC = recipe_data.load_recipe()["fabric"]


def torch_python():
    candidate = os.environ.get("KIMI_FABRIC_TORCH_PYTHON") or os.path.join(REPO, "build", "torchvenv", "bin", "python")
    if not os.path.exists(candidate):
        return None
    probe = subprocess.run([candidate, "-c", "import torch.distributed as d; assert d.is_gloo_available()"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return candidate if probe.returncode == 0 else None


TORCH_PYTHON = torch_python()
needs_torch = pytest.mark.skipif(TORCH_PYTHON is None, reason="no Python with torch (build/torchvenv or "
                                                              "$KIMI_FABRIC_TORCH_PYTHON)")


def free_ports(n):
    socks = [socket.socket() for _index in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def cpu_plan(ifname="lo"):
    """A two-node CPU-profile plan (DP 2 over the nodes: the head serves master and DP RPC ports)."""
    master, rpc = free_ports(2)
    plans = {}
    for rank, host in enumerate(("n0", "n1")):
        plans[host] = {
            "host": host, "role": "head" if rank == 0 else "worker", "node_rank": rank, "vendor": "cpu",
            "internal_address": "127.0.0.1", "master_port": master, "dp_rpc_port": rpc, "vllm_version": "0.32.0",
            "image": "127.0.0.1:5000/vllm/vllm-cpu@sha256:" + "c" * 64, "env": {"GLOO_SOCKET_IFNAME": ifname},
            "vllm_args": ["m", "--data-parallel-size", "2", "--data-parallel-size-local", "1",
                          "--max-num-batched-tokens", "64"],
            "parallel": {"tp": 1, "pp": 1, "dp": 2, "dp_local": 1, "ep": 1, "dcp": 1}}
    return {"plans": plans, "cluster": {"gpus_per_node": 1, "order": ["n0", "n1"], "head": "n0",
                                        "deployments": [{"name": "main", "head": "n0", "hosts": ["n0", "n1"]}]}}


def fake_vllm_dir(tmp_path, version="0.32.0"):
    """A `vllm` on PATH that answers --version like the stand-in (the venv has no vllm package)."""
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    script = folder / "vllm"
    script.write_text("#!/bin/sh\n[ \"$1\" = --version ] && echo %s\n" % version)
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(folder)


def run_nodes(tmp_path, specs, python, env_extra=None, vllm="0.32.0"):
    """Both jobs side by side (n1 a moment later, as Ansible starts them) -> {host: result}."""
    env = dict(os.environ, PATH=fake_vllm_dir(tmp_path, vllm) + os.pathsep + os.environ.get("PATH", ""))
    env.update(env_extra or {})
    procs = {}
    for host in sorted(specs):
        path = tmp_path / ("%s.json" % host)
        path.write_text(json.dumps(specs[host]))
        procs[host] = subprocess.Popen([python, JOB, str(path), "--out", str(tmp_path / ("%s.out" % host))],
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        time.sleep(0.3)
    results = {}
    for host, proc in procs.items():
        _out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()[-2000:]
        results[host] = json.loads((tmp_path / ("%s.out" % host)).read_text())
    return results


def specs_of(plan_result, timeout=20):
    return fabric.build_specs(plan_result, FABRIC, {"timeout_s": timeout})["specs"]


def gloo_env(ifname):
    return {"GLOO_SOCKET_IFNAME": ifname}


@needs_torch
def test_two_nodes_over_gloo_join_reduce_and_answer_every_port(tmp_path):
    specs = specs_of(cpu_plan())
    results = run_nodes(tmp_path, specs, TORCH_PYTHON, gloo_env("lo"))
    for host in ("n0", "n1"):
        col = results[host]["collective"]
        assert col["status"] == "ok" and col["backend"] == "gloo" and col["world_size"] == 2
        assert col["all_reduce"]["correct"] is True and col["all_reduce"]["expected_value"] == 3.0
        assert col["all_to_all"]["correct"] is True
        assert col["all_reduce"]["bytes"] == 64 * 7168 * 2 and col["all_to_all"]["bytes"] == 64 * 7168
        assert 0 < col["join_s"] < 20 and col["latency_us"] > 0 and col["all_reduce"]["busbw_gbps"] > 0
        assert results[host]["provenance"]["torch"].startswith("2.13.0")
        assert results[host]["provenance"]["torch_cuda"] is None
        assert results[host]["provenance"]["vllm"] == "0.32.0"
        assert results[host]["provenance"]["vllm_source"] == "vllm --version"
    assert sorted((p["from"], p["to"], p["name"], p["status"]) for p in results["n1"]["pairs"]) == [
        ("n1", "n0", "dp_rpc", "ok"), ("n1", "n0", "master", "ok")]
    assert results["n0"]["pairs"] == []
    assert [lst["peers_seen"] for lst in results["n0"]["listen"]] == [["n1"], ["n1"]]
    assert sorted(results["n0"]["phases_s"]) == ["collective", "ports", "provenance"]
    (pair,) = results["n0"]["collective"]["pairs"]
    assert (pair["from"], pair["to"], pair["bytes"]) == ("n0", "n1", 64 * 7168) and pair["bandwidth_gbps"] > 0
    report = fabric_report.build_report(specs, results)
    assert report["summary"]["ok"], fabric_report.failure_message(report)
    assert report["summary"]["fail"] == 0 and report["bandwidth"] == [pair]
    md = fabric_report.render_markdown(report)
    assert "| n1 | n0 | 127.0.0.1 | %d | master | ok |" % specs["n0"]["master_port"] in md


def other_interface():
    """An interface of this machine that exists but does not carry 127.0.0.1 (None when there is none)."""
    for name, addrs in sorted(job_module().ipv4_addresses().items()):
        if name != "lo" and addrs:
            return name, addrs
    return None, None


@needs_torch
def test_fault_interface_without_the_address_and_a_port_nobody_listens_on(tmp_path):
    ifname, addrs = other_interface()
    if ifname is None:
        pytest.skip("this machine has no interface besides lo")
    specs = specs_of(cpu_plan(ifname), timeout=12)
    dead = free_ports(1)[0]
    specs["n0"] = copy.deepcopy(specs["n0"])
    specs["n0"]["nodes"][1]["ports"].append({"port": dead, "name": "nixl_side_channel"})  # n1 never listens there
    results = run_nodes(tmp_path, specs, TORCH_PYTHON, gloo_env(ifname))
    report = fabric_report.build_report(specs, results)
    fails = [(f["host"], f["check"]) for f in report["findings"] if f["status"] == "fail"]
    assert fails == [("n0", "interface"), ("n0", "port"), ("n1", "interface")]
    iface = [f for f in report["findings"] if f["check"] == "interface" and f["host"] == "n1"][0]
    assert iface["observed"] == "GLOO_SOCKET_IFNAME=%s does not carry 127.0.0.1 (it has %s; 127.0.0.1 is on lo)" % (
        ifname, ", ".join(sorted(results["n1"]["interfaces"][0]["interface_addresses"])))
    assert iface["fix"].startswith("set kimi_k3_socket_ifname to lo (the interface that carries 127.0.0.1 on n1)")
    port = [f for f in report["findings"] if f["check"] == "port"][0]
    assert port["pair"] == ["n0", "n1", dead]
    assert port["observed"].startswith("n0 -> n1 127.0.0.1:%d (nixl_side_channel): refused" % dead)
    assert "Allow TCP %d from n0 to n1" % dead in port["fix"]
    # the collective is not started on an interface that fails its check (it would wait out the timeout)
    assert results["n0"]["collective"] == {"status": "not_run", "backend": "gloo",
                                           "reason": "GLOO_SOCKET_IFNAME failed its interface check"}
    assert report["summary"]["failed_hosts"] == ["n0", "n1"]


def test_without_torch_the_protocol_still_answers(tmp_path):
    """The GPU stand-in images have python3 and no torch: ports and names real, the collective not run."""
    probe = subprocess.run([sys.executable, "-c", "import torch"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, check=False)
    if probe.returncode == 0:
        pytest.skip("this interpreter has torch")
    plan = cpu_plan()
    for p in plan["plans"].values():
        p["vendor"], p["vllm_version"] = "nvidia", "0.28.0"
    plan["cluster"]["gpus_per_node"] = 4
    specs = specs_of(plan, timeout=10)
    results = run_nodes(tmp_path, specs, sys.executable, vllm="0.28.0")
    for host in ("n0", "n1"):
        assert results[host]["collective"] == {"status": "not_run", "reason": "no torch in image",
                                               "backend": "nccl"}
        assert results[host]["provenance"]["torch"] is None
    assert [p["status"] for p in results["n1"]["pairs"]] == ["ok", "ok"]
    report = fabric_report.build_report(specs, results)
    assert report["summary"]["ok"] and report["summary"]["fail"] == 0
    assert [(f["host"], f["observed"]) for f in report["findings"] if f["check"] == "collective"] == [
        ("n0", "not run: no torch in image"), ("n1", "not run: no torch in image")]
    # the vLLM the stand-in reports is what the plan targets
    assert report["nodes"]["n0"]["vllm"] == "0.28.0"


# ----------------------------------------------------------------------------- the job's pieces, without torch


def job_module():
    """roles/fabric/files/fabric_job.py, a file the role copies to the nodes (no package): loaded by path, once."""
    if "fabric_job" not in sys.modules:
        spec = importlib.util.spec_from_file_location("fabric_job", JOB)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules["fabric_job"] = module
    return sys.modules["fabric_job"]


def test_a_failed_interface_check_vetoes_the_collective_and_a_passing_one_does_not():
    job = job_module()
    spec = {"backend": "gloo"}
    ok = {"variable": "GLOO_SOCKET_IFNAME", "status": "ok"}
    bad = [{"variable": "NCCL_SOCKET_IFNAME", "status": "failed"}, {"variable": "GLOO_SOCKET_IFNAME", "status": "failed"}]
    assert job.interface_veto(spec, []) is None and job.interface_veto(spec, [ok]) is None
    assert job.interface_veto(spec, bad) == {
        "status": "not_run", "backend": "gloo",
        "reason": "GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME failed its interface check"}


class _Tensor(object):
    def __init__(self, n):
        self.n = n

    def numel(self):
        return self.n


class _FakeTorch(object):
    @staticmethod
    def zeros(n, device=None):
        return _Tensor(n)


class _FakeDist(object):
    """Records every send/recv as (op, elements, peer)."""

    def __init__(self):
        self.calls = []

    def send(self, tensor, peer):
        self.calls.append(("send", tensor.numel(), peer))

    def recv(self, tensor, peer):
        self.calls.append(("recv", tensor.numel(), peer))


class _Clock(object):
    """time.time() advancing 1 ms per reading: every timed round lasts exactly 1 ms."""

    def __init__(self):
        self.now = 1000.0

    def time(self):
        self.now += 0.001
        return self.now


@pytest.mark.parametrize("leader,first,second", [(True, "send", "recv"), (False, "recv", "send")])
def test_ping_pong_rounds_mirror_each_other(monkeypatch, leader, first, second):
    """Latency rounds carry one element each way, bulk rounds the pair size (64 bytes: 16 float32) out and one
    element back; the leader sends first and its peer mirrors it; a warm-up round, then ``iterations`` timed ones."""
    job, dist = job_module(), _FakeDist()
    monkeypatch.setattr(job, "time", _Clock())
    spec = {"sizes": {"iterations": 2, "pair": 64}}
    out = job._ping_pong(_FakeTorch(), dist, spec, 0, 4, leader, type("Device", (), {"type": "cpu"})())
    peer = 4 if leader else 0
    rtt = [(first, 1, peer), (second, 1, peer)]
    bulk = [(first, 16, peer), (second, 1, peer)]
    assert dist.calls == rtt * 3 + bulk * 3
    if leader:  # 1 ms round trip: 500 us one way; 64 bytes per 1 ms
        assert out == {"latency_us": 500.0, "bytes": 64, "bandwidth_gbps": 0.0001}
    else:
        assert out is None


def test_interface_checks_on_scripted_addresses():
    job = job_module()
    addresses = {"lo": ["127.0.0.1", "::1"], "eth0": ["10.0.0.5"], "ib0": ["192.168.7.5"]}
    names = ["eth0", "ib0", "lo"]
    spec = {"address": "10.0.0.5", "ifnames": {"GLOO_SOCKET_IFNAME": ["ib0"], "NCCL_SOCKET_IFNAME": ["eth9", "eth0"],
                                               "NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME": ["eth9"]}}
    checks = dict((c["variable"], c) for c in job.interface_checks(spec, addresses, names))
    assert checks["GLOO_SOCKET_IFNAME"] == {
        "variable": "GLOO_SOCKET_IFNAME", "ifnames": ["ib0"], "missing": [], "carries_address": False,
        "address": "10.0.0.5", "interface_addresses": ["192.168.7.5"], "address_on": ["eth0"], "status": "failed"}
    assert checks["NCCL_SOCKET_IFNAME"]["status"] == "ok" and checks["NCCL_SOCKET_IFNAME"]["missing"] == ["eth9"]
    assert checks["NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME"]["missing"] == ["eth9"]
    # Linux routes all of 127.0.0.0/8 to lo: the rehearsal cluster's 127.0.0.11 is carried by lo
    assert job.carries("lo", "127.0.0.11", addresses) and not job.carries("eth0", "127.0.0.11", addresses)


def test_listener_handshake_and_refused_port():
    job = job_module()
    port, dead = free_ports(2)
    lst = job.Listener("n0", "127.0.0.1", {"port": port, "name": "master"}, ["n1"], barrier=True)
    assert lst.bind()
    deadline = time.time() + 5
    server = job._start(lst.serve, deadline)
    target = {"host": "n0", "address": "127.0.0.1"}
    ok = job.connect_pair("n1", target, {"port": port, "name": "master"}, deadline, barrier=True)
    server.join(6)
    assert (ok["status"], ok["go"], ok["detail"]) == ("ok", True, None)
    assert lst.report()["peers_seen"] == ["n1"] and lst.report()["peers_missing"] == []
    refused = job.connect_pair("n1", target, {"port": dead, "name": "dp_rpc"}, time.time() + 0.5)
    assert (refused["status"], refused["connect_ms"]) == ("refused", None)
    wrong = job.connect_pair("n1", {"host": "n7", "address": "127.0.0.1"}, {"port": port, "name": "x"},
                             time.time() + 0.5)
    assert wrong["status"] in ("refused", "wrong_peer")  # the listener is closed once its peer came


def test_bind_in_use_and_foreign_address_say_so():
    job = job_module()
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    try:
        lst = job.Listener("n0", "127.0.0.1", {"port": port, "name": "master"}, ["n1"])
        assert not lst.bind()
        assert lst.report()["error"] == "port %d is already in use on 127.0.0.1 (another process listens there)" % port
    finally:
        holder.close()
    lst = job.Listener("n0", "192.0.2.123", {"port": port, "name": "master"}, ["n1"])
    assert not lst.bind()
    assert lst.report()["error"] == "address 192.0.2.123 is not on this node (cannot bind 192.0.2.123:%d)" % port


def test_provenance_falls_back_to_the_cli_and_summarises_collect_env():
    job = job_module()
    calls = []

    def runner(argv, timeout):
        calls.append(argv)
        if argv == ["vllm", "--version"]:
            return 0, "INFO something\n0.28.0\n"
        return 0, "PyTorch version: 2.13.0+cu130\nvLLM Version: 0.28.0\nNoise: x\nROCM used to build PyTorch: N/A\n"

    info = job.provenance({"collect_env": True}, runner=runner)
    if info["vllm_source"] == "vllm.__version__":
        pytest.skip("this interpreter has a vllm package")
    assert (info["vllm"], info["vllm_source"]) == ("0.28.0", "vllm --version")
    assert info["collect_env"] == {"PyTorch version": "2.13.0+cu130", "vLLM Version": "0.28.0",
                                   "ROCM used to build PyTorch": "N/A"}
    assert calls == [["vllm", "--version"], ["vllm", "collect-env"]]


def test_ep_kernel_phase_runs_the_test_the_image_carries_else_says_what_was_not_tested():
    job = job_module()
    spec = {"master_addr": "10.0.0.1", "master_port": 29501, "nnodes": 2, "node_rank": 1,
            "ep_kernel": {"backend": "deepep_v2", "module": "deep_ep", "runner": "script", "scope": "internode",
                          "tests": ["/opt/DeepEP/tests/test_internode.py"]}}
    missing = job.ep_kernel_phase(spec, time.time() + 5, runner=lambda argv, t: (1, "ModuleNotFoundError: deep_ep"))
    assert missing == {"backend": "deepep_v2", "status": "not_tested", "detail": (
        "the image has no deep_ep package (import deep_ep failed: ModuleNotFoundError: deep_ep): the deepep_v2 kernels "
        "were not tested")}
    no_tests = job.ep_kernel_phase(spec, time.time() + 5, runner=lambda argv, t: (0, ""), exists=lambda p: False)
    assert no_tests["status"] == "not_tested" and no_tests["detail"].startswith(
        "deep_ep is installed but its tests are not in the image (looked for /opt/DeepEP/tests/test_internode.py)")
    calls = []

    def runner(argv, timeout):
        calls.append(argv)
        return 0, "passed"

    ran = job.ep_kernel_phase(spec, time.time() + 5, runner=runner, exists=lambda p: True)
    assert ran == {"backend": "deepep_v2", "status": "ok", "test": "/opt/DeepEP/tests/test_internode.py",
                   "detail": None}
    assert calls[1] == ["env", "MASTER_ADDR=10.0.0.1", "MASTER_PORT=29501", "WORLD_SIZE=2", "RANK=1",
                        sys.executable, "/opt/DeepEP/tests/test_internode.py"]


def test_bus_bandwidth_figures():
    job = job_module()
    assert job._figures(1000000000, 0.5, 2.0 * 3 / 4, True, 10.0) == {
        "bytes": 1000000000, "time_us": 500000.0, "algbw_gbps": 2.0, "busbw_gbps": 3.0, "correct": True,
        "expected_value": 10.0}


def test_a_spec_of_another_protocol_is_refused(tmp_path):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps({"protocol": "kimi-k3-fabric/0"}))
    proc = subprocess.run([sys.executable, JOB, str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          check=False)
    assert proc.returncode == 2
    assert proc.stderr.decode() == "fabric_job: spec protocol 'kimi-k3-fabric/0', this job speaks kimi-k3-fabric/1\n"
