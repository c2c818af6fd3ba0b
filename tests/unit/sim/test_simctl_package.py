"""sim/simctl is a thin entry point over the kimisim package: the command line answers as before, and the image
cache keys cover the files each image is built from (a changed stand-in or node tool rebuilds its image) and
nothing of simctl's own layout."""
import ast
import os
import shutil
import subprocess
import sys

from tests.unit.sim.test_simctl_router import REPO, _simctl

SIMCTL = os.path.join(REPO, "sim", "simctl")
BASE = "kimi-sim/base:0123456789abcdef"


def test_the_entry_point_lists_every_command():
    p = subprocess.run([sys.executable, SIMCTL, "--help"], capture_output=True, text=True, check=False)
    assert p.returncode == 0, p.stderr
    assert " ".join(p.stdout.split()).startswith(
        "usage: simctl [-h] {up,down,status,fault,hf-fault,hf-repo,check,env,prefetch-engine,images} ...")
    assert "simctl - the local rehearsal cluster for gpufleet.kimi_k3 (see docs/sim.md)." in p.stdout


def test_an_unknown_command_is_refused_by_the_parser():
    p = subprocess.run([sys.executable, SIMCTL, "bogus"], capture_output=True, text=True, check=False)
    assert p.returncode == 2
    assert "invalid choice: 'bogus'" in p.stderr


def _sim_copy(tmp_path):
    sim = tmp_path / "sim"
    for part in ("standin", "nodetools", "profiles", os.path.join("images", "standin"), os.path.join("images", "node")):
        shutil.copytree(os.path.join(REPO, "sim", part), str(sim / part),
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return sim


def test_a_changed_standin_changes_the_standin_image_key(tmp_path, monkeypatch):
    images = _simctl("images")
    sim = _sim_copy(tmp_path)
    monkeypatch.setattr(images, "SIM_DIR", str(sim))
    monkeypatch.setattr(images, "REPO", REPO)
    before = images.standin_hash(BASE)
    assert before == images.standin_hash(BASE)
    with open(str(sim / "standin" / "vllm_standin" / "flags.py"), "a") as f:
        f.write("\n")
    assert images.standin_hash(BASE) != before
    assert before.endswith("0123") and len(before) == 20


def test_a_changed_node_tool_changes_the_node_image_key(tmp_path, monkeypatch):
    images = _simctl("images")
    sim = _sim_copy(tmp_path)
    monkeypatch.setattr(images, "SIM_DIR", str(sim))
    before = images.node_image_hash(BASE)
    with open(str(sim / "nodetools" / "nvtools.py"), "a") as f:
        f.write("\n")
    assert images.node_image_hash(BASE) != before


def test_the_image_keys_do_not_read_simctl_itself(tmp_path, monkeypatch):
    images = _simctl("images")
    sim = _sim_copy(tmp_path)
    monkeypatch.setattr(images, "SIM_DIR", str(sim))
    monkeypatch.setattr(images, "REPO", REPO)
    before = images.standin_hash(BASE), images.node_image_hash(BASE)
    (sim / "simctl").write_text("#!/bin/sh\n")
    (sim / "kimisim").mkdir()
    (sim / "kimisim" / "up.py").write_text("# another layout\n")
    assert (images.standin_hash(BASE), images.node_image_hash(BASE)) == before


def test_terminate_ends_a_process_that_ignores_sigterm():
    util = _simctl("util")
    p = subprocess.Popen([sys.executable, "-c", "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                          "print('ready', flush=True)\ntime.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        util.terminate(p.pid, 0.3)
        assert p.wait(timeout=5) == -9
    finally:
        if p.poll() is None:
            p.kill()
        p.stdout.close()


def test_down_removes_only_the_files_up_wrote(tmp_path, monkeypatch):
    down, clusters = _simctl("down"), _simctl("clusters")
    monkeypatch.setattr(down, "REPO", str(tmp_path))
    gb300 = clusters.cluster_def("gb300")
    bench = {"inventory": "inventories/sim-bench", "shared_engine": True}
    for inv in down.cluster_inventories(gb300):
        (tmp_path / inv / "group_vars" / "all").mkdir(parents=True)
        (tmp_path / inv / "group_vars" / "all" / "sim_image.yml").write_text("x: 1\n")
        (tmp_path / inv / "hosts.yml").write_text("all: {}\n")
    (tmp_path / bench["inventory"] / "group_vars" / "all").mkdir(parents=True)
    (tmp_path / bench["inventory"] / "hosts.yml").write_text("all: {}\n")
    down.remove_generated_files(gb300)
    down.remove_generated_files(bench)
    for inv in down.cluster_inventories(gb300):
        assert sorted(p.name for p in (tmp_path / inv).rglob("*")) == ["hosts.yml"]
    assert not (tmp_path / bench["inventory"]).exists()


# The rows of the package table in docs/dev/architecture.md: a module imports modules of its own row or above.
LAYERS = (("settings",), ("util", "cachekey", "pipconf", "hfproxy"), ("clusters",), ("engines", "devices"), ("registry", "hfmirror"),
          ("images", "router_image", "engine_image"), ("nodes", "inventories"),
          ("up", "down", "status", "faults", "check", "cli"))


def test_package_modules_import_only_their_own_row_or_the_rows_above():
    rank = {m: i for i, row in enumerate(LAYERS) for m in row}
    pkg = os.path.join(REPO, "sim", "kimisim")
    modules = sorted(f[:-3] for f in os.listdir(pkg) if f.endswith(".py") and f != "__init__.py")
    assert sorted(rank) == modules
    wrong = []
    for mod in modules:
        with open(os.path.join(pkg, mod + ".py")) as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kimisim."):
                dep = node.module.split(".", 1)[1]
                if rank[dep] > rank[mod]:
                    wrong.append("%s imports %s" % (mod, dep))
    assert wrong == []


def test_the_lock_lives_in_the_run_directory_it_is_given(tmp_path):
    util = _simctl("util")
    with util.locked(str(tmp_path / "light")):
        assert (tmp_path / "light" / ".lock").exists()


def test_bench_and_light_inventories_share_the_host_groups():
    hosts = [{"name": "n1", "address": "127.0.0.1"}, {"name": "n2", "address": "127.0.0.2"}]
    groups = _simctl("inventories").host_groups(hosts, lambda n: ["              x: %s" % n["name"]])
    assert groups == [
        "            n1:", "              ansible_host: 127.0.0.1", "              kimi_k3_internal_address: 127.0.0.1",
        "              kimi_k3_api_host: 127.0.0.1", "              x: n1",
        "        vllm_workers:", "          hosts:",
        "            n2:", "              ansible_host: 127.0.0.2", "              kimi_k3_internal_address: 127.0.0.2",
        "              kimi_k3_api_host: 127.0.0.2", "              x: n2"]
    assert _simctl("inventories").host_groups(hosts[:1])[-2:] == ["        vllm_workers:", "          hosts: {}"]
