"""Faked AMD tools (amd-smi, rocm-smi, rocminfo) and RDMA tools (ibv_devinfo, ibstat, rdma) vs the reference."""
import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
NODETOOLS = os.path.join(REPO, "sim", "nodetools")
SHARED = os.environ.get("KIMI_K3_SHARED_FIXTURES", os.path.join(os.path.dirname(REPO), "shared", "fixtures"))
REFERENCE = os.path.join(os.path.dirname(SHARED), "reference", "gpu-node-probes.md")

_spec = importlib.util.spec_from_file_location("kimi_sim_profile_t3", os.path.join(NODETOOLS, "profile.py"))
P = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(P)


def render(base="mi355x", faults=(), patch=None, node="mi355x-node01", index=0):
    prof = P.render_node_profile(base, node, index, list(faults))
    if patch:
        prof = P.expand(P.deep_merge(prof, patch))
    return prof


def run(tool, args, prof, tmp_path):
    path = tmp_path / ("profile-%d.json" % len(list(tmp_path.iterdir())))
    path.write_text(json.dumps(prof))
    env = dict(os.environ, KIMI_SIM_PROFILE=str(path), KIMI_SIM_DOCKER_SOCK=str(tmp_path / "none.sock"))
    return subprocess.run([sys.executable, os.path.join(NODETOOLS, "bin", tool)] + list(args), env=env,
                          capture_output=True, text=True, timeout=30, check=False)


def ref_block(marker):
    if not os.path.exists(REFERENCE):
        pytest.skip("reference %s absent" % REFERENCE)
    text = open(REFERENCE, encoding="utf-8").read()
    for m in re.finditer(r"```[a-z]*\n(.*?)```", text, re.S):
        if marker in m.group(1):
            return m.group(1)
    pytest.fail("no reference block containing %r" % marker)


# ------------------------------------------------------------------------------------------ amd-smi version

def test_amd_smi_version_26_is_the_real_mi355x_line(tmp_path):
    lines = ref_block("AMDSMI Tool: 26.2.1+fc0010cf6a").splitlines()
    assert run("amd-smi", ["version"], render(), tmp_path).stdout == lines[2] + "\n"


def test_amd_smi_version_rocm_old_uses_25x_wording(tmp_path):
    lines = ref_block("AMDSMI Tool: 26.2.1+fc0010cf6a").splitlines()
    assert run("amd-smi", ["version"], render(faults=["rocm_old"]), tmp_path).stdout == lines[1] + "\n"


def test_amd_smi_version_24x_has_no_amdgpu_field(tmp_path):
    lines = ref_block("AMDSMI Tool: 26.2.1+fc0010cf6a").splitlines()
    prof = render(patch={"rocm": {"amd_smi_tool": "24.7.1+8dc45db", "amd_smi_library": "25.1.0.0",
                                  "version": "6.3.3"}})
    assert run("amd-smi", ["version"], prof, tmp_path).stdout == lines[0] + "\n"


def test_amd_smi_version_inbox_driver_prints_kernel_banner(tmp_path):
    line = ref_block("amdgpu version: Linuxversion6.8.0-79-generic").strip()
    prof = render(faults=["rocm_old"], patch={"rocm": {"amdgpu_dkms": False}})
    assert run("amd-smi", ["version"], prof, tmp_path).stdout == line + "\n"


def test_amd_smi_version_json(tmp_path):
    data = json.loads(run("amd-smi", ["version", "--json"], render(), tmp_path).stdout)
    assert data["tool"] == "AMDSMI Tool" and data["version"] == "26.2.1+fc0010cf6a"
    assert data["rocm_version"] == "7.2.0" and data["amdsmi_library_version"] == "26.2.1"
    assert data["amdgpu_version"] == "6.16.6"


# ------------------------------------------------------------------------------------------ amd-smi static/list

def test_amd_smi_static_asic_json_equals_assembled_sample(tmp_path):
    block = ref_block('"market_name": "AMD Instinct MI355X"')
    prof = render(patch={"gpu_overrides": {"0": {"asic_serial": "0x0000000000000000"}}})
    out = run("amd-smi", ["static", "--asic", "--json", "-g", "0"], prof, tmp_path).stdout
    assert out == block


