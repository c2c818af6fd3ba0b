"""Fabric prerequisites of the chosen all2all kernel (ibgda_driver, gpudirect, mori_rdma), the access check in the
check table, the probe root, and AMD used VRAM. Expectations come from the recipe (all2all_prerequisites)
through preflight_expect, as the preflight_report action passes them."""
import copy
import importlib.util
import json
import os
import subprocess
import sys

import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.preflight import checks as C
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.preflight import cluster as PCL
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.preflight import expect as E
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.probe import collect as PC
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.probe import parsers as P
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import gpu as smoke_gpu
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import recipe_data
from tests.helpers.runner import REPO

RECIPE = recipe_data.load_recipe()
NODETOOLS = os.path.join(REPO, "sim", "nodetools")
_spec = importlib.util.spec_from_file_location(
    "probe_fixture_io_fabric", os.path.join(REPO, "tests", "unit", "fixtures", "probes", "fixture_io.py"))
fixture_io = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fixture_io)

OPTIONS = {"model": "moonshotai/Kimi-K3", "model_cache_dir": "/data/hf-cache", "docker_host": "unix:///var/run/docker.sock",
           "ports": []}


def facts(node, **overrides):
    f = PC.collect(fixture_io.FixtureIO(node), OPTIONS)
    f.update(overrides)
    return f


def exp(acc, backend, env=None, **kw):
    hw = RECIPE["hardware"][acc]
    plan = {"vendor": hw["vendor"], "vllm_args": ["serve", "x", "--all2all-backend", backend] if backend else [],
            "env": env or {}}
    e = {"accelerator": acc, "vendor": hw["vendor"], "gpus_per_node": hw["gpus_per_node"], "interconnect": "rdma",
         "nnodes": 2, "role": "head", "memlock": -1, "shm_size": "64g", "internal_address": "10.0.0.11",
         "model": "moonshotai/Kimi-K3", "imex_channel": False}
    e.update(E.requirements(RECIPE, hw["vendor"], acc))
    e.update(E._fabric_expectations(plan, {}, RECIPE))
    e.update(kw)
    return e


def one(result, check, host="n"):
    found = [f for f in result["findings"] if f["host"] == host and f["check"] == check]
    assert len(found) == 1, (check, result["findings"])
    return found[0]


def judge(node_facts, expected):
    return PCL.run_checks({"n": node_facts}, {"n": expected}, hosts=["n"])


def with_kernel(f, modules=None, params="keep"):
    f = copy.deepcopy(f)
    if modules is not None:
        f["kernel_state"]["modules"] = sorted(modules)
        f["kernel_state"]["modules_readable"] = True
    if params != "keep":
        f["kernel_state"]["nvidia_params"] = params
    return f


# ------------------------------------------------------------------ expectations come from the plan and the recipe

def test_prerequisites_follow_the_plans_all2all_kernel():
    assert E.all2all_backend({"vllm_args": ["--all2all-backend", "deepep_v2"]}, {}) == "deepep_v2"
    assert E.all2all_backend({"vllm_args": ["--all2all-backend=mori_low_latency"]}, {}) == "mori_low_latency"
    assert E.all2all_backend({"vllm_args": []}, {"all2all_backend": "deepep_low_latency"}) == "deepep_low_latency"
    assert E.fabric_prerequisites(RECIPE, "deepep_v2", "nvidia")["name"] == "deepep_ibgda"
    assert E.fabric_prerequisites(RECIPE, "mori_high_throughput", "amd")["name"] == "mori_rdma"
    for nvlink_only in ("flashinfer_nvlink_one_sided", "flashinfer_nvlink_two_sided", "allgather_reducescatter", None):
        assert E.fabric_prerequisites(RECIPE, nvlink_only, "nvidia") is None
    assert E.fabric_prerequisites(RECIPE, "deepep_v2", "amd") is None
    pre = E.fabric_prerequisites(RECIPE, "deepep_v2", "nvidia")
    assert E.peer_memory_only(pre, {"NCCL_DMABUF_ENABLE": "0"}) is True
    assert E.peer_memory_only(pre, {"NCCL_DMABUF_ENABLE": "1"}) is False and E.peer_memory_only(None, {}) is False


def test_nvlink_kernels_need_no_rdma_prerequisite():
    r = judge(facts("gb300-tray01"), exp("gb300", "flashinfer_nvlink_one_sided", interconnect="nvlink"))
    checks = {f["check"] for f in r["findings"]}
    assert not checks & {"ibgda_driver", "mori_rdma", "rdma", "gpudirect"}


