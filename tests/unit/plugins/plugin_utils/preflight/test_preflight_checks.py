"""Cluster checks on probe facts gathered from the fixture nodes (floors from the recipe, as the action passes them)."""
import copy
import json
import importlib.util
import os

import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.preflight import checks as C
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.preflight import cluster as PCL
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.preflight import expect as E
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.probe import collect as PC
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import recipe_data
from tests.helpers.runner import REPO

RECIPE = recipe_data.load_recipe()

_spec = importlib.util.spec_from_file_location(
    "probe_fixture_io", os.path.join(REPO, "tests", "unit", "fixtures", "probes", "fixture_io.py"))
fixture_io = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fixture_io)

_CACHE = {}


def facts(node, **overrides):
    if node not in _CACHE:
        _CACHE[node] = PC.collect(fixture_io.FixtureIO(node), {
            "model": "moonshotai/Kimi-K3", "model_cache_dir": "/data/hf-cache",
            "docker_host": "unix:///var/run/docker.sock",
            "ports": [{"name": "api", "port": 8000}, {"name": "master", "port": 29501},
                      {"name": "dp_rpc", "port": 29550}]})
    f = copy.deepcopy(_CACHE[node])
    f.update(overrides)
    return f


def exp(acc="gb300", interconnect="nvlink", nnodes=2, role="head", addr="10.0.0.11", **kw):
    hw = RECIPE["hardware"].get(acc, {})
    vendor = hw.get("vendor")
    e = {"accelerator": acc, "vendor": vendor, "gpus_per_node": hw.get("gpus_per_node"),
         "interconnect": interconnect, "nnodes": nnodes, "role": role, "memlock": -1, "shm_size": "64g",
         "internal_address": addr, "model": "moonshotai/Kimi-K3",
         "imex_channel": nnodes > 1 and interconnect == "nvlink" and bool(hw.get("gb_tray"))}
    e.update(E.requirements(RECIPE, vendor, acc))
    e.update(kw)
    return e


def run_checks(*args, **kw):
    return PCL.run_checks(*args, **kw)


def gb300_pair(tray02="gb300-tray02", **over):
    probes = {"tray01": facts("gb300-tray01"), "tray02": facts(tray02, **over)}
    expected = {"tray01": exp(), "tray02": exp(role="worker", addr="10.0.0.12")}
    return run_checks(probes, expected, hosts=["tray01", "tray02"])


def by(result, host=None, check=None, status=None):
    return [f for f in result["findings"] if (host is None or f["host"] == host)
            and (check is None or f["check"] == check) and (status is None or f["status"] == status)]


def fails(result):
    return sorted((f["host"], f["check"]) for f in result["findings"] if f["status"] == "fail")


# ------------------------------------------------------------------ healthy clusters

def test_healthy_gb300_pair_passes_everything():
    r = gb300_pair()
    assert fails(r) == []
    assert r["summary"]["ok"] is True and r["summary"]["fail"] == 0
    checks = {f["check"] for f in by(r, host="tray01")}
    for c in ("vendor", "gpu_tools", "gpu_driver", "cuda_version", "gpu_model", "gpu_count", "gpu_memory",
              "gpu_busy", "fabric", "imex", "imex_channel", "nvlink_domain", "engine", "engine_gpu", "shm",
              "memlock", "disk", "ports", "time_sync"):
        assert c in checks, c
    assert not by(r, check="rdma")                          # NVLink cluster: no RDMA gate


def test_healthy_mi355x_rdma_pair_passes():
    probes = {"n1": facts("mi355x-node01"), "n2": facts("mi355x-node02")}
    expected = {"n1": exp("mi355x", "rdma"), "n2": exp("mi355x", "rdma", role="worker")}
    r = run_checks(probes, expected)
    assert fails(r) == []
    assert by(r, "n1", "rocm_version")[0]["status"] == "pass"
    assert by(r, "n1", "rdma")[0]["status"] == "pass"
    assert not by(r, check="fabric") and not by(r, check="cuda_version")


@pytest.mark.parametrize("node,acc", [("h200-node01", "h200"), ("b200-node01", "b200")])
def test_single_hgx_node_passes(node, acc):
    r = run_checks({"n": facts(node)}, {"n": exp(acc, None, nnodes=1)})
    assert fails(r) == []
    assert not by(r, check="fabric") and not by(r, check="imex")   # single node: no interconnect gates


# ------------------------------------------------------------------ each fault names its host and check

@pytest.mark.parametrize("node,check,observed_part", [
    ("gb300-driver570", "gpu_driver", "570.172.08"),
    ("gb300-gpu-missing", "gpu_count", "3"),
    ("gb300-imex-down", "imex", "Domain State: DOWN"),
    ("gb300-fabric-inprogress", "fabric", "In Progress"),
    ("gb300-no-nvidia-smi", "gpu_tools", "nvidia-smi not found"),
    ("gb300-other-rack", "nvlink_domain", "CliqueId 7"),
])
def test_broken_tray_fails_with_host_and_check(node, check, observed_part):
    r = gb300_pair(node)
    hits = by(r, "tray02", check, "fail")
    assert hits, fails(r)
    assert any(observed_part in f["observed"] for f in hits), hits
    assert all(f["fix"] for f in hits)
    assert not by(r, "tray01", status="fail") or check in ("nvlink_domain",)
    assert r["summary"]["ok"] is False and "tray02" in r["summary"]["failed_hosts"]


def test_old_driver_is_also_drift():
    r = gb300_pair("gb300-driver570")
    d = by(r, PCL.CLUSTER, "drift_driver_version")[0]
    assert d["status"] == "fail" and "570.172.08: tray02" in d["observed"]
    assert r["drift"]["driver_version"] == {"580.173.02": ["tray01"], "570.172.08": ["tray02"]}