def test_amd_smi_static_json_shape_by_generation(tmp_path):
    new = json.loads(run("amd-smi", ["static", "--json"], render(), tmp_path).stdout)
    assert list(new) == ["gpu_data"] and len(new["gpu_data"]) == 8
    g0 = new["gpu_data"][0]
    assert list(g0) == ["gpu", "asic", "bus", "ifwi", "driver", "board", "vram"]
    assert g0["bus"]["max_pcie_speed"] == {"value": 32, "unit": "GT/s"}
    assert g0["vram"]["size"] == {"value": 294896, "unit": "MB"}
    assert g0["driver"] == {"name": "amdgpu", "version": "6.16.6"}
    old = json.loads(run("amd-smi", ["static", "--asic", "--json"], render(faults=["rocm_old"]), tmp_path).stdout)
    assert isinstance(old, list) and len(old) == 8 and list(old[0]) == ["gpu", "asic"]


def test_amd_smi_static_text_keys_follow_real_mi350x_capture(tmp_path):
    ref = ref_block("MARKET_NAME: AMD Instinct MI350X")

    def sections(text):
        out, cur = {}, None
        for line in text.split("\nGPU: 1\n")[0].splitlines():  # first GPU only
            m = re.match(r"^    ([A-Z]+):$", line)
            if m:
                cur = out.setdefault(m.group(1), [])
            elif re.match(r"^        [A-Z_]+: ", line) and cur is not None:
                cur.append(line.split(":")[0].strip())
        return out

    want = sections(ref)
    text = run("amd-smi", ["static", "--bus", "--ifwi", "--asic", "--board", "--driver", "-g", "0", "1"],
               render(), tmp_path).stdout
    assert re.findall(r"^GPU: (\d+)$", text, re.M) == ["0", "1"]
    got = sections(text)
    assert list(got) == ["ASIC", "BUS", "IFWI", "DRIVER", "BOARD"]
    for name, keys in got.items():
        assert set(keys) <= set(want[name]), name
        assert keys == [k for k in want[name] if k in keys], name  # same order


def test_amd_smi_list_json(tmp_path):
    block = ref_block('"partition_id": 0}]')
    sample_keys = list(json.loads(block.strip())[0])
    rows = json.loads(run("amd-smi", ["list", "--json"], render(), tmp_path).stdout)
    assert isinstance(rows, list) and len(rows) == 8
    assert all(list(r) == sample_keys for r in rows)
    assert [r["bdf"] for r in rows][:2] == ["0000:0a:00.0", "0000:23:00.0"]
    assert all(re.match(r"^[0-9a-f]{2}ff75a3-0000-1000-80[0-9a-f]{2}-[0-9a-f]{12}$", r["uuid"]) for r in rows)
    assert len(json.loads(run("amd-smi", ["list", "--json"], render(faults=["missing_gpu"]), tmp_path).stdout)) == 7


def test_amd_smi_list_text(tmp_path):
    out = run("amd-smi", ["list"], render(), tmp_path).stdout
    assert re.findall(r"^GPU: (\d+)\n    BDF: (\S+)\n    UUID: (\S+)$", out, re.M)[0][:2] == ("0", "0000:0a:00.0")


def test_amd_smi_metric_mem_usage(tmp_path):
    data = json.loads(run("amd-smi", ["metric", "--mem-usage", "--json"], render(faults=["gpu_busy"]),
                          tmp_path).stdout)
    mem = data["gpu_data"][0]["mem_usage"]
    assert mem["total_vram"] == {"value": 294896, "unit": "MB"}
    assert mem["used_vram"] == {"value": 265406, "unit": "MB"}


def test_amd_smi_mixed_model(tmp_path):
    data = json.loads(run("amd-smi", ["static", "--asic", "--json"], render(faults=["mixed_model"]),
                          tmp_path).stdout)["gpu_data"]
    assert [d["asic"]["device_id"] for d in data] == ["0x75a3"] * 7 + ["0x74a1"]
    assert data[7]["asic"]["target_graphics_version"] == "gfx942"


def test_amd_smi_bad_arguments(tmp_path):
    assert run("amd-smi", ["static", "--bogus"], render(), tmp_path).returncode == 2
    assert run("amd-smi", ["static", "-g", "12"], render(), tmp_path).returncode == 2
    assert run("amd-smi", ["version"], render("gb300", node="g"), tmp_path).returncode == 127


# ------------------------------------------------------------------------------------------ rocm-smi

def test_rocm_smi_concise_table_is_byte_identical_to_real_capture(tmp_path):
    block = ref_block("======= Concise Info =======")
    rows = [l.split() for l in block.splitlines() if re.match(r"^\d\s", l)]
    over = {}
    for r in rows:
        # Device Node DID, GUID Temp Power Mem, Compute, ID SCLK MCLK Fan Perf PwrCap VRAM% GPU%
        over[r[0]] = {"temperature_c": float(r[4][:-2]), "power_w": float(r[5][:-1]),
                      "sclk_mhz": int(r[9][:-3]), "mclk_mhz": int(r[10][:-3]), "gpu_util_pct": int(r[15][:-1]),
                      "memory_used_mib": int(294896 * int(r[14][:-1]) / 100)}
    prof = render(patch={"gpu_overrides": over})
    out = run("rocm-smi", [], prof, tmp_path).stdout
    assert out == block


