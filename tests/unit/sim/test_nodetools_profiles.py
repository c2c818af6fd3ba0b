"""Node profiles (sim/nodetools/profile.py, sim/profiles/*.json) and sim-node-init."""
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
NODETOOLS = os.path.join(REPO, "sim", "nodetools")
PROFILES = os.path.join(REPO, "sim", "profiles")


def _load_profile_module():
    spec = importlib.util.spec_from_file_location("kimi_sim_profile_t1", os.path.join(NODETOOLS, "profile.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


P = _load_profile_module()
BASES = ["gb300", "mi355x", "h200", "b200"]
UUID_RE = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def flatten(obj, prefix=""):
    out = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.update(flatten(v, "%s%s." % (prefix, k)))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out.update(flatten(v, "%s%d." % (prefix, i)))
    else:
        out[prefix.rstrip(".")] = obj
    return out


def changed_paths(a, b):
    fa, fb = flatten(a), flatten(b)
    return {k for k in set(fa) | set(fb) if fa.get(k, "<absent>") != fb.get(k, "<absent>")} - {
        k for k in set(fa) | set(fb) if k.startswith("faults")}


@pytest.mark.parametrize("base", BASES)
def test_every_base_profile_renders(base):
    prof = P.render_node_profile(base, "%s-n1" % base, 0)
    assert len(prof["gpus"]) == prof["gpu_count"]
    assert prof["node"] == {"name": "%s-n1" % base, "index": 0, "address": prof["node_address_base"]}
    assert len({g["uuid"] for g in prof["gpus"]}) == prof["gpu_count"]
    assert prof["faults"] == []


def test_gb300_identity_matches_reference():
    prof = P.render_node_profile("gb300", "gb300-tray01", 0)
    assert [g["pci_bus_id"] for g in prof["gpus"]] == [
        "00000008:06:00.0", "00000009:06:00.0", "00000018:06:00.0", "00000019:06:00.0"]
    for g in prof["gpus"]:
        assert g["name"] == "NVIDIA GB300" and g["memory_total_mib"] == 284208 and g["compute_cap"] == "10.3"
        assert g["pci_device_id"] == "0x31C210DE"
        assert UUID_RE.match(g["uuid"])
        assert g["fabric"]["state"] == "Completed" and g["fabric"]["status"] == "Success"
        assert g["fabric"]["cluster_uuid"] != "00000000-0000-0000-0000-000000000000"
    assert (prof["driver"]["version"], prof["driver"]["cuda_version"]) == ("580.173.02", "13.0")
    assert prof["imex"]["domain_state"] == "UP"
    assert [n["status"] for n in prof["imex"]["nodes"]] == ["READY", "READY"]
    ports = [d["ports"]["1"] for d in prof["rdma"]["devices"].values()]
    assert len(ports) == 4 and all(p["state"] == "PORT_ACTIVE" and p["link_layer"] == "InfiniBand" for p in ports)


def test_nodes_differ_in_identity_but_share_the_nvlink_domain():
    a = P.render_node_profile("gb300", "gb300-tray01", 0)
    b = P.render_node_profile("gb300", "gb300-tray02", 1)
    assert a["node"]["address"] == "127.0.0.11" and b["node"]["address"] == "127.0.0.12"
    assert not {g["uuid"] for g in a["gpus"]} & {g["uuid"] for g in b["gpus"]}
    assert {g["fabric"]["cluster_uuid"] for g in a["gpus"] + b["gpus"]} == {a["fabric"]["cluster_uuid"]}
    assert [n["address"] for n in a["imex"]["nodes"]] == [n["address"] for n in b["imex"]["nodes"]]
    assert a["rdma"]["devices"]["mlx5_0"]["node_guid"] != b["rdma"]["devices"]["mlx5_0"]["node_guid"]
    # deterministic
    assert P.render_node_profile("gb300", "gb300-tray01", 0) == a


def test_mi355x_identity():
    prof = P.render_node_profile("mi355x", "mi355x-node01", 0)
    assert prof["node"]["address"] == "127.0.0.21"
    assert len(prof["gpus"]) == 8
    for g in prof["gpus"]:
        assert g["name"] == "AMD Instinct MI355X" and g["device_id"] == "0x75a3"
        assert g["target_graphics_version"] == "gfx950" and g["memory_total_mib"] == 294896
        assert re.match(r"^75ff75a3-0000-1000-80[0-9a-f]{2}-[0-9a-f]{12}$", g["uuid"])
    assert prof["rocm"]["version"].startswith("7.")
    assert all(d["ports"]["1"]["link_layer"] == "Ethernet" and d["ports"]["1"]["state"] == "PORT_ACTIVE"
               for d in prof["rdma"]["devices"].values())
    assert len(prof["rdma"]["devices"]) == 8


def test_domain_nodes_and_address_overrides():
    prof = P.render_node_profile("gb300", "x", 3, address="10.0.0.5", domain_nodes=["10.0.0.4", "10.0.0.5"])
    assert prof["node"]["address"] == "10.0.0.5"
    assert [n["address"] for n in prof["imex"]["nodes"]] == ["10.0.0.4", "10.0.0.5"]


def test_unknown_fault_lists_valid_ones():
    with pytest.raises(ValueError) as exc:
        P.render_node_profile("gb300", "n", 0, ["no_such_fault"])
    msg = str(exc.value)
    assert "no_such_fault" in msg
    for name in ("old_driver", "missing_gpu", "ib_port_down", "imex_down", "fabric_not_completed",
                 "no_nvidia_smi", "driver_not_loaded", "rocm_old", "mixed_model"):
        assert name in msg


def test_unknown_base_profile_rejected():
    with pytest.raises(ValueError, match="unknown base profile"):
        P.render_node_profile("gb999", "n", 0)


@pytest.mark.parametrize("base,fault", [("mi355x", "old_driver"), ("gb300", "rocm_old"), ("h200", "imex_down"),
                                        ("mi355x", "driver_not_loaded")])
def test_fault_that_does_not_fit_the_profile_is_rejected(base, fault):
    with pytest.raises(ValueError, match=fault):
        P.render_node_profile(base, "n", 0, [fault])


EXPECTED_CHANGES = {
    # fault -> (base, regexes every changed path must match, paths that must change)
    "old_driver": ("gb300", [r"^driver\.", r"^imex\.version$"], ["driver.version", "driver.cuda_version"]),
    "driver_610": ("gb300", [r"^driver\.", r"^imex\.version$"], ["driver.version"]),
    "missing_gpu": ("gb300", [r"^gpu_count$", r"^gpus\.3\.", r"^cdi_devices\."], ["gpu_count", "gpus.3.uuid"]),
    "mixed_model": ("gb300", [r"^gpu_overrides\.3\.", r"^gpus\.3\.", r"^cdi_devices\."], ["gpus.3.name"]),
    "ib_port_down": ("gb300", [r"^rdma\.devices\.mlx5_1\.ports\.1\."], ["rdma.devices.mlx5_1.ports.1.state"]),
    "imex_down": ("gb300", [r"^imex\.(domain_state|peer_status|nodes\.1\.status)$"],
                  ["imex.domain_state", "imex.nodes.1.status"]),
    "fabric_not_completed": ("gb300", [r"^fabric\.", r"^gpus\.\d\.fabric\."], ["gpus.0.fabric.state"]),
    "no_nvidia_smi": ("gb300", [r"^tools_missing\."], ["tools_missing.0"]),
    "driver_not_loaded": ("gb300", [r"^driver\.loaded$"], ["driver.loaded"]),
    "rocm_old": ("mi355x", [r"^rocm\."], ["rocm.version", "rocm.version_file", "rocm.amd_smi_tool"]),
    "gpu_busy": ("mi355x", [r"^gpu\.memory_used_mib$", r"^gpus\.\d\.memory_used_mib$"], ["gpus.0.memory_used_mib"]),
    "no_python_requests": ("gb300", [r"^python_missing_modules\.0$"], ["python_missing_modules.0"]),
    "socket_ifname_down": ("gb300", [r"^net\.interfaces\.lo\."], ["net.interfaces.lo.operstate"]),
    "socket_mtu_mismatch": ("mi355x", [r"^net\.interfaces\.lo\."], ["net.interfaces.lo.mtu"]),
    "socket_ifname_missing": ("gb300", [r"^net\.interfaces\.eth0\."], ["net.interfaces.eth0.mtu"]),
    "internode_port_exposed": ("gb300", [r"^net\.interfaces\.(lo|eth1)\."], ["net.interfaces.eth1.addresses.0"]),
    "ibgda_params_missing": ("gb300", [r"^kernel\.nvidia_params\."],
                             ["kernel.nvidia_params.EnableStreamMemOPs", "kernel.nvidia_params.RegistryDwords"]),
    "no_nvidia_peermem": ("gb300", [r"^kernel\.modules\.nvidia_peermem$"], ["kernel.modules.nvidia_peermem"]),
    "mori_rdma_provider_missing": ("mi355x", [r"^kernel\.modules\.mlx5_ib$"], ["kernel.modules.mlx5_ib"]),
    "no_uverbs": ("mi355x", [r"^devices_missing\.0$"], ["devices_missing.0"]),
    "fabric_port_blocked": ("cpu", [r"^blocked_tcp_ports\.0$"], ["blocked_tcp_ports.0"]),
    "slow_weights_disk": ("gb300", [r"^weights_read_bps$"], ["weights_read_bps"]),
}


def test_every_fault_has_an_expectation():
    assert set(P.list_faults()) == set(EXPECTED_CHANGES)


@pytest.mark.parametrize("fault", sorted(EXPECTED_CHANGES))
def test_fault_changes_exactly_what_it_should(fault):
    base, allowed, required = EXPECTED_CHANGES[fault]
    healthy = P.render_node_profile(base, "n1", 0)
    broken = P.render_node_profile(base, "n1", 0, [fault])
    changed = changed_paths(healthy, broken)
    assert broken["faults"] == [fault]
    for path in required:
        assert path in changed, path
    stray = [p for p in changed if not any(re.search(rx, p) for rx in allowed)]
    assert not stray, stray


def test_fault_values():
    prof = P.render_node_profile("gb300", "n1", 0, ["old_driver", "ib_port_down", "imex_down", "mixed_model"])
    assert prof["driver"] == {"version": "570.172.08", "cuda_version": "12.8", "loaded": True}
    assert prof["imex"]["version"] == "570.172"
    assert prof["rdma"]["devices"]["mlx5_1"]["ports"]["1"]["state"] == "PORT_DOWN"
    assert prof["rdma"]["devices"]["mlx5_0"]["ports"]["1"]["state"] == "PORT_ACTIVE"
    assert prof["imex"]["domain_state"] == "DOWN"
    assert [g["name"] for g in prof["gpus"]] == ["NVIDIA GB300"] * 3 + ["NVIDIA GB200"]
    assert prof["gpus"][3]["memory_total_mib"] == 189471 and prof["gpus"][3]["compute_cap"] == "10.0"
    mi = P.render_node_profile("mi355x", "n1", 0, ["missing_gpu", "rocm_old"])
    assert len(mi["gpus"]) == 7 and mi["rocm"]["version_file"] == "6.4.0-47"


def test_apply_faults_on_a_rendered_profile_re_expands():
    prof = P.render_node_profile("gb300", "n1", 0)
    out = P.apply_faults(prof, ["old_driver", "missing_gpu"])
    assert out["imex"]["version"] == "570.172" and len(out["gpus"]) == 3
    assert out["faults"] == ["old_driver", "missing_gpu"]
    assert prof["driver"]["version"] == "580.173.02" and len(prof["gpus"]) == 4  # input untouched
    assert P.apply_faults(prof, "driver_not_loaded")["driver"]["loaded"] is False
    with pytest.raises(ValueError, match="valid faults"):
        P.apply_faults(prof, ["bogus"])


def test_deep_merge_semantics():
    base = {"a": {"b": 1, "c": [1, 2]}, "d": 1}
    out = P.deep_merge(base, {"a": {"c": [3], "e": None}, "d": {"x": 1}})
    assert out == {"a": {"b": 1, "c": [3], "e": None}, "d": {"x": 1}}
    assert base == {"a": {"b": 1, "c": [1, 2]}, "d": 1}


def test_load_profile_validates(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"vendor": "intel", "accelerator": "x", "gpu_count": 1, "gpu": {}}))
    with pytest.raises(ValueError, match="vendor"):
        P.load_profile(str(bad))
    bad.write_text("[]")
    with pytest.raises(ValueError):
        P.load_profile(str(bad))
    assert P.load_profile(os.path.join(PROFILES, "gb300.json"))["accelerator"] == "gb300"