# ------------------------------------------------------------------ ibgda_driver (DeepEP / NVSHMEM / NCCL GIN)

def test_ibgda_driver_passes_with_the_deepep_driver_settings():
    f = one(judge(facts("gb300-tray01"), exp("gb300", "deepep_v2")), "ibgda_driver")
    assert f["status"] == "pass" and f["observed"] == "EnableStreamMemOPs: 1, RegistryDwords PeerMappingOverride=1"


@pytest.mark.parametrize("params,observed", [
    ({"EnableStreamMemOPs": "0", "RegistryDwords": ""}, "EnableStreamMemOPs: 0; RegistryDwords lacks PeerMappingOverride"),
    ({"EnableStreamMemOPs": "1", "RegistryDwords": "PeerMappingOverride=0;"}, "RegistryDwords PeerMappingOverride=0"),
    ({"RegistryDwords": "RMForceX=1;PeerMappingOverride=0x1"}, "EnableStreamMemOPs: absent"),
])
def test_ibgda_driver_fails_naming_the_setting_and_the_reboot(params, observed):
    node = with_kernel(facts("gb300-tray01"), params=params)
    f = one(judge(node, exp("gb300", "deepep_v2")), "ibgda_driver")
    assert f["status"] == "fail" and f["observed"] == observed
    assert 'options nvidia NVreg_EnableStreamMemOPs=1 NVreg_RegistryDwords="PeerMappingOverride=1;"' in f["fix"]
    assert "REBOOT" in f["fix"] and "deepep_v2" in f["fix"] and "update-initramfs -u" in f["fix"]


def test_cpu_assisted_ibgda_warns_for_deepep_v1_only():
    off = {"EnableStreamMemOPs": "0", "RegistryDwords": ""}
    node = with_kernel(facts("gb300-tray01"), modules=["nvidia", "gdrdrv", "nvidia_peermem"], params=off)
    v1 = one(judge(node, exp("gb300", "deepep_low_latency")), "ibgda_driver")
    assert v1["status"] == "warn" and "gdrdrv loaded: CPU-assisted IBGDA" in v1["observed"]
    assert one(judge(node, exp("gb300", "deepep_v2")), "ibgda_driver")["status"] == "fail"


def test_ibgda_driver_unreadable_params_is_a_clear_failure_and_driver_down_skips_it():
    node = with_kernel(facts("gb300-tray01"), params=None)
    f = one(judge(node, exp("gb300", "deepep_v2")), "ibgda_driver")
    assert f["status"] == "fail" and f["observed"] == "/proc/driver/nvidia/params unreadable"
    assert "preflight_probe_root" in f["fix"]
    down = one(judge(facts("gb300-no-nvidia-smi"), exp("gb300", "deepep_v2")), "ibgda_driver")
    assert down["status"] == "skip" and down["observed"] == "not checked: depends on gpu_tools"


# ------------------------------------------------------------------ gpudirect under a DeepEP plan

def test_gpudirect_is_required_by_deepep_and_peermem_only_without_dmabuf():
    no_peer = with_kernel(facts("gb300-tray01"), modules=["nvidia", "mlx5_ib"])
    no_peer["gpudirect"] = {"peermem_loaded": False, "dmabuf_capable": False, "mode": "none"}
    f = one(judge(no_peer, exp("gb300", "deepep_v2")), "gpudirect")
    assert f["status"] == "fail" and "deepep_v2" in f["expected"] and "modprobe nvidia_peermem" in f["fix"]
    dmabuf = dict(no_peer, gpudirect={"peermem_loaded": False, "dmabuf_capable": True, "mode": "dmabuf"})
    assert one(judge(dmabuf, exp("gb300", "deepep_v2")), "gpudirect")["status"] == "pass"
    peer_only = one(judge(dmabuf, exp("gb300", "deepep_v2", env={"NCCL_DMABUF_ENABLE": "0"})), "gpudirect")
    assert peer_only["status"] == "fail" and peer_only["observed"] == "nvidia_peermem not loaded (dmabuf)"
    assert "NCCL_DMABUF_ENABLE=0" in peer_only["fix"]
    # without a kernel that needs it the policy default stays a warning
    legacy = dict(exp("gb300", None), interconnect="rdma")
    assert one(judge(no_peer, legacy), "gpudirect")["status"] == "warn"


# ------------------------------------------------------------------ mori_rdma (AMD MoRI)