def test_rocm_smi_productname_json_keys_match_real_capture(tmp_path):
    sample = json.loads(ref_block('"Card Series": "AMD Instinct MI300A"').strip())
    data = json.loads(run("rocm-smi", ["--showproductname", "--showdriverversion", "--json"], render(),
                          tmp_path).stdout)
    assert list(data["card0"]) == list(sample["card0"])
    assert data["card0"]["Card Series"] == "AMD Instinct MI355X" and data["card0"]["GFX Version"] == "gfx950"
    assert data["system"] == {"Driver version": "6.16.6"}
    assert [k for k in data if k.startswith("card")] == ["card%d" % i for i in range(8)]


def test_rocm_smi_productname_csv(tmp_path):
    import csv
    rows = list(csv.reader(run("rocm-smi", ["--showproductname", "--csv"], render(), tmp_path).stdout.splitlines()))
    assert rows[0][0] == "device" and "Card Series" in rows[0]
    assert len(rows) == 9 and rows[1][0] == "card0"
    assert rows[1][rows[0].index("Card Vendor")] == "Advanced Micro Devices, Inc. [AMD/ATI]"


def test_rocm_smi_json_without_data(tmp_path):
    res = run("rocm-smi", ["--json"], render(), tmp_path)
    assert res.returncode == 0 and res.stdout.strip() == "WARNING: No JSON data to report"


# ------------------------------------------------------------------------------------------ rocminfo

def test_rocminfo_agents(tmp_path):
    out = run("rocminfo", [], render(), tmp_path).stdout
    assert out.splitlines()[0] == "ROCk module version 6.16.6 is loaded"
    agents = re.split(r"^\*{7}\nAgent \d+\n\*{7}$", out, flags=re.M)[1:]
    gpu = [a for a in agents if re.search(r"^  Device Type:\s+GPU$", a, re.M)]
    assert len(agents) == 10 and len(gpu) == 8
    assert all(re.search(r"^  Name:\s+gfx950$", a, re.M) for a in gpu)
    assert all(re.search(r"^  Marketing Name:\s+AMD Instinct MI355X$", a, re.M) for a in gpu)
    assert "amdgcn-amd-amdhsa--gfx950:sramecc+:xnack-" in out
    assert re.search(r"^  Chip ID:\s+30115\(0x75a3\)$", out, re.M)
    assert re.search(r"^  Compute Unit:\s+256$", out, re.M)


def test_rocminfo_columns_match_real_capture(tmp_path):
    ref = ref_block("Marketing Name:          AMD Instinct MI250X/MI250").splitlines()
    ref_agent = ref[ref.index("Agent 16") + 2:]
    out = run("rocminfo", [], render(), tmp_path).stdout.splitlines()
    start = out.index("  Name:                    gfx950")
    ours = out[start:start + 40]
    keys_ours = [l.split(":")[0] for l in ours]
    for line in ref_agent:
        key = line.split(":")[0]
        assert key in keys_ours, key
        mine = ours[keys_ours.index(key)]
        value_col = len(line) - len(line.split(":", 1)[1].lstrip())
        assert mine[:value_col] == line[:value_col], (mine, line)
    assert ref[1:4] == out[1:4] and re.match(r"^Runtime Version:\s{9}\d", out[4])


def test_rocminfo_mixed_model_and_old_rocm(tmp_path):
    out = run("rocminfo", [], render(faults=["mixed_model", "rocm_old"]), tmp_path).stdout
    assert len(re.findall(r"^  Name:\s+gfx950$", out, re.M)) == 7
    assert len(re.findall(r"^  Name:\s+gfx942$", out, re.M)) == 1
    assert out.startswith("ROCk module version 6.12.12 is loaded\n")


# ------------------------------------------------------------------------------------------ ibv_devinfo

CX6 = {"ca_type": "MT4123", "vendor_part_id": 4123, "fw_ver": "20.41.1000", "hw_ver": "0x0",
       "board_id": "MT_0000000222", "node_guid": "a088:c203:0096:05fc", "netdev": None,
       "ports": {"1": {"state": "PORT_ACTIVE", "physical_state": "LinkUp", "rate": 200, "link_layer": "InfiniBand",
                       "max_mtu": "4096 (5)", "active_mtu": "4096 (5)", "lid": 35, "sm_lid": 35}}}


