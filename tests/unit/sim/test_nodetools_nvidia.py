"""Faked NVIDIA tools (nvidia-smi, nvidia-imex-ctl, nvidia-ctk) against the documented formats.

Byte-level comparisons use the verbatim samples of shared/reference/gpu-node-probes.md and the real GB300
`nvidia-smi -q -x` capture in shared/fixtures/nvidia-smi/; each such test skips when the file is absent.
"""
import http.server
import importlib.util
import json
import os
import re
import socketserver
import subprocess
import sys
import threading
import xml.etree.ElementTree as ET

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
NODETOOLS = os.path.join(REPO, "sim", "nodetools")
SHARED = os.environ.get("KIMI_K3_SHARED_FIXTURES", os.path.join(os.path.dirname(REPO), "shared", "fixtures"))
REFERENCE = os.path.join(os.path.dirname(SHARED), "reference", "gpu-node-probes.md")
GB300_XML = os.path.join(SHARED, "nvidia-smi", "qx-gb300-580.173.02.xml")

_spec = importlib.util.spec_from_file_location("kimi_sim_profile_t2", os.path.join(NODETOOLS, "profile.py"))
P = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(P)

DRIVER_MSG = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
              "latest NVIDIA driver is installed and running.")


def render(base="gb300", faults=(), patch=None, node="gb300-tray01", index=0, **kw):
    prof = P.render_node_profile(base, node, index, list(faults), **kw)
    if patch:
        prof = P.expand(P.deep_merge(prof, patch))
    return prof


def run(tool, args, prof, tmp_path, env=None):
    path = tmp_path / ("profile-%d.json" % len(list(tmp_path.iterdir())))
    path.write_text(json.dumps(prof))
    e = dict(os.environ, KIMI_SIM_PROFILE=str(path), KIMI_SIM_DOCKER_SOCK=str(tmp_path / "no-docker.sock"))
    e.update(env or {})
    return subprocess.run([sys.executable, os.path.join(NODETOOLS, "bin", tool)] + list(args), env=e,
                          capture_output=True, text=True, timeout=30, check=False)


def ref_blocks():
    if not os.path.exists(REFERENCE):
        pytest.skip("reference %s absent" % REFERENCE)
    text = open(REFERENCE, encoding="utf-8").read()
    return [m.group(1) for m in re.finditer(r"```[a-z]*\n(.*?)```", text, re.S)]


def ref_block(marker):
    for block in ref_blocks():
        if marker in block:
            return block
    pytest.fail("no reference block containing %r" % marker)


# ------------------------------------------------------------------------------------------ --query-gpu

PREFLIGHT_QUERY = "index,name,uuid,driver_version,memory.total,memory.used,compute_cap,pci.bus_id"


def test_query_gpu_noheader_nounits_matches_documented_shape(tmp_path):
    prof = render()
    res = run("nvidia-smi", ["--query-gpu=" + PREFLIGHT_QUERY, "--format=csv,noheader,nounits"], prof, tmp_path)
    assert res.returncode == 0
    lines = res.stdout.splitlines()
    assert len(lines) == 4
    rx = re.compile(r"^(\d), NVIDIA GB300, (GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}), "
                    r"580\.173\.02, 284208, 0, 10\.3, (0000000[89]|0000001[89]):06:00\.0$")
    for i, line in enumerate(lines):
        m = rx.match(line)
        assert m, line
        assert int(m.group(1)) == i and m.group(2) == prof["gpus"][i]["uuid"]


def test_query_gpu_header_and_units(tmp_path):
    res = run("nvidia-smi", ["--query-gpu=name,memory.total,memory.used,fan.speed,power.draw,utilization.gpu",
                             "--format=csv"], render(), tmp_path)
    lines = res.stdout.splitlines()
    assert lines[0] == "name, memory.total [MiB], memory.used [MiB], fan.speed [%], power.draw [W], utilization.gpu [%]"
    assert lines[1] == "NVIDIA GB300, 284208 MiB, 0 MiB, [N/A], 180.29 W, 0 %"
    nounits = run("nvidia-smi", ["--query-gpu", "memory.total,fan.speed", "--format", "csv,nounits"], render(),
                  tmp_path).stdout.splitlines()
    assert nounits[0] == "memory.total [MiB], fan.speed [%]"  # header keeps the unit
    assert nounits[1] == "284208, [N/A]"