def test_kernel_and_engine_drift_only_warn():
    r = gb300_pair(kernel="6.8.0-1040-nvidia-64k")
    assert by(r, PCL.CLUSTER, "drift_kernel")[0]["status"] == "warn"
    assert fails(r) == []


def test_all_failures_of_all_nodes_reported_together():
    probes = {"t1": facts("gb300-driver570"), "t2": facts("gb300-gpu-missing"), "t3": facts("gb300-imex-down")}
    expected = {h: exp(role="head" if h == "t1" else "worker") for h in probes}
    r = run_checks(probes, expected, hosts=["t1", "t2", "t3"])
    got = fails(r)
    assert ("t1", "gpu_driver") in got and ("t2", "gpu_count") in got and ("t3", "imex") in got
    # failures first in the list
    statuses = [f["status"] for f in r["findings"]]
    assert statuses == sorted(statuses, key=C.STATUSES.index)


def test_unreachable_host_is_a_probe_failure():
    r = run_checks({"tray01": facts("gb300-tray01"), "tray02": None}, {"tray01": exp(), "tray02": exp()})
    assert ("tray02", "probe") in fails(r)
    assert by(r, "tray02", "probe")[0]["fix"]


def test_wrong_vendor_is_the_root_and_model_is_skipped():
    r = run_checks({"n": facts("mi355x-node01")}, {"n": exp("gb300", None, nnodes=1)})
    assert fails(r) == [("n", "vendor")]
    assert "carries amd GPUs but the plan runs nvidia" in by(r, "n", "vendor")[0]["fix"]
    assert by(r, "n", "gpu_model", "skip")[0]["observed"] == "not checked: depends on gpu_tools"
    r = run_checks({"n": facts("b200-node01")}, {"n": exp("h200", None, nnodes=1)})
    assert ("n", "gpu_model") in fails(r) and ("n", "vendor") not in fails(r)
    assert "carries b200 GPUs, the plan runs h200" in by(r, "n", "gpu_model")[0]["fix"]


def test_gpu_count_more_than_used_warns():
    r = run_checks({"n": facts("b200-node01")}, {"n": exp("b200", None, nnodes=1, gpus_per_node=4)})
    assert by(r, "n", "gpu_count")[0]["status"] == "warn"
    r = run_checks({"n": facts("gb300-tray01")}, {"n": exp(nnodes=1)})
    assert by(r, "n", "gpu_count")[0]["expected"] == "4"          # the plan's gpus_per_node (GB tray)


def test_gpu_memory_and_busy():
    f = facts("gb300-tray01")
    f["gpus"][1]["memory_total_mib"] = 256703
    f["gpus"][2]["memory_used_mib"] = 255787
    r = run_checks({"n": f}, {"n": exp(nnodes=1)})
    assert "GPU 1: 256703 MiB" in by(r, "n", "gpu_memory", "fail")[0]["observed"]
    assert "GPU 2: 255787" in by(r, "n", "gpu_busy", "fail")[0]["observed"]


def test_rdma_port_down_fails_unless_allowed():
    probes = {"n1": facts("b200-node01"), "n2": facts("b200-ib-port-down")}
    expected = {"n1": exp("b200", "rdma"), "n2": exp("b200", "rdma", role="worker")}
    r = run_checks(probes, expected)
    hit = by(r, "n2", "rdma", "fail")[0]
    assert "7 of 8 ports ACTIVE" in hit["observed"] and "mlx5_3/1 DOWN" in hit["observed"]
    r = run_checks(probes, expected, {"rdma_allow_down_ports": True})
    assert by(r, "n2", "rdma")[0]["status"] == "pass"
    amd = {"a": facts("mi355x-ib-port-down")}
    r = run_checks(amd, {"a": exp("mi355x", "rdma")})
    assert "ionic_2/1 DOWN, ionic_5/1 DOWN" in by(r, "a", "rdma", "fail")[0]["observed"]


def test_rdma_no_devices_fails():
    f = facts("b200-node01")
    f["rdma"] = {"source": None, "ports": [], "active_ports": 0}
    r = run_checks({"n": f}, {"n": exp("b200", "rdma")})
    assert "no RDMA devices found" in by(r, "n", "rdma", "fail")[0]["observed"]


def test_gpudirect_warns_or_fails():
    f = facts("b200-node01")
    f["gpudirect"]["mode"] = "none"
    r = run_checks({"n": f}, {"n": exp("b200", "rdma")})
    assert by(r, "n", "gpudirect")[0]["status"] == "warn"
    r = run_checks({"n": f}, {"n": exp("b200", "rdma")}, {"require_gpudirect": True})
    assert by(r, "n", "gpudirect")[0]["status"] == "fail"


def test_engine_and_engine_gpu():
    f = facts("gb300-tray01")
    f["engine"] = {"reachable": False, "error": "engine API at unix:///var/run/docker.sock: refused",
                   "gpu_support": {"ok": False, "via": []}}
    r = run_checks({"n": f}, {"n": exp(nnodes=1)})
    assert "refused" in by(r, "n", "engine", "fail")[0]["observed"]
    assert by(r, "n", "engine_gpu", "skip")[0]["observed"] == "not checked: depends on engine"
    f["engine"] = {"reachable": True, "version": "28.2", "source": "api", "gpu_support": {"ok": False, "via": []}}
    r = run_checks({"n": f}, {"n": exp(nnodes=1)})
    assert "nvidia-ctk runtime configure" in by(r, "n", "engine_gpu", "fail")[0]["fix"]