def test_ibv_devinfo_ib_is_byte_identical_to_real_capture(tmp_path):
    block = ref_block("[tvj@bernie ~]$ ibv_devinfo")
    prof = render("gb300", node="g", patch={"rdma": {"devices": None}})
    prof = P.expand(P.deep_merge(prof, {"rdma": {"devices": {"mlx5_0": CX6}}}))
    out = run("ibv_devinfo", [], prof, tmp_path).stdout
    assert out == "\n".join(block.splitlines()[1:]) + "\n\n"


def test_ibv_devinfo_roce_is_byte_identical_to_real_capture(tmp_path):
    block = ref_block("hca_id:\trocep1s0f0")
    base = {"ca_type": "MT4129", "vendor_part_id": 4129, "fw_ver": "28.45.4028", "hw_ver": "0x0",
            "board_id": "NVD0000000087", "sys_image_guid": "4821:0b03:0096:04cb", "netdev": None}
    port = {"physical_state": "LinkUp", "link_layer": "Ethernet", "max_mtu": "4096 (5)"}
    devs = {"rocep1s0f0": dict(base, node_guid="4821:0b03:0096:04cb",
                               ports={"1": dict(port, state="PORT_ACTIVE", active_mtu="4096 (5)")}),
            "rocep1s0f1": dict(base, node_guid="4821:0b03:0096:04cc",
                               ports={"1": dict(port, state="PORT_DOWN", active_mtu="1024 (3)")})}
    prof = render(patch={"rdma": {"devices": None}})
    prof = P.expand(P.deep_merge(prof, {"rdma": {"devices": devs}}))
    out = run("ibv_devinfo", [], prof, tmp_path).stdout
    assert out.rstrip("\n") == block.rstrip("\n")


def test_ibv_devinfo_states_and_faults(tmp_path):
    out = run("ibv_devinfo", [], render("gb300", ["ib_port_down"], node="g"), tmp_path).stdout
    hcas = re.findall(r"^hca_id:\t(\S+)$", out, re.M)
    states = re.findall(r"^\t\t\tstate:\t+(\S+) \((\d)\)$", out, re.M)
    assert hcas == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    assert states == [("PORT_ACTIVE", "4"), ("PORT_DOWN", "1"), ("PORT_ACTIVE", "4"), ("PORT_ACTIVE", "4")]
    assert set(re.findall(r"^\t\t\tlink_layer:\t+(\S+)$", out, re.M)) == {"InfiniBand"}
    one = run("ibv_devinfo", ["-d", "mlx5_2"], render("gb300", node="g"), tmp_path).stdout
    assert re.findall(r"^hca_id:\t(\S+)$", one, re.M) == ["mlx5_2"]
    assert run("ibv_devinfo", ["-d", "mlx5_9"], render("gb300", node="g"), tmp_path).returncode != 0
    lst = run("ibv_devinfo", ["-l"], render(), tmp_path).stdout
    assert lst.splitlines()[0] == "8 HCAs found:" and lst.splitlines()[1] == "\tmlx5_0"


def test_ibv_devinfo_verbose_roce_gids(tmp_path):
    out = run("ibv_devinfo", ["-v", "-d", "mlx5_0"], render(), tmp_path).stdout
    gids = re.findall(r"^\t\t\tGID\[\s*(\d+)\]:\t\t(\S+), (RoCE v[12])$", out, re.M)
    assert len(gids) == 4 and gids[3][0] == "3" and gids[3][2] == "RoCE v2" and gids[3][1].startswith("::ffff:")


# ------------------------------------------------------------------------------------------ ibstat

def test_ibstat_matches_real_capture(tmp_path):
    block = ref_block("dell@dell:~$ ibstat").splitlines()[1:]
    devs = {
        "mlx5_0": {"ca_type": "MT4131", "vendor_part_id": 4131, "fw_ver": "40.46.5500", "hw_ver": "0x0",
                   "node_guid": "7425:5403:0035:3ded", "netdev": None,
                   "ports": {"1": {"state": "PORT_DOWN", "physical_state": "Disabled", "rate": 10,
                                   "link_layer": "InfiniBand", "capability_mask": "0xa750e848"}}},
        "mlx5_2": {"ca_type": "MT4129", "vendor_part_id": 4129, "fw_ver": "28.47.2526", "hw_ver": "0x0",
                   "node_guid": "7425:5403:0035:3de9", "netdev": None,
                   "ports": {"1": {"state": "PORT_ACTIVE", "physical_state": "LinkUp", "rate": 100, "lid": 1,
                                   "sm_lid": 1, "link_layer": "InfiniBand", "capability_mask": "0xa750e84a"}}},
    }
    prof = render("gb300", node="g", patch={"rdma": {"devices": None}})
    prof = P.expand(P.deep_merge(prof, {"rdma": {"devices": devs}}))
    out = run("ibstat", [], prof, tmp_path).stdout
    assert "\t" in out  # the real tool uses tabs
    assert out.expandtabs(8).splitlines() == [l for l in block if l != "..."]


