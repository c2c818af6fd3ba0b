"""Parsers of node_probe against documented formats (gpu-node-probes.md) and the real shared captures."""
import json
import os

import pytest

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.probe import parsers as P
from tests.helpers.runner import REPO

FIXTURES = os.path.join(REPO, "tests", "unit", "fixtures", "probes")
SHARED = os.environ.get("KIMI_K3_SHARED_FIXTURES", os.path.join(os.path.dirname(REPO), "shared", "fixtures"))
REAL = os.path.join(SHARED, "nvidia-smi")


def fixture(node, name):
    with open(os.path.join(FIXTURES, node, name)) as f:
        return f.read()


def real(name):
    path = os.path.join(REAL, name)
    if not os.path.exists(path):
        pytest.skip("shared capture %s absent" % path)
    with open(path) as f:
        return f.read()


# ------------------------------------------------------------------ real captures (shared, read-only)

def test_real_gb300_xml():
    x = P.parse_nvidia_smi_xml(real("qx-gb300-580.173.02.xml"))
    assert x["driver_version"] == "580.173.02"
    assert x["cuda_version"] == "13.0"
    assert len(x["gpus"]) == 4 == x["attached_gpus"]
    assert [g["pci_bus_id"] for g in x["gpus"]] == ["00000008:06:00.0", "00000009:06:00.0", "00000018:06:00.0",
                                                    "00000019:06:00.0"]
    # fb total, not the bar1 (262144) or cc_protected (0) <total> rows
    assert all(g["memory_total_mib"] == 284208 for g in x["gpus"])
    assert all(g["pci_device_id"] == "0x31c2" for g in x["gpus"])
    assert all(g["name"] == "NVIDIA GB300" for g in x["gpus"])
    assert all(P.normalize_model(g["name"], g["memory_total_mib"], g["pci_device_id"]) == "gb300" for g in x["gpus"])
    fab = P.fabric_summary(x["gpus"])
    assert fab["state"] == "Completed" and fab["clique_id"] == "32766"
    assert fab["mnnvl"] is True, fab["reasons"]


def test_real_gb200_xml():
    x = P.parse_nvidia_smi_xml(real("qx-gb200-580.173.02.xml"))
    assert len(x["gpus"]) == 4
    assert {g["memory_total_mib"] for g in x["gpus"]} == {189471}
    assert {P.normalize_model(g["name"], g["memory_total_mib"], g["pci_device_id"]) for g in x["gpus"]} == {"gb200"}
    assert P.fabric_summary(x["gpus"])["clique_id"] == "2"
    # upstream scrubbed UUIDs: distinct per GPU, kept as strings
    assert len({g["uuid"] for g in x["gpus"]}) == 4


# ------------------------------------------------------------------ nvidia-smi formats

def test_own_gb300_xml_and_csv_agree():
    x = P.parse_nvidia_smi_xml(fixture("gb300-tray01", "nvidia-smi-q-x.xml"))
    rows = P.gpus_from_csv(fixture("gb300-tray01", "nvidia-smi-query.csv"))
    assert [r["pci_bus_id"] for r in rows] == [g["pci_bus_id"] for g in x["gpus"]]
    assert [r["compute_cap"] for r in rows] == ["10.3"] * 4
    assert [r["memory_used_mib"] for r in rows] == [0] * 4


def test_xml_garbage_and_empty():
    assert "error" in P.parse_nvidia_smi_xml("")
    assert "error" in P.parse_nvidia_smi_xml("NVIDIA-SMI has failed because it couldn't communicate")
    assert P.parse_nvidia_smi_xml("<nvidia_smi_log><driver_version>N/A</driver_version></nvidia_smi_log>")[
        "driver_version"] is None


def test_csv_with_header_units_and_na():
    text = ("index, name, uuid, driver_version, memory.total [MiB], memory.used [MiB], compute_cap, pci.bus_id\n"
            "0, NVIDIA GB10, GPU-bce5282f-d716-d136-5759-b7181a7a55df, 580.173.02, [N/A], 575 MiB, 12.1, "
            "0000000F:01:00.0\n\n")
    rows = P.gpus_from_csv(text)
    assert len(rows) == 1
    assert rows[0]["memory_total_mib"] is None          # [N/A] on unified memory
    assert rows[0]["memory_used_mib"] == 575             # unit suffix tolerated
    assert rows[0]["index"] == 0 and rows[0]["compute_cap"] == "12.1"


