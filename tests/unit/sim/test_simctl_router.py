"""simctl's router image bookkeeping: the pinned version and kimi_k3_router_image in sim_image.yml of the clusters
with a router (the image build itself runs in `simctl up --cluster gb300pd|fleet`)."""
import importlib.machinery
import importlib.util
import os

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _simctl():
    loader = importlib.machinery.SourceFileLoader("kimi_simctl", os.path.join(REPO, "sim", "simctl"))
    spec = importlib.util.spec_from_loader("kimi_simctl", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


IMAGES = {"nvidia": {"standin-a": "r/a@sha256:1", "standin-b": "r/b@sha256:2", "standin-broken": "r/c@sha256:3"}}
ROUTER = {"ref": "127.0.0.1:5000/vllm/vllm-router@sha256:" + "f" * 64, "version": "0.1.17"}


def test_router_version_is_the_pinned_wheel():
    assert _simctl().router_version() == "0.1.17"


def test_router_clusters_get_the_router_image_by_digest(tmp_path, monkeypatch):
    simctl = _simctl()
    monkeypatch.setattr(simctl, "REPO", str(tmp_path))
    for name in ("fleet", "gb300pd", "gb300"):
        simctl.write_sim_image(simctl.cluster_def(name), IMAGES, ROUTER)
    fleet = yaml.safe_load((tmp_path / "inventories/sim-gb300-fleet/group_vars/all/sim_image.yml").read_text())
    pd = yaml.safe_load((tmp_path / "inventories/sim-gb300-pd/group_vars/all/sim_image.yml").read_text())
    single = yaml.safe_load((tmp_path / "inventories/sim-gb300/group_vars/all/sim_image.yml").read_text())
    assert fleet["kimi_k3_router_image"] == pd["kimi_k3_router_image"] == ROUTER["ref"]
    assert fleet["kimi_k3_image"] == "r/a@sha256:1"
    assert "kimi_k3_router_image" not in single


def test_cluster_addresses_are_the_documented_ones():
    simctl = _simctl()
    assert [n["address"] for n in simctl.cluster_def("gb300pd")["nodes"]] == [
        "127.0.0.31", "127.0.0.32", "127.0.0.33", "127.0.0.34", "127.0.0.35"]
    assert [n["address"] for n in simctl.cluster_def("fleet")["nodes"]] == [
        "127.0.0.51", "127.0.0.52", "127.0.0.53", "127.0.0.54", "127.0.0.55"]
    assert [c["name"] for c in simctl.selected_clusters("all")] == ["gb300", "mi355x"]