def test_ibstat_text_order_and_faults(tmp_path):
    devs = {"mlx5_%d" % i: dict(CX6, node_guid=None) for i in range(11)}
    for d in devs.values():
        d.pop("node_guid")
    prof = render("gb300", node="g", patch={"rdma": {"devices": None}})
    prof = P.expand(P.deep_merge(prof, {"rdma": {"devices": devs}}))
    names = re.findall(r"^CA '(\S+)'$", run("ibstat", [], prof, tmp_path).stdout, re.M)
    assert names[:4] == ["mlx5_0", "mlx5_1", "mlx5_10", "mlx5_2"]
    out = run("ibstat", [], render("gb300", ["ib_port_down"], node="g"), tmp_path).stdout
    assert re.findall(r"^\t\tState: (\S+)$", out, re.M) == ["Active", "Down", "Active", "Active"]
    assert re.findall(r"^\t\tRate: (\d+)$", out, re.M) == ["800", "10", "800", "800"]
    assert set(re.findall(r"^\t\tLink layer: (\S+)$", run("ibstat", [], render(), tmp_path).stdout, re.M)) == {
        "Ethernet"}
    assert run("ibstat", ["-l"], render(), tmp_path).stdout.splitlines()[0] == "mlx5_0"


# ------------------------------------------------------------------------------------------ rdma link

def test_rdma_link_matches_real_gb300_capture(tmp_path):
    block = ref_block("ubuntu@GPU-6773:~$ rdma link").splitlines()[1:]
    devs = {}
    for line in block:
        m = re.match(r"^link (\S+)/(\d+) state (\S+) physical_state (\S+)(?: netdev (\S+))?", line)
        name, _port, state, phys, netdev = m.groups()
        devs[name] = dict(CX6, netdev=netdev, ports={"1": dict(CX6["ports"]["1"],
                          state="PORT_" + state, physical_state={"LINK_UP": "LinkUp", "DISABLED": "Disabled"}[phys])})
        devs[name].pop("node_guid")
    prof = render("gb300", node="g", patch={"rdma": {"devices": None}})
    prof = P.expand(P.deep_merge(prof, {"rdma": {"devices": devs}}))
    assert run("rdma", ["link"], prof, tmp_path).stdout.splitlines() == block
    assert run("rdma", ["link", "show"], prof, tmp_path).stdout.splitlines() == block


def test_rdma_link_profiles_and_faults(tmp_path):
    rx = re.compile(r"^link (\S+)/(\d+) state (\S+) physical_state (\S+)(?: netdev (\S+))?$")
    gb = [rx.match(l).groups() for l in run("rdma", ["link"], render("gb300", ["ib_port_down"], node="g"),
                                            tmp_path).stdout.splitlines()]
    assert [(g[0], g[2], g[3], g[4]) for g in gb] == [("mlx5_0", "ACTIVE", "LINK_UP", None),
                                                      ("mlx5_1", "DOWN", "DISABLED", None),
                                                      ("mlx5_2", "ACTIVE", "LINK_UP", None),
                                                      ("mlx5_3", "ACTIVE", "LINK_UP", None)]
    mi = [rx.match(l).groups() for l in run("rdma", ["link", "show"], render(), tmp_path).stdout.splitlines()]
    assert len(mi) == 8 and all(m[2] == "ACTIVE" and m[4] == "rdma%s" % m[0][5:] for m in mi)
    js = json.loads(run("rdma", ["-j", "link", "show", "mlx5_3/1"], render(), tmp_path).stdout)
    assert js == [{"ifindex": 3, "ifname": "mlx5_3", "port": 1, "state": "ACTIVE", "physical_state": "LINK_UP",
                   "netdev": "rdma3", "netdev_index": 13}]
    assert run("rdma", ["dev"], render(), tmp_path).returncode != 0


def test_rocm_version_file_matches_amd_pattern():
    rx = re.compile(r"^(\d+(?:\.\d+){0,3})(?:-(\d+)(?:-gfx\w+(?:;gfx\w+)*)?)?$")
    for faults in ([], ["rocm_old"]):
        prof = render(faults=faults)
        m = rx.match(prof["rocm"]["version_file"])
        assert m and m.group(1) == prof["rocm"]["version"]