def test_mori_rdma_passes_with_a_supported_provider_and_fails_without():
    ok = one(judge(facts("mi355x-node01"), exp("mi355x", "mori_high_throughput")), "mori_rdma")
    assert ok["status"] == "pass" and ok["observed"] == "mlx5_ib loaded"
    node = with_kernel(facts("mi355x-node01"), modules=["amdgpu", "irdma", "ib_uverbs"])
    bad = one(judge(node, exp("mi355x", "mori_high_throughput")), "mori_rdma")
    assert bad["status"] == "fail" and bad["observed"] == "none of bnxt_re, ionic_rdma, mlx5_ib loaded"
    assert "modprobe ionic_rdma" in bad["fix"] and "mori_high_throughput" in bad["fix"]
    gpu = one(judge(with_kernel(node, modules=["mlx5_ib"]), exp("mi355x", "mori_low_latency")), "mori_rdma")
    assert gpu["status"] == "fail" and gpu["observed"] == "amdgpu not loaded" and "modprobe amdgpu" in gpu["fix"]


def test_mori_rdma_skips_when_rdma_fails_and_reports_unreadable_modules():
    node = facts("mi355x-node01")
    node["rdma"] = {"source": None, "ports": [], "active_ports": 0}
    r = judge(node, exp("mi355x", "mori_high_throughput"))
    assert one(r, "rdma")["status"] == "fail" and one(r, "mori_rdma")["observed"] == "not checked: depends on rdma"
    unread = one(judge(facts("mi355x-node02"), exp("mi355x", "mori_high_throughput")), "mori_rdma")
    assert unread["status"] == "fail" and unread["observed"] == "/proc/modules unreadable"


# ------------------------------------------------------------------ access (preflight_access) is in the check table

def test_access_check_is_registered_and_refuses_a_user_without_become():
    root = one(judge(facts("gb300-tray01"), exp("gb300", None)), "access")
    assert root["status"] == "pass" and root["fix"] == ""
    user = {"user": "kimi-docker", "euid": 1002, "groups": ["docker"], "socket": "/var/run/docker.sock",
            "socket_rw": True, "paths": {"/data/hf-cache": False}}
    f = one(judge(facts("gb300-tray01", access=user), exp("gb300", None)), "access")
    assert f["status"] == "fail" and "kimi-docker (uid 1002) without become" in f["observed"]
    assert "ansible_become: true" in f["fix"] and "/data/hf-cache" in f["fix"]
    assert "access" in [c.name for c in C.HOST_CHECKS]


def test_probe_reports_access_of_its_own_process(tmp_path):
    io = PC.ProbeIO(run=lambda argv: (127, "", "absent"), which=lambda name: None)
    f = PC.collect(io, dict(OPTIONS, model_cache_dir=str(tmp_path), access_paths=[str(tmp_path / "env")]))
    paths = {str(tmp_path): True, str(tmp_path / "env"): True}
    assert f["access"]["euid"] == os.geteuid() and f["access"]["paths"] == paths


# ------------------------------------------------------------------ the probe root

def test_probe_reads_kernel_state_below_its_root(tmp_path):
    (tmp_path / "proc" / "driver" / "nvidia").mkdir(parents=True)
    (tmp_path / "proc" / "modules").write_text("nvidia_peermem 16384 0 - Live 0x0\nnvidia 1 1 - Live 0x0\n")
    (tmp_path / "proc" / "driver" / "nvidia" / "params").write_text(
        'EnableStreamMemOPs: 1\nRegistryDwords: "PeerMappingOverride=1;"\n')
    io = PC.ProbeIO(root=str(tmp_path))
    assert io.kpath("/proc/modules") == str(tmp_path / "proc" / "modules")
    assert io.kpath("/etc/kimi-k3") == "/etc/kimi-k3" and io.kpath("/dev/kfd") == "/dev/kfd"
    state = PC.collect_kernel_state(io)
    assert state == {"modules_readable": True, "modules": ["nvidia", "nvidia_peermem"],
                     "nvidia_params": {"EnableStreamMemOPs": "1", "RegistryDwords": "PeerMappingOverride=1;"}}
    assert PC.ProbeIO().kpath("/proc/modules") == "/proc/modules"


# ------------------------------------------------------------------ parsers: exact values and never a traceback