def test_csv_documented_b300_capture():
    text = "driver_version, name, compute_cap\n" + "610.57.04, NVIDIA B300 SXM6 AC, 10.3\n" * 7
    rows = P.parse_nvidia_smi_csv(text, ["driver_version", "name", "compute_cap"])
    assert len(rows) == 7
    assert P.normalize_model(rows[0]["name"], 275040) == "b300"


@pytest.mark.parametrize("line,version,open_mod", [
    ("NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.173.02  Release Build  (dvs-builder@U22-A24-5-4)"
     "  Tue Jun 23 08:34:19 UTC 2026", "580.173.02", True),
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023", "535.104.05", False),
    ("NVRM version: NVIDIA UNIX aarch64 Kernel Module  550.120  Fri Sep 13 11:01:10 UTC 2024", "550.120", False),
    ("", None, False),
])
def test_proc_driver_version(line, version, open_mod):
    assert P.parse_proc_driver_version(line + "\nGCC version:  gcc version 13.3.0 \n") == {
        "driver_version": version, "open_module": open_mod}


@pytest.mark.parametrize("rc,text,reason", [
    (9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
        "NVIDIA driver is installed and running.", "driver_not_loaded"),
    (18, "Failed to initialize NVML: Driver/library version mismatch", "driver_library_mismatch"),
    (6, "No devices were found", "no_devices"),
    (255, "Failed to initialize NVML: Unknown Error", "nvml_unknown_error"),
    (9, "", "driver_not_loaded"),
    (3, "weird", "nvidia_smi_failed_rc_3"),
])
def test_classify_failure(rc, text, reason):
    assert P.classify_nvidia_smi_failure(rc, text) == reason


def test_fabric_zero_uuid_is_not_mnnvl():
    x = P.parse_nvidia_smi_xml(fixture("b200-node01", "nvidia-smi-q-x.xml"))
    fab = P.fabric_summary(x["gpus"])
    assert fab["state"] == "Completed"
    assert fab["mnnvl"] is False
    assert any("ClusterUUID" in r for r in fab["reasons"])


def test_fabric_in_progress_and_disagreeing_gpus():
    x = P.parse_nvidia_smi_xml(fixture("gb300-fabric-inprogress", "nvidia-smi-q-x.xml"))
    fab = P.fabric_summary(x["gpus"])
    assert fab["mnnvl"] is False and fab["state"] == "In Progress" and fab["healthy"] is False
    gpus = P.parse_nvidia_smi_xml(fixture("gb300-tray01", "nvidia-smi-q-x.xml"))["gpus"]
    gpus[3]["fabric"]["clique_id"] = "1"
    fab = P.fabric_summary(gpus)
    assert fab["mnnvl"] is False and fab["clique_id"] is None
    assert any("CliqueId" in r for r in fab["reasons"])
    assert P.fabric_summary([])["mnnvl"] is False


# ------------------------------------------------------------------ models

@pytest.mark.parametrize("args,model", [
    (("NVIDIA GB300", 284208, "0x31c2"), "gb300"),
    (("NVIDIA GB300", 256703, None), "unknown"),          # DGX Station GB300, not an NVL72 tray
    (("NVIDIA GB200", 189471, "0x2941"), "gb200"),
    (("NVIDIA B300 SXM6 AC", 275040, None), "b300"),
    (("NVIDIA B200", 183359, None), "b200"),
    (("NVIDIA H200", 143771, None), "h200"),
    (("NVIDIA H100 80GB HBM3", 81559, None), "unknown"),
    (("AMD Instinct MI355X", 294896, "0x75a3"), "mi355x"),
    (("AMD Radeon Graphics", None, "0x75a3"), "mi355x"),   # amd-smi build that misnames MI355X
    (("AMD Instinct MI350X", None, "0x75a0"), "mi350x"),
    ((None, None, "31C210DE"), "gb300"),
    ((None, None, None), "unknown"),
])
def test_normalize_model(args, model):
    assert P.normalize_model(*args) == model