@pytest.mark.parametrize("shm,size,min_shm,status", [
    (64 * 1024 ** 2, "1g", None, "fail"), (2 * 1024 ** 3, "1g", None, "pass"),
    (64 * 1024 ** 2, "64g", "32m", "pass"), (None, "1g", None, "fail"),
])
def test_shm(shm, size, min_shm, status):
    r = run_checks({"n": facts("gb300-tray01", shm_bytes=shm)}, {"n": exp(nnodes=1, shm_size=size)},
                   {"min_shm": min_shm})
    assert by(r, "n", "shm")[0]["status"] == status


@pytest.mark.parametrize("observed,wanted,status", [
    (-1, -1, "pass"), (8388608, -1, "fail"), (8388608, 8388608, "pass"), (65536, 8388608, "fail"),
    (-1, 8388608, "pass"), (8388608, "8m", "pass"),
])
def test_memlock(observed, wanted, status):
    r = run_checks({"n": facts("gb300-tray01", memlock=observed)}, {"n": exp(nnodes=1, memlock=wanted)})
    assert by(r, "n", "memlock")[0]["status"] == status


def test_disk_threshold_and_weights_waiver():
    f = facts("gb300-tray01")
    f["disk"]["free_bytes"] = 900 * 1000 ** 3
    r = run_checks({"n": f}, {"n": exp(nnodes=1)})
    assert "900 GB free on /data/hf-cache" in by(r, "n", "disk", "fail")[0]["observed"]
    f["weights"] = {"present": True, "path": "/data/hf-cache/hub/x", "bytes": 1560 * 1000 ** 3}
    r = run_checks({"n": f}, {"n": exp(nnodes=1)})
    assert by(r, "n", "disk")[0]["status"] == "pass"
    f["weights"] = {"present": False}
    r = run_checks({"n": f}, {"n": exp(nnodes=1)}, {"min_free_disk_gb": 50})
    assert by(r, "n", "disk")[0]["status"] == "pass"


def test_ports_in_use_head_fails_worker_warns_not_local_fails():
    busy = [{"name": "api", "port": 8000, "address": "0.0.0.0", "state": "in_use"},
            {"name": "master", "port": 29501, "address": "10.0.0.12", "state": "in_use"},
            {"name": "dp_rpc", "port": 29550, "address": "10.9.9.9", "state": "not_local"}]
    probes = {"h": facts("gb300-tray01", ports=busy), "w": facts("gb300-tray02", ports=busy)}
    r = run_checks(probes, {"h": exp(), "w": exp(role="worker")})
    head = by(r, "h", "ports")
    assert [f["status"] for f in head] == ["fail", "fail", "fail"]
    worker = dict((f["observed"].split()[0], f["status"]) for f in by(r, "w", "ports"))
    assert worker == {"api": "fail", "master": "warn", "dp_rpc": "fail"}
    assert "not configured" in by(r, "w", "ports", "fail")[-1]["observed"]


def test_time_sync_warn_or_fail():
    f = facts("gb300-tray01", time_sync={"synchronized": None, "source": None})
    r = run_checks({"n": f}, {"n": exp(nnodes=1)})
    assert by(r, "n", "time_sync")[0]["status"] == "warn"
    r = run_checks({"n": f}, {"n": exp(nnodes=1)}, {"require_time_sync": True})
    assert by(r, "n", "time_sync")[0]["status"] == "fail"


def test_imex_missing_tool_and_channel():
    f = facts("gb300-tray02")
    f["imex"] = {"present": False}
    f["devices"]["imex_channel"] = False
    r = gb300_pair()
    r = run_checks({"tray01": facts("gb300-tray01"), "tray02": f}, {"tray01": exp(), "tray02": exp(role="worker")})
    assert ("tray02", "imex") in fails(r) and ("tray02", "imex_channel") in fails(r)


def test_imex_membership_warns_when_address_missing():
    probes = {"tray01": facts("gb300-tray01"), "tray02": facts("gb300-tray02")}
    expected = {"tray01": exp(addr="10.0.0.11"), "tray02": exp(role="worker", addr="10.0.5.5")}
    r = run_checks(probes, expected)
    w = by(r, "tray01", "imex_nodes", "warn")
    assert w and "tray02 (10.0.5.5)" in w[0]["observed"]


def test_nvlink_domain_prefers_majority_then_head():
    p = {"a": facts("gb300-tray01"), "b": facts("gb300-tray02"), "c": facts("gb300-other-rack")}
    e = {"a": exp(), "b": exp(role="worker"), "c": exp(role="worker")}
    r = run_checks(p, e)
    assert [f["host"] for f in by(r, check="nvlink_domain", status="fail")] == ["c"]
    p = {"a": facts("gb300-other-rack"), "b": facts("gb300-tray02")}
    r = run_checks(p, {"a": exp(), "b": exp(role="worker")})
    assert [f["host"] for f in by(r, check="nvlink_domain", status="fail")] == ["b"]   # tie -> head's domain


def test_floors_come_from_the_recipe_not_from_thresholds():
    assert "min_driver" not in C.DEFAULT_THRESHOLDS and "min_gpu_memory_mib" not in C.DEFAULT_THRESHOLDS
    assert E.requirements(RECIPE, "nvidia", "gb300") == {"min_driver": "580", "min_cuda": "13.0",
                                                         "min_gpu_memory_mib": 280000}
    assert E.requirements(RECIPE, "amd", "mi355x") == {"min_rocm": "7.0", "min_gpu_memory_mib": 290000}
    r = run_checks({"t": facts("gb300-driver570")}, {"t": exp(nnodes=1, min_driver="570", min_cuda="12.8")})
    assert ("t", "gpu_driver") not in fails(r) and ("t", "cuda_version") not in fails(r)
    th = C.merge_thresholds({"min_free_disk_gb": None, "min_shm": None, "rdma_min_active_ports": 2})
    assert th["min_free_disk_gb"] == 1700 and th["min_shm"] is None and th["rdma_min_active_ports"] == 2