def test_parse_nvidia_params_and_registry_dwords():
    text = 'EnableMSI: 1\nEnableStreamMemOPs: 1\nRegistryDwords: "PeerMappingOverride=1;RmFoo=0x10"\nRmMsg: ""\n'
    params = P.parse_nvidia_params(text)
    assert params["EnableStreamMemOPs"] == "1" and params["RmMsg"] == ""
    assert P.parse_registry_dwords(params["RegistryDwords"]) == {"PeerMappingOverride": 1, "RmFoo": 16}
    assert P.parse_nvidia_params("") is None and P.parse_nvidia_params(None) is None
    assert P.parse_nvidia_params("garbage without colon\n") is None
    assert [P.param_int(v) for v in ("1", "0x1", "Y", "N", "", None, "x", True)] == [1, 1, 1, 0, None, None, None, 1]


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.none(), st.text(max_size=400)))
def test_nvidia_params_parsers_never_raise(text):
    params = P.parse_nvidia_params(text)
    assert params is None or (isinstance(params, dict) and params)
    for value in (params or {}).values():
        assert isinstance(P.parse_registry_dwords(value), dict)
        P.param_int(value)
    assert C.ibgda_settings_off(params or {}, E.fabric_prerequisites(RECIPE, "deepep_v2", "nvidia")) is not None


_JSON = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=8)),
                     lambda inner: st.one_of(st.lists(inner, max_size=4),
                                             st.dictionaries(st.sampled_from(
                                                 ["gpu", "gpu_data", "mem_usage", "total_vram", "used_vram", "value",
                                                  "unit", "x"]), inner, max_size=4)), max_leaves=20)


@settings(max_examples=150, deadline=None)
@given(st.one_of(_JSON.map(json.dumps), st.text(max_size=200)))
def test_amd_mem_parser_never_raises_and_returns_mib_or_none(text):
    out = P.parse_amd_smi_metric_mem(text)
    assert isinstance(out, dict)
    for item in out.values():
        assert set(item) == {"total_mib", "used_mib"}
        assert all(v is None or isinstance(v, int) for v in item.values())


# ------------------------------------------------------------------ AMD used VRAM, as the smoke report reads it

def test_amd_probe_reports_used_and_total_vram_and_smoke_sums_them():
    f = facts("mi355x-node01")
    assert [(g["memory_used_mib"], g["memory_total_mib"]) for g in f["gpus"]][:2] == [(283, 294896), (284, 294896)]
    summary = smoke_gpu.gpu_memory_summary({"m1": {"node_probe": f}})["m1"]
    assert summary["used_mib"] == sum(283 + i for i in range(8)) and summary["total_mib"] == 8 * 294896
    assert summary["used_frac"] == round(summary["used_mib"] / float(8 * 294896), 4)


def test_amd_busy_gpus_fail_gpu_busy():
    f = facts("mi355x-node01")
    for g in f["gpus"]:
        g["memory_used_mib"] = 265406
    busy = one(judge(f, exp("mi355x", None)), "gpu_busy")
    assert busy["status"] == "fail" and "GPU 0: 265406 of 294896 MiB used" in busy["observed"]


def test_amd_unreadable_mem_output_is_an_error_not_a_crash():
    io = fixture_io.FixtureIO("mi355x-node01")
    io.m["commands"]["amd-smi metric --mem-usage --json"] = {"rc": 0, "stdout": "amd-smi-version.json"}
    f = PC.collect(io, OPTIONS)
    assert all(g["memory_used_mib"] is None for g in f["gpus"])
    assert any("amd-smi metric --mem-usage: output unreadable" in e for e in f["errors"])


# ------------------------------------------------------------------ the rehearsal fakes: each fault breaks its check

def _sim_node(tmp_path, base, faults):
    spec = importlib.util.spec_from_file_location("kimi_sim_profile_fabric", os.path.join(NODETOOLS, "profile.py"))
    simprofile = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(simprofile)
    tmp_path.mkdir(parents=True, exist_ok=True)
    prof = tmp_path / "profile.json"
    prof.write_text(json.dumps(simprofile.render_node_profile(base, "node-a", 0, list(faults))))
    root = tmp_path / "root"
    (root / "usr" / "local" / "bin").mkdir(parents=True)
    env = dict(os.environ, KIMI_SIM_ROOT=str(root), KIMI_SIM_PROFILE=str(prof))
    res = subprocess.run([sys.executable, os.path.join(NODETOOLS, "sim-node-init")], env=env, capture_output=True,
                         text=True, check=False)
    assert res.returncode == 0, res.stderr
    return PC.collect_kernel_state(PC.ProbeIO(root=str(root / "etc" / "kimi-sim" / "root"))), root