def test_query_gpu_documented_610_style_sample(tmp_path):
    block = ref_block("--query-gpu=driver_version,name,compute_cap --format=csv")
    prof = render("b200", patch={"gpu_count": 7, "driver": {"version": "610.57.04", "cuda_version": "13.3"},
                                 "gpu": {"name": "NVIDIA B300 SXM6 AC", "compute_cap": "10.3"}})
    res = run("nvidia-smi", ["--query-gpu=driver_version,name,compute_cap", "--format=csv"], prof, tmp_path)
    assert res.stdout == "\n".join(block.splitlines()[1:]) + "\n"


def test_query_gpu_rejects_unknown_field_and_missing_format(tmp_path):
    res = run("nvidia-smi", ["--query-gpu=index,bogus.field", "--format=csv"], render(), tmp_path)
    assert res.returncode == 2 and 'Field "bogus.field" is not a valid field to query.' in res.stdout
    res = run("nvidia-smi", ["--query-gpu=index"], render(), tmp_path)
    assert res.returncode == 2


def test_query_gpu_id_selection(tmp_path):
    prof = render()
    res = run("nvidia-smi", ["-i", "2", "--query-gpu=index,pci.bus_id", "--format=csv,noheader"], prof, tmp_path)
    assert res.stdout == "2, 00000018:06:00.0\n"
    res = run("nvidia-smi", ["-i", "9", "-L"], prof, tmp_path)
    assert res.returncode != 0 and "No devices were found" in res.stdout


# ------------------------------------------------------------------------------------------ table

def test_default_table_is_byte_identical_to_real_gb300_capture(tmp_path):
    block = ref_block("ubuntu@GPU-6773:~$ nvidia-smi\n")
    temps, powers = [33, 33, 35, 34], [237, 233, 238, 234]
    prof = render(patch={"driver": {"version": "580.105.08", "cuda_version": "13.0"},
                         "gpu": {"memory_used_mib": 1},
                         "gpu_overrides": {str(i): {"temperature_c": temps[i], "power_draw_w": powers[i]}
                                           for i in range(4)}})
    res = run("nvidia-smi", [], prof, tmp_path)
    assert res.returncode == 0
    expected = block.splitlines()[2:]
    got = res.stdout.splitlines()
    assert re.match(r"^\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}$", got[0])
    assert got[1:] == expected


def test_table_banner_renames_from_610(tmp_path):
    block = ref_block("KMD Version: 610.57.04     CUDA UMD Version: 13.3")
    prof = render("b200", ["driver_610"], patch={"gpu": {"name": "NVIDIA B300 SXM6 AC", "memory_total_mib": 275040,
                                                         "temperature_c": 28, "power_draw_w": 181,
                                                         "power_limit_w": 1100.0, "memory_used_mib": 0},
                                                 "gpu_slots": [{"pci_bus_id": "00000000:1A:00.0"}] * 8})
    out = run("nvidia-smi", [], prof, tmp_path).stdout.splitlines()
    assert out[1:11] == block.splitlines()[:10]
    assert "Driver Version" not in out[2] and "CUDA Version" not in out[2].replace("CUDA UMD Version", "")


def test_table_banner_580_uses_old_labels(tmp_path):
    out = run("nvidia-smi", [], render(), tmp_path).stdout.splitlines()
    assert out[2] == "| NVIDIA-SMI 580.173.02             Driver Version: 580.173.02     CUDA Version: 13.0     |"
    drv = re.search(r"(?:Driver|KMD) Version:\s+([0-9]+(?:\.[0-9]+)+)", out[2]).group(1)
    cuda = re.search(r"CUDA(?: UMD)? Version:\s+([0-9]+\.[0-9]+)", out[2]).group(1)
    assert (drv, cuda) == ("580.173.02", "13.0")


# ------------------------------------------------------------------------------------------ -q / -q -x

def test_q_text_header_580_matches_real_capture(tmp_path):
    block = ref_block("CUDA Version                              : Not Found")
    prof = render(patch={"driver": {"version": "580.105.06", "cuda_version": None}})
    out = run("nvidia-smi", ["-q"], prof, tmp_path).stdout.splitlines()
    exp = block.splitlines()
    assert out[:2] == exp[:2] and out[3:5] == exp[3:5]
    assert re.match(r"^Timestamp {33}: \w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}$", out[2])