def test_cli_render_and_faults():
    out = subprocess.run([sys.executable, os.path.join(NODETOOLS, "profile.py"), "render", "mi355x", "m1", "1",
                          "ib_port_down"], capture_output=True, text=True, check=True).stdout
    prof = json.loads(out)
    assert prof["node"]["address"] == "127.0.0.22" and prof["faults"] == ["ib_port_down"]
    names = subprocess.run([sys.executable, os.path.join(NODETOOLS, "profile.py"), "faults"],
                           capture_output=True, text=True, check=True).stdout
    assert "rocm_old" in names and "imex_down" in names


# ------------------------------------------------------------------------------------------ sim-node-init

def _init(tmp_path, base, faults=(), extra_bin=()):
    root = tmp_path / "root"
    bindir = root / "usr" / "local" / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    for tool in os.listdir(os.path.join(NODETOOLS, "bin")):
        os.symlink(os.path.join(NODETOOLS, "bin", tool), str(bindir / tool))
    for name in extra_bin:
        (bindir / name).write_text("#!/bin/sh\necho not ours\n")
    prof = tmp_path / "profile.json"
    prof.write_text(json.dumps(P.render_node_profile(base, "node-a", 0, list(faults))))
    env = dict(os.environ, KIMI_SIM_ROOT=str(root), KIMI_SIM_PROFILE=str(prof))
    res = subprocess.run([sys.executable, os.path.join(NODETOOLS, "sim-node-init")], env=env,
                         capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    return root, str(bindir)


def test_init_nvidia_gb_writes_imex_config_and_keeps_vendor_tools(tmp_path):
    root, bindir = _init(tmp_path, "gb300")
    assert (root / "etc/nvidia-imex/nodes_config.cfg").read_text() == "127.0.0.11\n127.0.0.12\n"
    assert "nvidia.com/gpu" in (root / "var/run/cdi/nvidia.yaml").read_text()
    for tool in ("nvidia-smi", "nvidia-imex-ctl", "nvidia-ctk", "ibv_devinfo", "ibstat", "rdma"):
        assert shutil.which(tool, path=bindir), tool
    for tool in ("amd-smi", "rocm-smi", "rocminfo"):
        assert shutil.which(tool, path=bindir) is None, tool
    assert not (root / "opt/rocm").exists()
    summary = json.loads((root / "etc/kimi-sim/node-init.json").read_text())
    assert summary["node"]["name"] == "node-a" and "nvidia-smi" in summary["tools_present"]


def test_init_removes_missing_tool_from_path(tmp_path):
    _root, bindir = _init(tmp_path, "gb300", ["no_nvidia_smi"])
    assert shutil.which("nvidia-smi", path=bindir) is None
    assert shutil.which("nvidia-ctk", path=bindir)


def test_init_amd_writes_rocm_version_file_and_spares_foreign_files(tmp_path):
    root, bindir = _init(tmp_path, "mi355x", extra_bin=[])
    assert (root / "opt/rocm/.info/version").read_text() == "7.2.0-43\n"
    assert os.readlink(str(root / "opt/rocm")) == "rocm-7.2.0"
    assert shutil.which("nvidia-smi", path=bindir) is None and shutil.which("nvidia-imex-ctl", path=bindir) is None
    assert shutil.which("rocminfo", path=bindir)
    assert not (root / "etc/nvidia-imex").exists()


def test_init_does_not_touch_tools_that_are_not_ours(tmp_path):
    root = tmp_path / "root"
    bindir = root / "usr" / "local" / "bin"
    bindir.mkdir(parents=True)
    (bindir / "nvidia-smi").write_text("#!/bin/sh\necho real\n")
    prof = tmp_path / "p.json"
    prof.write_text(json.dumps(P.render_node_profile("mi355x", "m", 0)))
    env = dict(os.environ, KIMI_SIM_ROOT=str(root), KIMI_SIM_PROFILE=str(prof))
    subprocess.run([sys.executable, os.path.join(NODETOOLS, "sim-node-init")], env=env, check=True,
                   capture_output=True)
    assert (bindir / "nvidia-smi").read_text() == "#!/bin/sh\necho real\n"
    assert os.path.islink(str(bindir / "amd-smi"))  # linked because the node should have it


def test_init_rocm_old_switches_link(tmp_path):
    root, _b = _init(tmp_path, "mi355x", ["rocm_old"])
    assert (root / "opt/rocm/.info/version").read_text() == "6.4.0-47\n"


def test_init_fails_cleanly_without_profile(tmp_path):
    env = dict(os.environ, KIMI_SIM_ROOT=str(tmp_path), KIMI_SIM_PROFILE=str(tmp_path / "absent.json"))
    res = subprocess.run([sys.executable, os.path.join(NODETOOLS, "sim-node-init")], env=env,
                         capture_output=True, text=True, check=False)
    assert res.returncode == 1 and "cannot load profile" in res.stderr


def _rerun(tmp_path, root, base, faults):
    prof = tmp_path / "profile.json"
    prof.write_text(json.dumps(P.render_node_profile(base, "node-a", 0, list(faults))))
    env = dict(os.environ, KIMI_SIM_ROOT=str(root), KIMI_SIM_PROFILE=str(prof))
    subprocess.run([sys.executable, os.path.join(NODETOOLS, "sim-node-init")], env=env, check=True,
                   capture_output=True)


def test_init_hides_python_requests_and_puts_it_back(tmp_path):
    site = tmp_path / "root" / "usr" / "lib" / "python3" / "dist-packages"
    (site / "requests").mkdir(parents=True)
    (site / "requests" / "__init__.py").write_text("")
    (site / "urllib3").mkdir()
    root, _b = _init(tmp_path, "gb300", ["no_python_requests"])
    assert not (site / "requests").exists() and (site / "requests.kimi-sim-hidden" / "__init__.py").exists()
    assert (site / "urllib3").is_dir()                                    # only the listed package
    summary = json.loads((root / "etc/kimi-sim/node-init.json").read_text())
    assert summary["python_modules_hidden"] == ["/usr/lib/python3/dist-packages/requests"]
    _rerun(tmp_path, root, "gb300", ["no_python_requests"])               # idempotent
    assert (site / "requests.kimi-sim-hidden").is_dir() and not (site / "requests").exists()
    _rerun(tmp_path, root, "gb300", [])                                   # fault cleared
    assert (site / "requests" / "__init__.py").exists() and not (site / "requests.kimi-sim-hidden").exists()


@pytest.mark.parametrize("fault,expect", [
    ("socket_ifname_down", {"lo": (False, 65536)}),
    ("socket_mtu_mismatch", {"lo": (True, 1500)}),
    ("socket_ifname_missing", {"eth0": (True, 1500)}),
    ("internode_port_exposed", {"lo": (True, 65536), "eth1": (True, 1500)}),
])
def test_faked_ip_reports_the_fault_and_init_links_it_only_then(tmp_path, fault, expect):
    from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.probe import parsers as PP
    root, bindir = _init(tmp_path, "gb300", [fault])
    assert os.path.islink(os.path.join(bindir, "ip"))
    prof = tmp_path / "profile.json"
    env = dict(os.environ, KIMI_SIM_PROFILE=str(prof))
    out = subprocess.run([sys.executable, os.path.join(NODETOOLS, "bin", "ip"), "-j", "addr", "show"], env=env,
                         capture_output=True, text=True, check=True).stdout
    links = PP.parse_ip_addr_json(out)
    assert dict((k, (v["up"], v["mtu"])) for k, v in links.items()) == expect
    _rerun(tmp_path, root, "gb300", [])                                   # cleared: the real ip again
    assert not os.path.lexists(os.path.join(bindir, "ip"))


def test_faked_ip_without_net_runs_the_real_one(tmp_path):
    prof = tmp_path / "p.json"
    prof.write_text(json.dumps(P.render_node_profile("gb300", "n", 0)))
    env = dict(os.environ, KIMI_SIM_PROFILE=str(prof))
    res = subprocess.run([sys.executable, os.path.join(NODETOOLS, "bin", "ip"), "-j", "addr", "show"], env=env,
                         capture_output=True, text=True, check=False)
    if not any(os.path.exists(p) for p in ("/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip")):
        assert res.returncode == 127
    else:
        assert res.returncode == 0 and '"ifname":"lo"' in res.stdout.replace(" ", "")


def test_init_hides_a_missing_device_and_puts_it_back(tmp_path):
    dev = tmp_path / "root" / "dev" / "infiniband" / "uverbs0"
    dev.parent.mkdir(parents=True)
    dev.write_text("")
    root, _bindir = _init(tmp_path, "mi355x", ["no_uverbs"])
    assert not dev.exists() and not list(dev.parent.glob("uverbs*"))
    assert (root / "dev/.kimi-sim-hidden/dev__infiniband__uverbs0").exists()
    assert json.loads((root / "etc/kimi-sim/node-init.json").read_text())["devices_hidden"] == ["/dev/infiniband/uverbs0"]
    prof = tmp_path / "profile.json"  # the fault cleared: sim-node-init runs again in the same node
    prof.write_text(json.dumps(P.render_node_profile("mi355x", "node-a", 0, [])))
    env = dict(os.environ, KIMI_SIM_ROOT=str(root), KIMI_SIM_PROFILE=str(prof))
    subprocess.run([sys.executable, os.path.join(NODETOOLS, "sim-node-init")], env=env, check=True,
                   capture_output=True)
    assert dev.exists() and not (root / "dev/.kimi-sim-hidden/dev__infiniband__uverbs0").exists()
