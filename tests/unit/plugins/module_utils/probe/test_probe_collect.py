"""node_probe's gathering (probe_collect.collect) replayed on fixture nodes, plus the real socket paths."""
import http.server
import importlib.util
import json
import os
import socket
import socketserver
import tempfile
import threading

import pytest

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.probe import collect as PC
from tests.helpers.runner import REPO

_spec = importlib.util.spec_from_file_location(
    "probe_fixture_io", os.path.join(REPO, "tests", "unit", "fixtures", "probes", "fixture_io.py"))
fixture_io = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fixture_io)
FixtureIO = fixture_io.FixtureIO

OPTS = {"model": "moonshotai/Kimi-K3", "model_cache_dir": "/data/hf-cache", "docker_host": "unix:///var/run/docker.sock",
        "ports": [{"name": "api", "port": 8000, "bind": ["0.0.0.0"]}, {"name": "master", "port": "29501"}],
        "bind_addresses": ["10.0.0.11"]}


def probe(node, overrides=None, opts=None):
    return PC.collect(FixtureIO(node, overrides), dict(OPTS, **(opts or {})))


REQUIRED = ("gpu_count", "gpu_model", "driver_version", "cuda_version", "rocm_version", "mnnvl", "tools", "errors",
            "vendor", "gpus", "fabric", "imex", "rdma", "gpudirect", "engine", "shm_bytes", "memlock", "disk",
            "kernel", "time_sync", "ports")


@pytest.mark.parametrize("node", sorted(d for d in os.listdir(fixture_io.HERE)
                                        if os.path.isfile(os.path.join(fixture_io.HERE, d, "node.json"))))
def test_every_fixture_node_has_the_contract_keys_and_is_json(node):
    facts = probe(node)
    for key in REQUIRED:
        assert key in facts, key
    json.dumps(facts)


def test_healthy_gb300_tray():
    f = probe("gb300-tray01")
    assert (f["vendor"], f["gpu_count"], f["gpu_model"]) == ("nvidia", 4, "gb300")
    assert (f["driver_version"], f["cuda_version"], f["rocm_version"]) == ("580.173.02", "13.0", None)
    assert f["mnnvl"] is True and f["fabric"]["clique_id"] == "32766"
    assert f["imex"]["up"] is True and f["devices"]["imex_channel"] is True
    g = f["gpus"][2]
    assert (g["index"], g["pci_bus_id"], g["compute_cap"], g["memory_total_mib"]) == (
        2, "00000018:06:00.0", "10.3", 284208)
    assert g["uuid"].startswith("GPU-02")
    assert f["engine"]["source"] == "socket" and f["engine"]["gpu_support"]["ok"] is True
    assert f["gpudirect"]["mode"] == "dmabuf"              # open module, no peermem
    assert f["rdma"]["active_ports"] == 4 and f["rdma"]["source"] == "ibv_devinfo"
    assert f["memlock"] == -1 and f["shm_bytes"] == 500 * 1024 ** 3
    assert f["time_sync"] == {"synchronized": True, "source": "timedatectl"}
    assert f["errors"] == []
    assert f["tools"]["nvidia-smi"] == "/usr/bin/nvidia-smi" and f["tools"]["amd-smi"] is None
    assert [(p["name"], p["address"], p["port"], p["state"]) for p in f["ports"]] == [
        ("api", "0.0.0.0", 8000, "free"), ("master", "10.0.0.11", 29501, "free")]


def test_one_call_per_tool_invocation():
    io = FixtureIO("gb300-tray01")
    PC.collect(io, OPTS)
    cmds = [" ".join(c) for c in io.calls]
    assert len(cmds) == len(set(cmds)), cmds                # nothing runs twice
    assert "/usr/bin/nvidia-smi -q -x" in cmds


def test_every_command_is_timed_and_counted():
    io = FixtureIO("gb300-tray01")
    f = PC.collect(io, OPTS)
    assert len(f["commands"]) == len(io.calls)
    assert [c["command"] for c in f["commands"]][:2] == ["nvidia-smi -q", "nvidia-smi --query-gpu=" + ",".join(
        PC.P.NVIDIA_QUERY_FIELDS)]
    assert all(c["rc"] == 0 and c["seconds"] >= 0 for c in f["commands"])
    assert f["probe_seconds"] >= sum(c["seconds"] for c in f["commands"]) - 0.01