def test_q_text_header_610_matches_documented_sample(tmp_path):
    block = ref_block("Use KMD Version instead]")
    out = run("nvidia-smi", ["-q"], render(faults=["driver_610"]), tmp_path).stdout.splitlines()
    exp = block.splitlines()
    assert out[:2] == exp[:2]
    assert out[3:8] == exp[3:8]
    assert out[8].startswith("Attached GPUs" + " " * 42 + ": ")
    assert len(out[2].split(" : ")[0]) == 54  # key column widened to 55


def test_q_text_fabric_block_matches_documented_shape(tmp_path):
    block = ref_block("ClusterUUID                       : b2daed23-0000-0000-0000-000000000000")
    prof = render(patch={"fabric": {"clique_id": 1, "cluster_uuid": "b2daed23-0000-0000-0000-000000000000",
                                    "health": {"incorrect_configuration": None, "partition_assigned": None}}})
    out = run("nvidia-smi", ["-q"], prof, tmp_path).stdout.splitlines()
    start = out.index("    Fabric")
    exp = block.rstrip("\n").splitlines()
    assert out[start:start + len(exp)] == exp


def test_q_text_fabric_not_completed(tmp_path):
    out = run("nvidia-smi", ["-q"], render(faults=["fabric_not_completed"]), tmp_path).stdout
    states = re.findall(r"^        State\s+: (.+)$", out, re.M)
    assert states == ["In Progress"] * 4
    assert "Route Recovery in progress    : True" in out