def test_kernel_user_space_driver_mismatch():
    f = facts("gb300-tray01")
    f["nvidia"]["driver_version_kernel"] = "580.105.08"
    r = run_checks({"n": f}, {"n": exp(nnodes=1)})
    assert any("kernel module 580.105.08" in x["observed"] for x in by(r, "n", "gpu_driver", "fail"))


def test_probe_errors_warn():
    r = run_checks({"n": facts("gb300-no-nvidia-smi")}, {"n": exp(nnodes=1)})
    assert by(r, "n", "probe_errors", "warn")


def test_running_deployment_holds_its_ports_and_gpu_memory():
    """A re-run of deploy.yml must not fail preflight on the ports and GPU memory of its own container."""
    from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.preflight import checks as pc
    facts = {"gpus": [{"index": 0, "memory_total_mib": 284208, "memory_used_mib": 270000}],
             "ports": [{"name": "api", "address": "127.0.0.11", "port": 8000, "state": "in_use"}],
             "deployment": {"container": "vllm-kimi-k3", "exists": True, "running": True}}
    idle = dict(facts, deployment={"container": "vllm-kimi-k3", "exists": False, "running": False})
    th = {"max_gpu_memory_used_pct": 5, "min_free_disk_gb": 1}
    exp = {"accelerator": "gb300", "vendor": "nvidia", "gpus_per_node": 4, "role": "head",
           "min_gpu_memory_mib": 280000}
    facts["vendor"] = idle["vendor"] = "nvidia"
    facts["tools"] = idle["tools"] = {"nvidia-smi": "/usr/bin/nvidia-smi"}
    facts["nvidia"] = idle["nvidia"] = {"smi_status": "ok"}
    held = [f for f in pc.check_host("n1", facts, exp, pc.merge_thresholds(th))[0]
            if f["check"] in ("gpu_busy", "ports")]
    free = [f for f in pc.check_host("n1", idle, exp, pc.merge_thresholds(th))[0]
            if f["check"] in ("gpu_busy", "ports")]
    assert held and all(f["status"] == "pass" for f in held)
    assert {f["check"]: f["status"] for f in free} == {"gpu_busy": "fail", "ports": "fail"}


# ------------------------------------------------------------------ root cause first

def driver_not_loaded(node="gb300-tray02"):
    """What node_probe reports when the NVIDIA kernel module is not loaded (every nvidia-smi call exits 9)."""
    f = facts(node)
    f["nvidia"]["smi_status"] = "driver_not_loaded"
    f.update(gpu_model="unknown", gpu_names=[], gpus=[], driver_version=None, cuda_version=None, mnnvl=False,
             fabric={"reasons": ["nvidia-smi failed"]}, errors=["nvidia-smi -q -x: rc 9"])
    return f


def test_driver_not_loaded_is_one_root_failure_with_its_dependents_skipped():
    r = run_checks({"tray01": facts("gb300-tray01"), "tray02": driver_not_loaded()},
                   {"tray01": exp(), "tray02": exp(role="worker", addr="10.0.0.12")}, hosts=["tray01", "tray02"])
    assert fails(r) == [("tray02", "gpu_tools")]
    root = by(r, "tray02", "gpu_tools")[0]
    assert root["observed"] == "nvidia-smi: driver_not_loaded" and "modprobe nvidia" in root["fix"]
    skipped = dict((f["check"], f["observed"]) for f in by(r, "tray02", status="skip"))
    for check in ("gpu_driver", "cuda_version", "gpu_model", "gpu_count", "gpu_memory", "gpu_busy", "fabric", "imex",
                  "imex_channel", "engine_gpu", "nvlink_domain"):
        assert check in skipped, (check, skipped)
    assert skipped["gpu_driver"] == "not checked: depends on gpu_tools"
    assert skipped["cuda_version"] == "not checked: depends on gpu_driver"
    assert skipped["gpu_memory"] == "not checked: depends on gpu_model"
    assert skipped["nvlink_domain"] == "not checked: depends on fabric"
    # no misleading fix anywhere: not the accelerator, not the rack, not a driver upgrade
    text = " ".join(f["fix"] for f in r["findings"])
    for wrong in ("kimi_k3_accelerator", "same rack", "r580"):
        assert wrong not in text, wrong
    # independent checks still ran on the node, and the healthy tray is untouched
    assert by(r, "tray02", "disk")[0]["status"] == "pass" and by(r, "tray02", "ports")
    assert not by(r, "tray01", status="fail") and not by(r, "tray01", status="skip")
    assert r["summary"]["failed_hosts"] == ["tray02"]
    # a value a node could not measure is not drift
    assert not [f for f in r["findings"] if f["check"].startswith("drift_") and f["status"] == "fail"]


def test_every_prerequisite_is_an_earlier_check():
    seen = set()
    for chk in C.HOST_CHECKS:
        assert set(chk.needs) <= seen, chk
        seen.add(chk.name)
    assert {attr for attr, _needs in C.DRIFT_ATTRS} >= {"driver_version", "gpu_count"}
    assert all(needs in seen for _attr, needs in C.DRIFT_ATTRS)