def test_a_failing_command_keeps_its_rc_in_the_timing_record():
    f = probe("gb300-tray01", {"commands": {"nvidia-smi -q -x": {"rc": 9, "stdout": None}}})
    assert [(c["command"], c["rc"]) for c in f["commands"]][0] == ("nvidia-smi -q", 9)


def test_no_nvidia_smi_is_a_finding_not_a_crash():
    f = probe("gb300-no-nvidia-smi")
    assert f["vendor"] == "nvidia"
    assert f["tools"]["nvidia-smi"] is None
    assert f["nvidia"]["smi_status"] == "missing"
    assert f["driver_version"] == "580.173.02"             # from /proc/driver/nvidia/version
    assert f["gpu_count"] == 4                             # from /proc/driver/nvidia/gpus
    assert f["cuda_version"] is None and f["mnnvl"] is False
    assert any("nvidia-smi not found" in e for e in f["errors"])


def test_driver_not_loaded():
    f = probe("gb300-tray01", {"commands": {"nvidia-smi -q -x": {"rc": 9, "stdout": None, "stderr": (
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")}}})
    assert f["nvidia"]["smi_status"] == "driver_not_loaded"
    assert f["gpu_count"] == 4                             # CSV still answered in this replay
    csv = ("nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total,memory.used,compute_cap,pci.bus_id "
           "--format=csv,noheader,nounits")
    f = probe("gb300-no-nvidia-smi", {"tools": {"nvidia-smi": "/usr/bin/nvidia-smi"}, "commands": {
        "nvidia-smi -q -x": {"rc": 9, "stdout": None}, csv: {"rc": 9, "stdout": None}}})
    assert f["nvidia"]["smi_status"] == "driver_not_loaded"
    assert f["gpu_count"] == 4 and f["gpu_model"] == "unknown"   # counted from /proc/driver/nvidia/gpus
    assert any("rc 9" in e for e in f["errors"])


def test_gpu_missing_and_old_driver():
    assert probe("gb300-gpu-missing")["gpu_count"] == 3
    f = probe("gb300-driver570")
    assert (f["driver_version"], f["cuda_version"]) == ("570.172.08", "12.8")


def test_imex_down_and_fabric_in_progress():
    f = probe("gb300-imex-down")
    assert f["imex"]["up"] is False and f["imex"]["domain_state"] == "DOWN" and f["mnnvl"] is True
    f = probe("gb300-fabric-inprogress")
    assert f["mnnvl"] is False and f["fabric"]["state"] == "In Progress"


def test_hgx_nodes():
    h = probe("h200-node01")
    assert (h["gpu_model"], h["gpu_count"], h["gpus"][0]["compute_cap"]) == ("h200", 8, "9.0")
    b = probe("b200-node01")
    assert b["gpu_model"] == "b200" and b["mnnvl"] is False   # Completed with zero UUID
    assert b["gpudirect"]["mode"] == "peermem"
    assert b["engine"]["gpu_support"] == {"ok": True, "via": ["cdi"]}
    assert b["time_sync"]["source"] == "chronyc"
    assert probe("b200-ib-port-down")["rdma"]["active_ports"] == 7


def test_mi355x_nodes():
    f = probe("mi355x-node01")
    assert (f["vendor"], f["gpu_count"], f["gpu_model"], f["rocm_version"]) == ("amd", 8, "mi355x", "7.0.2")
    assert f["driver_version"] == "6.14.14" and f["cuda_version"] is None
    assert f["gpus"][0]["uuid"].startswith("00ff75a3")
    assert f["engine"]["gpu_support"] == {"ok": True, "via": ["kfd+dri"]}
    assert f["devices"]["dri_render_nodes"] == 8
    old = probe("mi355x-rocm64")
    assert old["gpu_count"] == 8 and old["rocm_version"] == "6.4.0"
    assert old["driver_version"] == "6.14.14"              # kernel-banner pseudo version ignored, static used


def test_rdma_sysfs_fallback():
    f = probe("b200-node01", {"tools": {"ibv_devinfo": None}, "dirs": {
        "/sys/class/infiniband": ["mlx5_0"], "/sys/class/infiniband/mlx5_0/ports": ["1"]}})
    assert f["rdma"]["source"] == "sysfs" and f["rdma"]["ports"][0]["state"] is None
    io = FixtureIO("b200-node01", {"tools": {"ibv_devinfo": None}, "dirs": {
        "/sys/class/infiniband": ["mlx5_0"], "/sys/class/infiniband/mlx5_0/ports": ["1"]}})
    io.read = lambda p, _orig=io.read: {"/sys/class/infiniband/mlx5_0/ports/1/state": "4: ACTIVE\n",
                                        "/sys/class/infiniband/mlx5_0/ports/1/link_layer": "InfiniBand\n"}.get(
        p, _orig(p))
    r = PC.collect(io, OPTS)["rdma"]
    assert r["ports"] == [{"device": "mlx5_0", "port": 1, "state": "ACTIVE", "link_layer": "InfiniBand",
                           "active_mtu": None}] and r["active_ports"] == 1


def test_engine_falls_back_to_cli_then_reports_unreachable():
    over = {"docker_api": None, "commands": {
        "docker version --format {{json .}}": {"rc": 0, "stdout": "docker_version.json"},
        "docker info --format {{json .}}": {"rc": 0, "stdout": "docker_info.json"}}}
    f = probe("gb300-tray01", over)
    assert f["engine"]["source"] == "cli" and f["engine"]["version"] == "29.7.2" and f["engine"]["reachable"]
    f = probe("gb300-tray01", {"docker_api": None, "tools": {"docker": None}})
    assert f["engine"]["reachable"] is False and f["engine"]["gpu_support"]["ok"] is False
    assert any("engine API" in e for e in f["errors"])


def test_no_gpu_stack_at_all():
    io = FixtureIO("gb300-tray01")
    io.m.update({"tools": {}, "files": {}, "paths": [], "commands": {}, "docker_api": None})
    f = PC.collect(io, OPTS)
    assert f["vendor"] is None and f["gpu_count"] == 0 and f["gpu_model"] == "unknown"
    assert f["time_sync"] == {"synchronized": None, "source": None}
    assert any("no GPU driver" in e for e in f["errors"])


def test_weights_present_in_hf_cache():
    snap = "/data/hf-cache/hub/models--moonshotai--Kimi-K3/snapshots/abc"
    index = json.dumps({"weight_map": {"a": "model-00001-of-00002.safetensors",
                                       "b": "model-00002-of-00002.safetensors"}})
    io = FixtureIO("gb300-tray01", {"paths": [snap], "sizes": {snap + "/model-00001-of-00002.safetensors": 10,
                                                               snap + "/model-00002-of-00002.safetensors": 5}})
    io.read = lambda p, _orig=io.read: index if p == snap + "/model.safetensors.index.json" else _orig(p)
    w = PC.collect(io, OPTS)["weights"]
    assert w == {"model": "moonshotai/Kimi-K3", "revision": None, "present": True, "path": snap, "bytes": 15,
                 "missing_shards": 0, "read": None}  # no sample read asked for (weight_read_sample_mib 0)
    io.m["sizes"].pop(snap + "/model-00002-of-00002.safetensors")
    w = PC.collect(io, OPTS)["weights"]
    assert w["present"] is False and w["missing_shards"] == 1


def test_missing_cache_dir_measures_parent():
    f = probe("h200-node01", {"paths": ["/data"]})
    assert f["disk"]["exists"] is False and f["disk"]["checked_path"] == "/data"
    assert f["disk"]["free_bytes"] == 12 * 1024 ** 4


def test_port_entries_accept_ints_and_dicts():
    e = PC._port_entries({"ports": [8000, {"port": "29501", "name": "master", "bind": "10.0.0.1"}, {"x": 1}],
                          "bind_addresses": ["127.0.0.1"]})
    assert e == [("8000", 8000, ["127.0.0.1"]), ("master", 29501, ["10.0.0.1"])]


# ------------------------------------------------------------------ real I/O paths (no GPU needed)

def test_real_port_state_free_in_use_not_local():
    io = PC.ProbeIO()
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    port = s.getsockname()[1]
    try:
        assert io.port_state("127.0.0.1", port) == "in_use"
    finally:
        s.close()
    assert io.port_state("127.0.0.1", port) == "free"
    assert io.port_state("192.0.2.123", port) == "not_local"   # TEST-NET address, never configured here


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        body = {"/version": {"Version": "29.7.2", "ApiVersion": "1.54"},
                "/info": {"ServerVersion": "29.7.2", "Runtimes": {"runc": {}, "nvidia": {}}}}.get(self.path)
        data = json.dumps(body).encode()
        self.send_response(200 if body else 404)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


class _UnixServer(socketserver.UnixStreamServer):
    def get_request(self):
        req, _addr = socketserver.UnixStreamServer.get_request(self)
        return req, ("local", 0)


def test_engine_api_over_unix_socket():
    d = tempfile.mkdtemp()
    path = os.path.join(d, "docker.sock")
    srv = _UnixServer(path, _Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        io = PC.ProbeIO(run=lambda argv: (127, "", "absent"), which=lambda n: None)
        ctx = PC._Ctx(io, {})
        eng = PC.collect_engine(ctx, "unix://" + path)
        assert eng["source"] == "socket" and eng["version"] == "29.7.2" and eng["nvidia_runtime"] is True
        eng = PC.collect_engine(ctx, "unix://" + os.path.join(d, "nope.sock"))
        assert eng["reachable"] is False and "nope.sock" in eng["error"]
    finally:
        srv.shutdown()
        srv.server_close()


def test_real_probeio_never_raises_from_run():
    def boom(argv):
        raise OSError("exec failed")
    rc, out, err = PC.ProbeIO(run=boom).run(["x"])
    assert rc == 127 and "exec failed" in err


def test_python_requests_reported():
    f = probe("gb300-tray01")
    assert f["python"]["requests"] is True and f["python"]["executable"] == "/usr/bin/python3"
    f = probe("gb300-tray01", {"python": {"modules": {"requests": None}}})
    assert f["python"] == {"executable": "/usr/bin/python3", "version": "3.11.2", "requests": False,
                           "requests_path": None}
    real = PC.ProbeIO().python_module("json")
    assert real[2] and real[1].count(".") == 2
    assert PC.ProbeIO().python_module("no_such_module_kimi")[2] is None


def test_interfaces_from_ip_json_else_sysfs():
    ip_j = ('[{"ifname":"bond0","flags":["UP","LOWER_UP"],"mtu":9000,"operstate":"UP",'
            '"addr_info":[{"family":"inet","local":"10.0.0.11","prefixlen":24}]}]')
    io = FixtureIO("gb300-tray01", {"tools": {"ip": "/usr/sbin/ip"}})
    io.run = lambda argv: (0, ip_j, "") if argv[1:] == ["-j", "addr", "show"] else (1, "", "")
    f = PC.collect(io, dict(OPTS, interfaces=["bond0", "eth9"]))["interfaces"]
    assert f["source"] == "ip" and f["available"] == ["bond0"]
    assert f["names"]["bond0"] == {"exists": True, "up": True, "loopback": False, "mtu": 9000, "operstate": "UP",
                                   "addresses": ["10.0.0.11/24"]}
    assert f["names"]["eth9"] == {"exists": False}
    io = FixtureIO("gb300-tray01")                           # no iproute2: /sys/class/net
    files = {"/sys/class/net/lo/flags": "0x9\n", "/sys/class/net/lo/mtu": "65536\n"}
    io.read = lambda p, _o=io.read: files.get(p) if p.startswith("/sys/class/net") else _o(p)
    f = PC.collect(io, dict(OPTS, interfaces=["lo"]))["interfaces"]
    assert f["source"] == "sysfs" and f["names"]["lo"]["up"] is True and f["names"]["lo"]["addresses"] is None
    assert PC.collect(FixtureIO("gb300-tray01"), OPTS)["interfaces"] == {"source": None, "names": {}}


def test_weights_of_the_pinned_revision_only():
    base = "/data/hf-cache/hub/models--moonshotai--Kimi-K3"
    snap = base + "/snapshots/" + "c" * 40
    index = json.dumps({"weight_map": {"a": "model-00001-of-00001.safetensors"}})
    io = FixtureIO("gb300-tray01", {"paths": [snap], "sizes": {snap + "/model-00001-of-00001.safetensors": 10}})
    refs = {base + "/refs/main": "c" * 40 + "\n"}
    io.read = lambda p, _o=io.read: index if p == snap + "/model.safetensors.index.json" else refs.get(p, _o(p))
    for revision, present in (("c" * 40, True), ("main", True), ("d" * 40, False), ("v2", False), (None, True)):
        w = PC.collect(io, dict(OPTS, model_revision=revision))["weights"]
        assert w["present"] is present and w["revision"] == revision, (revision, w)