# ------------------------------------------------------------------ IMEX

def test_imex_up_and_down():
    up = P.parse_imex_ctl(fixture("gb300-tray01", "nvidia-imex-ctl-N.txt"))
    assert up["up"] is True and up["domain_state"] == "UP" and len(up["nodes"]) == 2
    assert up["nodes"][0] == {"index": 0, "address": "10.0.0.11", "state": "READY", "version": "580.173"}
    down = P.parse_imex_ctl(fixture("gb300-imex-down", "nvidia-imex-ctl-N.txt"))
    assert down["up"] is False and down["domain_state"] == "DOWN"
    assert down["all_ready"] is False and down["matrix_ok"] is False


def test_imex_old_format_without_version_and_empty():
    old = P.parse_imex_ctl("Nodes:\nNode #0   - 10.136.206.48   - READY\n\nDomain State: UP\n")
    assert old["up"] is True and old["nodes"][0]["version"] is None
    assert P.parse_imex_ctl("")["up"] is False


def test_imex_up_but_matrix_not_connected():
    text = fixture("gb300-tray01", "nvidia-imex-ctl-N.txt").replace("       1        C   C", "       1        C   N")
    assert P.parse_imex_ctl(text)["up"] is False


# ------------------------------------------------------------------ AMD

def test_amd_static_both_shapes():
    new = P.parse_amd_smi_static(fixture("mi355x-node01", "amd-smi-static.json"))
    old = P.parse_amd_smi_static(fixture("mi355x-rocm64", "amd-smi-static.json"))
    assert len(new) == len(old) == 8
    for g in new + old:
        assert g["memory_total_mib"] == 294896           # "MB" label means MiB
        assert g["gfx"] == "gfx950" and g["pci_device_id"] == "0x75a3"
        assert P.normalize_model(g["name"], g["memory_total_mib"], g["pci_device_id"], g["gfx"]) == "mi355x"
    assert new[0]["pci_bus_id"] == "0000:05:00.0"


def test_amd_static_documented_radeon_fragment_and_garbage():
    doc = {"gpu_data": [{"gpu": 0, "asic": {"market_name": "AMD Radeon RX 7800 XT", "device_id": "0x747e",
                                            "oam_id": "N/A", "target_graphics_version": "gfx1101"},
                         "bus": {"bdf": "0000:03:00.0", "max_pcie_width": 16}}]}
    g = P.parse_amd_smi_static(json.dumps(doc))[0]
    assert g["name"] == "AMD Radeon RX 7800 XT" and g["memory_total_mib"] is None
    assert P.normalize_model(g["name"], None, g["pci_device_id"], g["gfx"]) == "unknown"
    assert P.parse_amd_smi_static("") == [] and P.parse_amd_smi_static("WARNING: junk") == []


@pytest.mark.parametrize("text,rocm,amdgpu", [
    ("AMDSMI Tool: 24.7.1+8dc45db | AMDSMI Library version: 25.1.0.0 | ROCm version: 6.3.3", "6.3.3", None),
    ("AMDSMI Tool: 25.3.0+ede62f2 | AMDSMI Library version: 25.3.0 | ROCm version: 6.4.0 | amdgpu version: 6.12.12 "
     "| amd_hsmp version: N/A", "6.4.0", "6.12.12"),
    ("AMDSMI Tool: 26.2.1+fc0010cf6a | AMDSMI Library version: 26.2.1 | ROCm version: 7.2.0 | amdgpu version: 6.16.6 "
     "| hsmp version: N/A", "7.2.0", "6.16.6"),
    ("AMDSMI Tool: 25.3.0+ede62f2 | AMDSMI Library version: 25.3.0 | ROCm version: 6.4.0 | amdgpu version: "
     "Linuxversion6.8.0-79-generic(buildd@lcy02-amd64-049)#79-UbuntuSMP | amd_hsmp version: N/A", "6.4.0", None),
    ("AMD SMI Tool: 24.6.2+2b02a07 | AMD SMI Library version: 24.6.2.0 | ROCm version: 7.1.2", "7.1.2", None),
    ('[{"tool": "AMDSMI Tool", "version": "26.0.2", "amdsmi_library_version": "26.0.2", "rocm_version": "7.0.2", '
     '"amdgpu_version": "6.14.14"}]', "7.0.2", "6.14.14"),
    ('{"tool": "AMDSMI Tool", "rocm_version": "7.14.0", "driver_version": "6.19.16"}', "7.14.0", "6.19.16"),
])
def test_amd_smi_version_wordings(text, rocm, amdgpu):
    v = P.parse_amd_smi_version(text)
    assert (v["rocm_version"], v["amdgpu_version"]) == (rocm, amdgpu)