def _xml(tmp_path, prof, args=("-q", "-x")):
    res = run("nvidia-smi", list(args), prof, tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout, ET.fromstring(res.stdout.split("\n", 2)[2])


def _paths(elem, prefix=""):
    out = set()
    for child in elem:
        p = prefix + "/" + child.tag
        out.add(p)
        out |= _paths(child, p)
    return out


def test_xml_reference_xpaths_and_values(tmp_path):
    prof = render()
    _text, root = _xml(tmp_path, prof)
    assert root.tag == "nvidia_smi_log"
    assert root.findtext("driver_version") == "580.173.02" and root.findtext("cuda_version") == "13.0"
    assert root.findtext("attached_gpus") == "4"
    gpus = root.findall("gpu")
    assert [g.get("id") for g in gpus] == [g["pci_bus_id"] for g in prof["gpus"]]
    for g, pg in zip(gpus, prof["gpus"]):
        assert g.findtext("product_name") == "NVIDIA GB300"
        assert g.findtext("uuid") == pg["uuid"]
        assert g.findtext("pci/pci_bus_id") == pg["pci_bus_id"]
        assert g.findtext("pci/pci_device_id") == "31C210DE"
        assert g.findtext("fb_memory_usage/total") == "284208 MiB"
        assert g.findtext("fabric/state") == "Completed" and g.findtext("fabric/status") == "Success"
        assert g.findtext("fabric/cliqueId") == "32766"
        assert g.findtext("fabric/clusterUuid") == prof["fabric"]["cluster_uuid"]
        assert g.findtext("fabric/health/summary") == "Healthy"
        assert g.findtext("platformInfo/peer_type") == "Switch Connected"
        assert g.findtext("persistence_mode") == "Enabled" and g.findtext("ecc_mode/current_ecc") == "Enabled"
        assert g.findtext("ecc_errors/volatile/dram_uncorrectable") == "0"
        assert g.findtext("mig_mode/current_mig") == "Disabled"
        assert g.findtext("remapped_rows/remapped_row_pending") == "No"
        assert g.find("compute_cap") is None  # the real XML has no compute capability


@pytest.fixture(scope="module")
def real_gb300():
    if not os.path.exists(GB300_XML):
        pytest.skip("real GB300 capture absent: %s" % GB300_XML)
    with open(GB300_XML, encoding="utf-8") as fh:
        text = fh.read()
    return text, ET.fromstring(text.split("\n", 2)[2])


def test_xml_element_paths_exist_in_real_gb300_capture(tmp_path, real_gb300):
    real_text, real = real_gb300
    text, fake = _xml(tmp_path, render())
    assert text.splitlines()[:3] == real_text.splitlines()[:3]  # prolog, DOCTYPE, root
    missing = _paths(fake) - _paths(real)
    assert not missing, sorted(missing)


def _is_subsequence(small, big):
    it = iter(big)
    return all(any(x == y for y in it) for x in small)


def test_xml_child_order_follows_real_gb300_capture(tmp_path, real_gb300):
    _t, real = real_gb300
    _t2, fake = _xml(tmp_path, render())

    def walk(f, r, where):
        ft = [c.tag for c in f]
        rt = [c.tag for c in r]
        assert _is_subsequence(ft, rt), (where, ft, rt)
        for fc in f:
            rc = r.find(fc.tag)
            if len(fc):
                walk(fc, rc, where + "/" + fc.tag)

    walk(fake, real, "")


def test_xml_values_agree_with_real_gb300_capture(tmp_path, real_gb300):
    _t, real = real_gb300
    _t2, fake = _xml(tmp_path, render())
    for rg, fg in zip(real.findall("gpu"), fake.findall("gpu")):
        assert rg.get("id") == fg.get("id")
        for path in ("product_name", "product_architecture", "addressing_mode", "c2c_mode", "pci/pci_device_id",
                     "pci/pci_sub_system_id", "pci/pci_domain", "pci/pci_bus", "fb_memory_usage/total",
                     "fb_memory_usage/reserved", "gpu_power_readings/current_power_limit",
                     "gpu_power_readings/min_power_limit", "module_power_readings/default_power_limit",
                     "fabric/state", "fabric/status", "fabric/cliqueId", "fabric/health/summary",
                     "fabric/health/bandwidth", "fabric/health/partition_assigned", "platformInfo/module_id",
                     "platformInfo/slot_number", "platformInfo/tray_index", "gsp_firmware_version", "vbios_version"):
            assert fg.findtext(path) == rg.findtext(path), path


def test_xml_b200_fabric_without_mnnvl(tmp_path):
    _t, root = _xml(tmp_path, render("b200", node="b200-n1"))
    fab = root.find("gpu/fabric")
    assert [c.tag for c in fab] == ["state", "status", "cliqueId", "clusterUuid", "health"]
    assert fab.findtext("clusterUuid") == "00000000-0000-0000-0000-000000000000" and fab.findtext("cliqueId") == "0"
    assert [c.tag for c in fab.find("health")] == [
        "summary", "bandwidth", "route_recovery_in_progress", "route_unhealthy", "access_timeout_recovery",
        "incorrect_configuration"]
    assert root.find("gpu/platformInfo") is None and root.find("gpu/c2c_mode") is None


# ------------------------------------------------------------------------------------------ -L, topo, nvlink

def test_list_gpus(tmp_path):
    prof = render(faults=["mixed_model"])
    lines = run("nvidia-smi", ["-L"], prof, tmp_path).stdout.splitlines()
    assert lines == ["GPU %d: %s (UUID: %s)" % (g["index"], g["name"], g["uuid"]) for g in prof["gpus"]]
    assert lines[3].startswith("GPU 3: NVIDIA GB200 (UUID: GPU-")
    assert len(run("nvidia-smi", ["-L"], render(faults=["missing_gpu"]), tmp_path).stdout.splitlines()) == 3


def test_topo_matrix_matches_real_b300_capture_layout(tmp_path):
    block = ref_block("dell@dell:~$ nvidia-smi topo -m")
    over = {str(i): {"cpu_affinity": "0,2,4,6,8,10" if i < 3 else "1,3,5,7,9,11",
                     "numa_affinity": "0" if i < 3 else "1", "gpu_numa_id": "N/A"} for i in range(7)}
    prof = render("b200", node="b", patch={"gpu_count": 7, "gpu_overrides": over, "rdma": {"devices": None}})
    out = run("nvidia-smi", ["topo", "-m"], prof, tmp_path).stdout
    assert out.expandtabs(8).splitlines() == block.splitlines()[1:]


def test_topo_matrix_gb300_with_nics(tmp_path):
    out = run("nvidia-smi", ["topo", "-m"], render(), tmp_path).stdout
    lines = out.splitlines()
    header = lines[0].split("\t")
    assert header[1:] == ["GPU0", "GPU1", "GPU2", "GPU3", "NIC0", "NIC1", "NIC2", "NIC3", "CPU Affinity",
                          "NUMA Affinity", "GPU NUMA ID"]
    assert lines[1].split() == ["GPU0", "X", "NV18", "NV18", "NV18", "SYS", "SYS", "SYS", "SYS", "0-71", "0", "2"]
    assert "NIC Legend:\n\n  NIC0: mlx5_0\n  NIC1: mlx5_1\n  NIC2: mlx5_2\n  NIC3: mlx5_3\n" in out


def test_nvlink_status(tmp_path):
    prof = render(patch={"gpu_overrides": {"1": {"nvlink": {"inactive": [4]}}}})
    out = run("nvidia-smi", ["nvlink", "--status"], prof, tmp_path).stdout
    gpus = re.findall(r"^GPU (\d+): (.+) \(UUID: (GPU-[0-9a-f-]+)\)$", out, re.M)
    assert [g[0] for g in gpus] == ["0", "1", "2", "3"]
    links = re.findall(r"^\s+Link (\d+): (.+)$", out, re.M)
    assert len(links) == 72
    assert links.count(("4", "<inactive>")) == 1
    assert sum(1 for _n, v in links if v == "53.125 GB/s") == 71
    assert run("nvidia-smi", ["nvlink", "-s"], prof, tmp_path).stdout == out


# ------------------------------------------------------------------------------------------ faults

@pytest.mark.parametrize("args", [[], ["-L"], ["-q"], ["-q", "-x"], ["--query-gpu=name", "--format=csv"],
                                  ["topo", "-m"], ["nvlink", "-s"]])
def test_driver_not_loaded(tmp_path, args):
    res = run("nvidia-smi", args, render(faults=["driver_not_loaded"]), tmp_path)
    assert res.returncode == 9
    assert res.stdout == DRIVER_MSG + "\n"
    assert DRIVER_MSG == ref_block("NVIDIA-SMI has failed because").strip()


def test_no_nvidia_smi_is_command_not_found(tmp_path):
    res = run("nvidia-smi", ["-L"], render(faults=["no_nvidia_smi"]), tmp_path)
    assert res.returncode == 127 and res.stdout == ""
    assert "nvidia-smi: command not found" in res.stderr
    assert run("nvidia-ctk", ["--version"], render(faults=["no_nvidia_smi"]), tmp_path).returncode == 0


def test_old_driver_everywhere(tmp_path):
    prof = render(faults=["old_driver"])
    csv = run("nvidia-smi", ["--query-gpu=driver_version", "--format=csv,noheader"], prof, tmp_path).stdout
    assert csv.splitlines() == ["570.172.08"] * 4
    _t, root = _xml(tmp_path, prof)
    assert root.findtext("driver_version") == "570.172.08" and root.findtext("cuda_version") == "12.8"
    assert "Version: 570.172" in run("nvidia-imex-ctl", ["-N"], prof, tmp_path).stdout


def test_nvidia_tools_absent_on_amd_node(tmp_path):
    prof = render("mi355x", node="m")
    for tool in ("nvidia-smi", "nvidia-imex-ctl", "nvidia-ctk"):
        assert run(tool, ["--version"], prof, tmp_path).returncode == 127


# ------------------------------------------------------------------------------------------ IMEX

def test_imex_nodes_match_real_capture_layout(tmp_path):
    block = ref_block("Domain State: UP").splitlines()
    addrs = ["172.31.48.81", "172.31.48.98"] + ["172.31.50.%d" % i for i in range(15)] + ["172.31.56.47"]
    prof = render(faults=["old_driver"], address="172.31.48.81", domain_nodes=addrs)
    out = run("nvidia-imex-ctl", ["-N"], prof, tmp_path).stdout.splitlines()
    assert out[:9] == block[:9]  # legend, including the tool's own typo
    assert out[9] == ""
    assert re.match(r"^\d{1,2}/\d{1,2}/\d{4} \d\d:\d\d:\d\d\.\d{3}$", out[10])
    for line in block[11:]:
        if line != "       ...":
            if line == "...":
                continue
            assert line in out, line
    assert out[-1] == "Domain State: UP"


def test_imex_down(tmp_path):
    out = run("nvidia-imex-ctl", ["-N"], render(faults=["imex_down"]), tmp_path).stdout
    rows = re.findall(r"^Node #(\d+)\s+- (\S+)\s+- (\S+)\s+- Version: (\S+)$", out, re.M)
    assert rows == [("0", "127.0.0.11", "READY", "580.173"), ("1", "127.0.0.12", "UNAVAILABLE", "580.173")]
    assert "Domain State: DOWN" in out
    matrix = [l.split()[1:] for l in out.splitlines() if re.match(r"^\s+\d+\s{8}[A-Z]", l)]
    assert matrix == [["C", "N"], ["N", "C"]]


def test_imex_ctl_absent_without_imex(tmp_path):
    assert run("nvidia-imex-ctl", ["-N"], render("h200", node="h"), tmp_path).returncode == 127


# ------------------------------------------------------------------------------------------ nvidia-ctk

def test_ctk_version(tmp_path):
    out = run("nvidia-ctk", ["--version"], render(), tmp_path).stdout.splitlines()
    assert re.match(r"^NVIDIA Container Toolkit CLI version (\S+)$", out[0]).group(1) == "1.18.0"
    assert re.match(r"^commit: [0-9a-f]{40}$", out[1])


def test_ctk_cdi_list(tmp_path):
    block = ref_block("INFO[0000] Found 5 CDI devices").splitlines()
    prof = render(patch={"container_toolkit": {"cdi_uuid_names": False}})
    res = run("nvidia-ctk", ["cdi", "list"], prof, tmp_path)
    assert res.stderr.splitlines() == [block[1]]  # logrus padding kept byte-for-byte
    assert res.stdout.splitlines() == block[2:]
    full = run("nvidia-ctk", ["cdi", "list"], render(), tmp_path).stdout.splitlines()
    assert "nvidia.com/gpu=all" in full
    assert len([d for d in full if re.match(r"^nvidia\.com/gpu=\d+$", d)]) == 4
    assert len([d for d in full if d.startswith("nvidia.com/gpu=GPU-")]) == 4


# ------------------------------------------------------------------------------------------ engine memory

class _FakeDocker(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


def _docker_server(sock_path, containers):
    class Handler(http.server.BaseHTTPRequestHandler):
        def address_string(self):
            return "docker"

        def log_message(self, *a):
            pass

        def do_GET(self):
            if self.path.split("?")[0] == "/containers/json":
                body = [{"Id": c["Id"], "Names": ["/" + c["Name"]], "Image": c["Image"]} for c in containers]
            else:
                cid = self.path.split("/")[2]
                c = next(c for c in containers if c["Id"] == cid)
                body = {"Id": cid, "Path": "vllm", "Args": c["Args"], "State": {"Running": True},
                        "Config": {"Image": c["Image"]}}
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    srv = _FakeDocker(sock_path, Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


@pytest.mark.parametrize("containers,expected", [
    ([{"Id": "a1", "Name": "vllm-kimi-k3", "Image": "127.0.0.1:5000/vllm/vllm-openai@sha256:" + "0" * 64,
       "Args": ["serve", "moonshotai/Kimi-K3", "--gpu-memory-utilization", "0.8"]}], round(0.8 * 284208)),
    ([{"Id": "a2", "Name": "vllm-kimi-k3", "Image": "127.0.0.1:5000/vllm/vllm-openai:latest",
       "Args": ["serve", "moonshotai/Kimi-K3", "--tensor-parallel-size", "8"]}], round(0.92 * 284208)),
    ([{"Id": "a3", "Name": "other", "Image": "debian:bookworm", "Args": ["sleep", "inf"]}], 0),
])
def test_memory_used_follows_running_vllm_container(tmp_path, containers, expected):
    sock = str(tmp_path / "docker.sock")
    srv = _docker_server(sock, containers)
    try:
        res = run("nvidia-smi", ["--query-gpu=memory.used", "--format=csv,noheader,nounits"], render(), tmp_path,
                  env={"KIMI_SIM_DOCKER_SOCK": sock})
        assert res.stdout.splitlines() == [str(expected)] * 4
    finally:
        srv.shutdown()
        srv.server_close()