@pytest.mark.parametrize("base,backend,fault,check,env", [
    ("gb300", "deepep_v2", "ibgda_params_missing", "ibgda_driver", None),
    ("gb300", "deepep_v2", "no_nvidia_peermem", "gpudirect", {"NCCL_DMABUF_ENABLE": "0"}),
    ("mi355x", "mori_high_throughput", "mori_rdma_provider_missing", "mori_rdma", None),
])
def test_sim_fault_breaks_exactly_its_check(tmp_path, base, backend, fault, check, env):
    fixture = {"gb300": "gb300-tray01", "mi355x": "mi355x-node01"}[base]
    expected = exp(base, backend, env=env)
    states = {}
    for name in ("healthy", fault):
        state, root = _sim_node(tmp_path / name, base, [] if name == "healthy" else [fault])
        node = facts(fixture, kernel_state=state)
        if base == "gb300":
            node["gpudirect"] = PC.collect_gpudirect(PC.ProbeIO(root=str(root / "etc" / "kimi-sim" / "root")), {"open_module": True}, state)
        r = judge(node, expected)
        states[name] = dict((f["check"], f["status"]) for f in r["findings"] if f["check"] in (
            "ibgda_driver", "gpudirect", "mori_rdma"))
    assert set(states["healthy"].values()) == {"pass"}, states
    assert states[fault][check] == "fail" and [c for c, s in states[fault].items() if s == "fail"] == [check], states


def test_sim_driver_not_loaded_leaves_no_nvidia_kernel_state(tmp_path):
    state, root = _sim_node(tmp_path, "gb300", ["driver_not_loaded"])
    assert state["nvidia_params"] is None and not [m for m in state["modules"] if m.startswith("nvidia")]
    assert not (root / "etc/kimi-sim/root/proc/driver/nvidia").exists()
    healthy, root2 = _sim_node(tmp_path / "h", "gb300", [])
    banner = (root2 / "etc/kimi-sim/root/proc/driver/nvidia/version").read_text()
    assert P.parse_proc_driver_version(banner) == {"driver_version": "580.173.02", "open_module": True}


# ------------------------------------------------------------------ rdma_devices (the /dev/infiniband the plan mounts)

@pytest.mark.parametrize("node,acc,backend", [("mi355x-node01", "mi355x", "mori_high_throughput"),
                                              ("gb300-tray01", "gb300", "deepep_v2")])
def test_rdma_devices_pass_with_uverbs_and_fail_without_naming_the_module(node, acc, backend):
    healthy = facts(node)
    healthy["devices"] = dict(healthy["devices"], infiniband_uverbs=2)
    ok = one(judge(healthy, exp(acc, backend, rdma_devices=True)), "rdma_devices")
    assert (ok["status"], ok["observed"]) == ("pass", "2 /dev/infiniband/uverbs* device(s)")
    missing = dict(healthy, devices=dict(healthy["devices"], infiniband_uverbs=0))
    bad = one(judge(missing, exp(acc, backend, rdma_devices=True)), "rdma_devices")
    assert (bad["status"], bad["observed"]) == ("fail", "0 /dev/infiniband/uverbs* device(s)")
    assert "modprobe ib_uverbs" in bad["fix"] and "/dev/infiniband" in bad["fix"]


def test_rdma_devices_only_where_the_plan_mounts_them():
    node = dict(facts("mi355x-node01"))
    node["devices"] = dict(node["devices"], infiniband_uverbs=0)
    assert not [f for f in judge(node, exp("mi355x", "mori_high_throughput"))["findings"]
                if f["check"] == "rdma_devices"]
    assert E._needs_device({"devices": ["/dev/infiniband:/dev/infiniband:rwm"]}, E.RDMA_DEVICES)
    assert not E._needs_device({"devices": ["/dev/kfd:/dev/kfd:rwm"]}, E.RDMA_DEVICES)


@pytest.mark.parametrize("inventory,host,mounted", [("mi355x-rdma-2node", "mi355x-node02", True),
                                                    ("gb300-cluster", "gb300-tray02", False)])
def test_rdma_devices_expected_from_the_golden_plans(inventory, host, mounted):
    path = os.path.join(REPO, "tests", "unit", "plugins", "action", "golden_plans", inventory, host + ".json")
    with open(path) as handle:
        plan = json.load(handle)
    assert E.expected_from_plan(plan, {}, RECIPE)["rdma_devices"] is mounted