def test_amd_list_and_metric():
    lst = P.parse_amd_smi_list(fixture("mi355x-node01", "amd-smi-list.json"))
    assert len(lst) == 8 and lst[0]["uuid"].startswith("00ff75a3") and lst[0]["partition_id"] == 0
    wrapped = P.parse_amd_smi_list(json.dumps({"gpu_data": [{"gpu": 0, "bdf": "0000:05:00.0"}]}))
    assert wrapped[0]["pci_bus_id"] == "0000:05:00.0"
    mem = P.parse_amd_smi_metric_mem(json.dumps(
        [{"gpu": 0, "mem_usage": {"total_vram": {"value": 294896, "unit": "MB"}}}]))
    assert mem == {0: {"total_mib": 294896, "used_mib": None}}


def test_rocm_smi_key_case_and_failures():
    new = ('{"card0": {"Device Name": "AMD Instinct MI300A", "Device ID": "0x74a0", "Card Series": "AMD Instinct '
           'MI300A", "GFX Version": "gfx942"}, "system": {"Driver version": "6.16.13"}}')
    old = '{"card0": {"Card series": "AMD Instinct MI355X", "Device ID": "0x75A3"}}'
    r = P.parse_rocm_smi_productname(new)
    assert r["gpus"][0]["name"] == "AMD Instinct MI300A" and r["driver_version"] == "6.16.13"
    assert r["gpus"][0]["gfx"] == "gfx942"
    r = P.parse_rocm_smi_productname(old)
    assert r["gpus"][0]["name"] == "AMD Instinct MI355X" and r["gpus"][0]["pci_device_id"] == "0x75a3"
    for bad in ("", "{}", "WARNING: No JSON data to report"):
        assert "error" in P.parse_rocm_smi_productname(bad)


@pytest.mark.parametrize("text,version", [
    ("6.4.0-47\n", "6.4.0"), ("7.0.2-56", "7.0.2"), ("7.13.0-123-gfx942;gfx950", "7.13.0"), ("", None),
    (None, None),
])
def test_rocm_version_file(text, version):
    assert P.parse_rocm_version_file(text) == version


# ------------------------------------------------------------------ RDMA, engine, host

def test_ibv_devinfo_roce_and_ib():
    ports = P.parse_ibv_devinfo(fixture("b200-ib-port-down", "ibv_devinfo.txt"))
    assert len(ports) == 8
    assert [p["state"] for p in ports].count("DOWN") == 1
    assert ports[3] == {"device": "mlx5_3", "port": 1, "state": "DOWN", "link_layer": "InfiniBand",
                        "active_mtu": 4096}
    roce = P.parse_ibv_devinfo(fixture("gb300-tray01", "ibv_devinfo.txt"))
    assert {p["link_layer"] for p in roce} == {"Ethernet"}
    assert P.parse_ibv_devinfo("") == []


@pytest.mark.parametrize("text,state", [("4: ACTIVE\n", "ACTIVE"), ("1: DOWN", "DOWN"), ("2: INIT", "INIT"),
                                        ("", None)])
def test_ib_sysfs_state(text, state):
    assert P.parse_ib_sysfs_state(text) == state