def test_fix_texts_are_specific_to_their_check():
    from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.preflight.fixes import FIX
    assert len(set(FIX.values())) == len(FIX)                          # no text shared by two checks/kinds
    r = run_checks({"t1": facts("gb300-driver570"), "t2": facts("gb300-gpu-missing"), "t3": facts("gb300-imex-down"),
                    "t4": facts("gb300-no-nvidia-smi")},
                   {h: exp(role="head" if h == "t1" else "worker") for h in ("t1", "t2", "t3", "t4")})
    for f in r["findings"]:
        if f["status"] in ("fail", "warn"):
            assert f["fix"], f
        if f["status"] == "skip":
            assert f["fix"] == "" and f["observed"].startswith("not checked: depends on ")
    assert "r580" in by(r, "t1", "gpu_driver", "fail")[0]["fix"]
    assert "nvidia-utils" in by(r, "t4", "gpu_tools", "fail")[0]["fix"]


def test_drift_charges_the_hosts_off_the_common_value():
    p = {"a": facts("gb300-tray01"), "b": facts("gb300-tray02"), "c": facts("gb300-tray02", kernel="6.9")}
    r = run_checks(p, {h: exp(role="head" if h == "a" else "worker") for h in p},
                   {"drift_fatal": ["kernel"]})
    d = by(r, PCL.CLUSTER, "drift_kernel", "fail")[0]
    assert d["hosts"] == ["c"] and r["summary"]["failed_hosts"] == ["c"]
    assert PCL.drifting_hosts({"x": ["a"], "y": ["b"]}, heads=["b"]) == ["a"]     # tie: the head's value wins
    assert PCL.drifting_hosts({"x": ["a"], "y": ["b", "c"]}, heads=["a"]) == ["a"]  # majority beats the head


# ------------------------------------------------------------------ the nodes' Python runs community.docker

def test_python_without_requests_fails_naming_the_package():
    f = facts("gb300-tray01")
    assert f["python"]["requests"] is True
    r = run_checks({"n": f}, {"n": exp(nnodes=1)})
    assert by(r, "n", "python_requests")[0]["status"] == "pass"
    f["python"] = {"executable": "/usr/bin/python3", "version": "3.11.2", "requests": False, "requests_path": None}
    r = run_checks({"n": f}, {"n": exp(nnodes=1)})
    hit = by(r, "n", "python_requests", "fail")[0]
    assert hit["observed"] == "requests not importable by /usr/bin/python3 (Python 3.11.2)"
    assert "apt-get install python3-requests" in hit["fix"] and "/usr/bin/python3 -m pip install requests" in hit["fix"]
    assert fails(r) == [("n", "python_requests")]
    del f["python"]                                        # a probe that does not report it: no verdict
    assert not by(run_checks({"n": f}, {"n": exp(nnodes=1)}), "n", "python_requests")


# ------------------------------------------------------------------ the NCCL/Gloo interface

def with_ifaces(node, **names):
    f = facts(node)
    f["interfaces"] = {"source": "ip", "available": sorted(names), "names": dict(
        (k, dict(v, exists=True)) for k, v in names.items())}
    return f


def iface(addr="10.0.0.11/24", mtu=9000, up=True, loopback=False):
    return {"up": up, "loopback": loopback, "mtu": mtu, "operstate": "UP" if up else "DOWN", "addresses": [addr]}


def ifpair(tray02_iface, tray02_addr="10.0.0.12", **kw):
    probes = {"tray01": with_ifaces("gb300-tray01", bond0=iface()), "tray02": with_ifaces("gb300-tray02", **tray02_iface)}
    expected = {"tray01": exp(socket_ifnames=["bond0"]),
                "tray02": exp(role="worker", addr=tray02_addr, socket_ifnames=["bond0"])}
    return run_checks(probes, expected, hosts=["tray01", "tray02"], **kw)


def test_socket_interface_healthy_and_loopback_prefix():
    r = ifpair({"bond0": iface("10.0.0.12/24")})
    assert by(r, "tray02", "socket_ifname")[0]["observed"] == "bond0 up, MTU 9000, carries 10.0.0.12"
    assert by(r, PCL.CLUSTER, "socket_mtu")[0]["status"] == "pass"
    lo = {"lo": iface("127.0.0.1/8", 65536, loopback=True)}
    r = run_checks({"n": with_ifaces("gb300-tray01", **lo)},
                   {"n": exp(addr="127.0.0.11", socket_ifnames=["lo"])})
    assert by(r, "n", "socket_ifname")[0]["status"] == "pass"                 # the sim: 127.0.0.11 is local on lo


@pytest.mark.parametrize("tray02,observed,fix", [
    ({"eth0": iface("10.0.0.12/24")}, "bond0 not found on the node (has: eth0)", "names an interface this node"),
    ({"bond0": iface("10.0.0.12/24", up=False)}, "bond0 down (operstate DOWN)", "ip link set dev bond0 up"),
    ({"bond0": iface("192.168.5.12/24")}, "none of bond0 carries 10.0.0.12 (has 192.168.5.12/24)",
     "kimi_k3_internal_address 10.0.0.12 is on none of bond0"),
])
def test_socket_interface_faults(tray02, observed, fix):
    r = ifpair(tray02)
    hit = by(r, "tray02", "socket_ifname", "fail")[0]
    assert hit["observed"] == observed and fix in hit["fix"]
    assert fails(r) == [("tray02", "socket_ifname")]                        # its MTU is not compared
    assert by(r, PCL.CLUSTER, "socket_mtu")[0]["observed"] == "all 9000"


def test_socket_mtu_mismatch_is_charged_to_the_odd_node():
    r = ifpair({"bond0": iface("10.0.0.12/24", mtu=1500)})
    hit = by(r, PCL.CLUSTER, "socket_mtu", "fail")[0]
    assert hit["observed"] in ("MTU 1500: tray02; MTU 9000: tray01", "MTU 9000: tray01; MTU 1500: tray02")
    assert hit["hosts"] == ["tray02"] and r["summary"]["failed_hosts"] == ["tray02"]    # tie: the head's MTU wins


