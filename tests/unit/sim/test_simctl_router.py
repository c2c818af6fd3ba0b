"""simctl's router image bookkeeping: the pinned version and kimi_k3_router_image in sim_image.yml of the clusters
with a router (the image build itself runs in `simctl up --cluster gb300pd|fleet`)."""
import importlib
import os

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _simctl(module):
    """A module of sim/kimisim, the package behind the sim/simctl entry point (tests/conftest.py puts sim/ on the
    path)."""
    return importlib.import_module("kimisim." + module)


IMAGES = {"nvidia": {"standin-a": "r/a@sha256:1", "standin-b": "r/b@sha256:2", "standin-broken": "r/c@sha256:3"}}
ROUTER = {"ref": "127.0.0.1:5000/vllm/vllm-router@sha256:" + "f" * 64, "version": "0.1.17"}


def test_router_version_is_the_pinned_wheel():
    assert _simctl("router_image").router_version() == "0.1.17"


def test_router_clusters_get_the_router_image_by_digest(tmp_path, monkeypatch):
    inventories, clusters = _simctl("inventories"), _simctl("clusters")
    monkeypatch.setattr(inventories, "REPO", str(tmp_path))
    for name in ("fleet", "gb300pd", "gb300"):
        inventories.write_sim_image(clusters.cluster_def(name), IMAGES, ROUTER)
    fleet = yaml.safe_load((tmp_path / "inventories/sim-gb300-fleet/group_vars/all/sim_image.yml").read_text())
    pd = yaml.safe_load((tmp_path / "inventories/sim-gb300-pd/group_vars/all/sim_image.yml").read_text())
    single = yaml.safe_load((tmp_path / "inventories/sim-gb300/group_vars/all/sim_image.yml").read_text())
    assert fleet["kimi_k3_router_image"] == pd["kimi_k3_router_image"] == ROUTER["ref"]
    assert fleet["kimi_k3_image"] == "r/a@sha256:1"
    assert "kimi_k3_router_image" not in single


def test_cluster_addresses_are_the_documented_ones():
    clusters = _simctl("clusters")
    assert [n["address"] for n in clusters.cluster_def("gb300pd")["nodes"]] == [
        "127.0.0.31", "127.0.0.32", "127.0.0.33", "127.0.0.34", "127.0.0.35"]
    assert [n["address"] for n in clusters.cluster_def("fleet")["nodes"]] == [
        "127.0.0.51", "127.0.0.52", "127.0.0.53", "127.0.0.54", "127.0.0.55"]
    assert [c["name"] for c in clusters.selected_clusters("all")] == ["gb300", "mi355x"]