def test_docker_api_and_cli_shapes():
    v = P.parse_docker_version(fixture("gb300-tray01", "docker_version.json"))
    assert v == {"version": "29.7.2", "api_version": "1.54"}
    cli = P.parse_docker_version('{"Client": {"Version": "29.7.2"}, "Server": {"Version": "29.4.0", '
                                 '"ApiVersion": "1.54"}}')
    assert cli["version"] == "29.4.0"
    info = P.parse_docker_info(fixture("gb300-tray01", "docker_info.json"))
    assert info["nvidia_runtime"] is True and "io.containerd.runc.v2" in info["runtimes"]
    cdi = P.parse_docker_info(fixture("b200-node01", "docker_info.json"))
    assert cdi["nvidia_runtime"] is False and cdi["cdi_devices"] == ["nvidia.com/gpu=all"]
    assert P.parse_docker_info("not json")["runtimes"] == []


def test_time_sync_parsers():
    assert P.parse_timedatectl("yes\n") is True
    assert P.parse_timedatectl("no") is False
    assert P.parse_timedatectl("NTPSynchronized=yes") is True
    assert P.parse_timedatectl("") is None
    assert P.parse_chronyc_tracking("Leap status     : Normal\n") is True
    assert P.parse_chronyc_tracking("Leap status     : Not synchronised\n") is False
    assert P.parse_chronyc_tracking("") is None


@pytest.mark.parametrize("value,expected", [
    ("64g", 64 * 1024 ** 3), ("1g", 1024 ** 3), ("8m", 8 * 1024 ** 2), ("8 MiB", 8 * 1024 ** 2),
    ("64GiB", 64 * 1024 ** 3), (8388608, 8388608), ("-1", -1), (-1, -1), ("unlimited", -1), ("lots", None),
    (None, None),
])
def test_parse_size(value, expected):
    assert P.parse_size(value) == expected


@pytest.mark.parametrize("value,mib", [
    ("284208 MiB", 284208), ({"value": 294896, "unit": "MB"}, 294896), ("[N/A]", None), ("N/A", None),
    ("1 GiB", 1024), (512, 512), (None, None),
])
def test_to_mib(value, mib):
    assert P.to_mib(value) == mib


@pytest.mark.parametrize("version,floor,ok", [
    ("580.173.02", "580", True), ("570.172.08", "580", False), ("610.57.04", "580", True), ("550.120", "580", False),
    ("13.0", "13.0", True), ("12.8", "13.0", False), ("13.3", "13.0", True), ("7.0.2", "7.0", True),
    ("6.4.0", "7.0", False), (None, "580", None), ("Not Found", "13.0", None),
])
def test_version_ge(version, floor, ok):
    assert P.version_ge(version, floor) is ok


def test_na_spellings():
    for v in ("[N/A]", "N/A", "Not Found", "[Not Supported]", "[Insufficient Permissions]", "  "):
        assert P.na(v) is None
    assert P.na("13.3 [Deprecated; will be removed in CUDA 14.0. Use CUDA UMD Version instead]") == "13.3"


IP_J = ('[{"ifindex":1,"ifname":"lo","flags":["LOOPBACK","UP","LOWER_UP"],"mtu":65536,"operstate":"UNKNOWN",'
        '"addr_info":[{"family":"inet","local":"127.0.0.1","prefixlen":8},{"family":"inet6","local":"::1",'
        '"prefixlen":128}]},{"ifindex":2,"ifname":"bond0","flags":["BROADCAST","MULTICAST","UP","LOWER_UP"],'
        '"mtu":9000,"operstate":"UP","addr_info":[{"family":"inet","local":"10.0.0.11","prefixlen":24}]},'
        '{"ifindex":3,"ifname":"eth1","flags":["BROADCAST","MULTICAST","UP"],"mtu":1500,"operstate":"DOWN",'
        '"addr_info":[]}]')


def test_ip_addr_json():
    links = P.parse_ip_addr_json(IP_J)
    assert links["lo"] == {"up": True, "loopback": True, "mtu": 65536, "operstate": "UNKNOWN",
                           "addresses": ["127.0.0.1/8", "::1/128"]}
    assert links["bond0"]["up"] is True and links["bond0"]["addresses"] == ["10.0.0.11/24"]
    assert links["eth1"]["up"] is False                       # admin up, no carrier
    for bad in ("", "not json", "{}", '[{"flags": []}]', "[1, null]"):
        assert P.parse_ip_addr_json(bad) == {}