def test_socket_ifnames_from_the_plan_env():
    assert E.socket_ifnames({"env": {"GLOO_SOCKET_IFNAME": "bond0,=eth1", "NCCL_SOCKET_IFNAME": "x"}}) == [
        "bond0", "eth1"]
    assert E.socket_ifnames({"env": {"NCCL_SOCKET_IFNAME": "^docker,ib0"}}) == ["ib0"]
    assert E.socket_ifnames({"env": {}}) == []


# ------------------------------------------------------------------ inter-node ports on other networks

MASTER = [{"port": 29501, "variable": "kimi_k3_master_port", "what": "TP/PP rendezvous (torch TCPStore)"}]


def with_all(node, socket=("bond0",), **links):
    """Probe facts with ``ip -j addr show`` of every interface (``names``: the planned socket interfaces)."""
    f = with_ifaces(node, **dict((k, v) for k, v in links.items() if k in socket))
    f["interfaces"]["all"] = dict((k, {"up": v["up"], "loopback": v["loopback"], "addresses": v["addresses"]})
                                  for k, v in links.items())
    return f


def exposure(links, addr="10.0.0.11", listeners=tuple(MASTER), socket_ifnames=("bond0",)):
    r = run_checks({"n": with_all("gb300-tray01", tuple(socket_ifnames), **links)},
                   {"n": exp(addr=addr, socket_ifnames=list(socket_ifnames), exposed_listeners=list(listeners))})
    return by(r, "n", "port_exposure")


LO = iface("127.0.0.1/8", 65536, loopback=True)


def test_port_exposure_warns_naming_host_ports_variable_and_fix():
    found = exposure({"lo": LO, "bond0": iface("10.0.0.11/24"), "eth1": iface("203.0.113.7/24")})
    assert found == [{
        "host": "n", "check": "port_exposure", "status": "warn",
        "observed": "TP/PP rendezvous (torch TCPStore) 29501 (kimi_k3_master_port) listen on all addresses; "
                    "eth1 203.0.113.7/24 outside the cluster network 10.0.0.0/24 (bond0)",
        "expected": "TP/PP rendezvous (torch TCPStore) 29501 (kimi_k3_master_port) reachable only from the cluster "
                    "network 10.0.0.0/24 (bond0)",
        "fix": "The inter-node ports (kimi_k3_master_port: 29501; also NCCL/Gloo bootstrap and the ports vLLM picks "
               "for torch.distributed) take unauthenticated connections and vLLM binds them on every address: on n "
               "allow them only from the cluster network 10.0.0.0/24 and drop them on eth1 (nftables/iptables: "
               "accept tcp from 10.0.0.0/24 to those ports, drop the rest; or a security group), or keep the nodes "
               "on an isolated network without other routable addresses."}]


def test_port_exposure_passes_on_a_cluster_only_node():
    links = {"lo": LO, "bond0": dict(iface("10.0.0.11/24"), addresses=["10.0.0.11/24", "fe80::1/64"]),
             "docker0": iface("172.17.0.1/16"), "eth9": iface("198.51.100.4/24", up=False)}
    found = exposure(links)
    assert [(f["status"], f["observed"]) for f in found] == [
        ("pass", "no address outside 10.0.0.0/24 (bond0) besides loopback")]   # link-local, bridge, down: not counted


def test_port_exposure_names_every_listener_and_outside_address():
    listeners = MASTER + [{"port": 29550, "variable": "kimi_k3_dp_rpc_port", "what": "DP RPC"}]
    found = exposure({"bond0": iface("10.0.0.11/24"), "eth1": iface("203.0.113.7/24"),
                      "eth2": dict(iface("2001:db8::7/64"))}, listeners=listeners)[0]
    assert found["observed"].endswith("; eth1 203.0.113.7/24; eth2 2001:db8::7/64 outside the cluster network "
                                      "10.0.0.0/24 (bond0)")
    assert "(kimi_k3_dp_rpc_port, kimi_k3_master_port: 29501, 29550;" in found["fix"]
    assert "drop them on eth1, eth2" in found["fix"]


def test_port_exposure_in_the_sim_lo_is_the_cluster_network():
    """The rehearsal's nodes use 127.0.0.x on lo: only the fault's extra interface is outside."""
    assert exposure({"lo": LO}, addr="127.0.0.11", socket_ifnames=["lo"])[0]["status"] == "pass"
    hit = exposure({"lo": LO, "eth1": iface("203.0.113.7/24")}, addr="127.0.0.11", socket_ifnames=["lo"])[0]
    assert hit["status"] == "warn" and "eth1 203.0.113.7/24 outside the cluster network 127.0.0.0/8 (lo)" in \
        hit["observed"]


def test_port_exposure_waits_for_the_socket_interface_and_needs_listeners():
    # the internal address on no interface is socket_ifname's failure; exposure is not judged on top of it
    r = run_checks({"n": with_all("gb300-tray01", bond0=iface("192.168.5.11/24"), eth1=iface("203.0.113.7/24"))},
                   {"n": exp(socket_ifnames=["bond0"], exposed_listeners=MASTER)})
    assert [(f["check"], f["status"]) for f in by(r, "n") if f["check"] in ("socket_ifname", "port_exposure")] == [
        ("socket_ifname", "fail"), ("port_exposure", "skip")]
    assert exposure({"bond0": iface("10.0.0.11/24"), "eth1": iface("203.0.113.7/24")}, listeners=[]) == []
    f = with_ifaces("gb300-tray01", bond0=iface())          # a probe without every interface's addresses
    r = run_checks({"n": f}, {"n": exp(socket_ifnames=["bond0"], exposed_listeners=MASTER)})
    assert by(r, "n", "port_exposure") == []
    # no socket interface planned: the internal address alone tells the network
    assert exposure({"eth0": iface("10.0.0.11/24"), "eth1": iface("203.0.113.7/24")}, socket_ifnames=())[0][
        "status"] == "warn"


def _plan(role="head", nnodes=2, parallel=None, env=None):
    return {"role": role, "nnodes": nnodes, "parallel": parallel or MP, "env": env or {}, "master_port": 29501,
            "dp_rpc_port": 29550}


MP = {"tp": 8, "pp": 1, "dp": 1, "dp_local": None, "ep": 1, "dcp": 1}  # one engine over both nodes (--master-addr)
DP = dict(MP, tp=1, dp=16, dp_local=8, ep=16)  # a data-parallel launch (--data-parallel-address)


def test_exposed_listeners_from_the_plan():
    assert E.exposed_listeners(_plan()) == MASTER
    assert E.exposed_listeners(_plan(role="worker")) == []
    assert E.exposed_listeners(_plan(nnodes=1)) == []
    assert [p["variable"] for p in E.exposed_listeners(_plan(parallel=DP))] == ["kimi_k3_dp_rpc_port"]
    nixl = {"VLLM_NIXL_SIDE_CHANNEL_PORT": "5557", "VLLM_NIXL_SIDE_CHANNEL_HOST": "10.0.0.11"}
    assert E.exposed_listeners(_plan(role="worker", env=nixl)) == []            # bound on the node's own address
    wild = dict(nixl, VLLM_NIXL_SIDE_CHANNEL_HOST="0.0.0.0")
    assert E.exposed_listeners(_plan(role="worker", env=wild)) == [
        {"port": 5557, "variable": "kimi_k3_extra_env",
         "what": "NIXL side channel (VLLM_NIXL_SIDE_CHANNEL_HOST 0.0.0.0)"}]
    assert E.exposed_listeners(_plan(role="worker", env={"VLLM_NIXL_SIDE_CHANNEL_PORT": "x"})) == []


def test_probe_reports_every_interface_from_ip_json():
    ip_j = json.dumps([
        {"ifname": "lo", "flags": ["LOOPBACK", "UP"], "mtu": 65536,
         "addr_info": [{"local": "127.0.0.1", "prefixlen": 8}]},
        {"ifname": "bond0", "flags": ["UP", "LOWER_UP"], "mtu": 9000,
         "addr_info": [{"local": "10.0.0.11", "prefixlen": 24}]},
        {"ifname": "eth1", "flags": ["UP", "LOWER_UP"], "mtu": 1500,
         "addr_info": [{"local": "203.0.113.7", "prefixlen": 24}]}])
    io = fixture_io.FixtureIO("gb300-tray01", {"tools": {"ip": "/usr/sbin/ip"}})
    io.run = lambda argv: (0, ip_j, "") if argv[1:] == ["-j", "addr", "show"] else (1, "", "")
    got = PC.collect(io, {"model_cache_dir": "/data/hf-cache", "docker_host": "unix:///var/run/docker.sock",
                          "interfaces": ["bond0"]})["interfaces"]
    assert got["all"] == {"lo": {"up": True, "loopback": True, "addresses": ["127.0.0.1/8"]},
                          "bond0": {"up": True, "loopback": False, "addresses": ["10.0.0.11/24"]},
                          "eth1": {"up": True, "loopback": False, "addresses": ["203.0.113.7/24"]}}


def test_probe_reads_every_interface_without_socket_names_when_asked():
    ip_j = json.dumps([{"ifname": "eth1", "flags": ["UP", "LOWER_UP"], "mtu": 1500,
                        "addr_info": [{"local": "203.0.113.7", "prefixlen": 24}]}])
    io = fixture_io.FixtureIO("gb300-tray01", {"tools": {"ip": "/usr/sbin/ip"}})
    io.run = lambda argv: (0, ip_j, "") if argv[1:] == ["-j", "addr", "show"] else (1, "", "")
    opts = {"model_cache_dir": "/data/hf-cache", "docker_host": "unix:///var/run/docker.sock"}
    assert PC.collect(io, opts)["interfaces"] == {"source": None, "names": {}}
    got = PC.collect(io, dict(opts, all_interfaces=True))["interfaces"]
    assert got["names"] == {} and got["all"] == {
        "eth1": {"up": True, "loopback": False, "addresses": ["203.0.113.7/24"]}}


_ADDR = st.one_of(st.sampled_from(["10.0.0.11/24", "10.0.0.12/16", "203.0.113.7/24", "fe80::1/64", "2001:db8::1/64",
                                   "127.0.0.1/8", "10.0.0.11", "bogus", "1.2.3.4/99", "", "::/0"]),
                  st.text(max_size=12))
_LINK = st.fixed_dictionaries({"up": st.booleans(), "loopback": st.booleans(),
                               "addresses": st.one_of(st.none(), st.lists(_ADDR, max_size=3))})


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["lo", "bond0", "eth1", "docker0", "ib0"]), _LINK, max_size=4),
       st.sampled_from(["10.0.0.11", "127.0.0.11", "tray01.example", "", "2001:db8::1"]))
def test_port_exposure_never_raises_on_any_interface_facts(links, addr):
    f = facts("gb300-tray01")
    f["interfaces"] = {"source": "ip", "available": sorted(links), "names": {}, "all": links}
    r = run_checks({"n": f}, {"n": exp(addr=addr, exposed_listeners=MASTER)})
    found = by(r, "n", "port_exposure")
    assert len(found) == 1 and found[0]["status"] in ("pass", "warn", "skip")
    assert (found[0]["status"] == "warn") == bool(found[0]["fix"])


# ------------------------------------------------------------------ weight read against the plan's timeouts

BASIS = {"mib_s": 2000, "engine_ready_timeout_s": 1690, "load_factor": 1.5}


def _read(mib_s, host="n", basis=None, judged=True):
    basis = dict(BASIS) if judged and basis is None else basis
    f = facts("gb300-tray01")
    f["weights"] = {"present": True, "path": "/data/hf-cache/hub/x", "bytes": 1560 * 1000 ** 3,
                    "read": {"mib_s": mib_s, "bytes": 512 * 1024 ** 2, "files": 1, "direct": True}}
    return by(run_checks({host: f}, {host: exp(nnodes=1, weight_read=basis)}), host, "weight_read")


def test_weight_read_at_or_above_the_assumed_rate_passes():
    (f,) = _read(2000)
    assert (f["status"], f["observed"]) == ("pass", "read 2000 MiB/s")
    assert f["expected"] == (">= 2000 MiB/s (kimi_k3_weight_read_mib_s: the plan's launch timeouts, engine ready "
                             "1690 s, assume it)")


def test_weight_read_slower_than_assumed_warns_within_the_margin():
    (f,) = _read(1500.5, host="gb300-tray07")
    assert f["status"] == "warn"
    assert f["observed"] == "read 1500.5 MiB/s (75 % of the rate the timeouts assume)"
    assert f["fix"].startswith("Set kimi_k3_weight_read_mib_s: 1500 for gb300-tray07 (its host_vars)")


def test_weight_read_slower_than_the_margin_covers_fails_naming_host_and_variable():
    # 1.5 x 1333 = 1999.5 < 2000: the recipe's load factor no longer covers the slower disk
    (f,) = _read(1333, host="gb300-tray02")
    assert f["status"] == "fail"
    assert f["observed"] == ("read 1333 MiB/s (67 % of the rate the timeouts assume; the load would outrun the "
                             "engine's start-up limit)")
    assert "kimi_k3_weight_read_mib_s: 1333 for gb300-tray02" in f["fix"] and "slowest node" in f["fix"]
    assert _read(1334)[0]["status"] == "warn"


def test_weight_read_not_judged_without_a_plan_rate_or_a_measurement():
    assert _read(16, judged=False) == []
    f = facts("gb300-tray01")
    f["weights"] = {"present": True, "path": "/x", "bytes": 1, "read": {"mib_s": None, "error": "EIO"}}
    assert by(run_checks({"n": f}, {"n": exp(nnodes=1, weight_read=BASIS)}), "n", "weight_read") == []


@settings(max_examples=200, deadline=None)
@given(measured=st.floats(min_value=0.01, max_value=1e6), assumed=st.integers(min_value=1, max_value=100000))
def test_weight_read_status_follows_the_ratio(measured, assumed):
    (f,) = _read(measured, basis={"mib_s": assumed, "engine_ready_timeout_s": 900, "load_factor": 1.5})
    want = "pass" if measured >= assumed else ("fail" if measured * 1.5 < assumed else "warn")
    assert f["status"] == want and (f["fix"] == "") == (want == "pass")


def test_weight_read_basis_is_the_host_plans_timeouts():
    recipe = {"timeouts": {"load_factor": 1.5}}
    plan = {"deployment": "replica-1", "timeouts": {"weight_read_mib_s": 16, "engine_ready_timeout_s": 3600}}
    assert E.weight_read_basis(plan, recipe) == {"mib_s": 16, "engine_ready_timeout_s": 3600, "load_factor": 1.5}
    unmeasured = {"timeouts": {"weight_read_mib_s": None, "engine_ready_timeout_s": 3600}}
    assert E.weight_read_basis(unmeasured, recipe) is None
    assert E.weight_read_basis({"timeouts": {}}, recipe) is None
    assert E.weight_read_basis({"timeouts": {"weight_read_mib_s": 900, "engine_ready_timeout_s": 1100}}, {}) == {
        "mib_s": 900, "engine_ready_timeout_s": 1100, "load_factor": 1.0}


def test_each_deployments_nodes_are_held_to_their_own_deployments_timeouts():
    """Prefill read at 2 GiB/s, decode at 10 GiB/s: every node's basis is its own deployment's timeouts, the
    record the plan also keeps in cluster.deployments."""
    from tests.unit.plugins.plugin_utils.plan.test_topology_fleet import pd_cluster
    r = pd_cluster(prefill={"kimi_k3_weight_read_mib_s": 2048}, decode={"kimi_k3_weight_read_mib_s": 10240})
    assert r["ok"], r["errors"]
    recorded = dict((d["name"], d["timeouts"]) for d in r["cluster"]["deployments"])
    factor = RECIPE["timeouts"]["load_factor"]
    seen = {}
    for host, plan in sorted(r["plans"].items()):
        if plan["role"] not in ("head", "worker"):
            continue
        basis = E.expected_from_plan(plan, r["cluster"], RECIPE)["weight_read"]
        want = recorded[plan["deployment"]]
        assert basis == {"mib_s": want["weight_read_mib_s"], "engine_ready_timeout_s": want["engine_ready_timeout_s"],
                         "load_factor": factor}, host
        seen[host] = basis["mib_s"]
    assert seen == {"prefill-1-0": 2048, "prefill-1-1": 2048, "decode-1-0": 10240, "decode-1-1": 10240,
                    "decode-1-2": 10240, "decode-1-3": 10240}
