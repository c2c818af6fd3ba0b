"""simctl's bookkeeping of the real-engine (cpu) cluster: the engine site's cache key, the sim_image.yml of both
cpu inventories, and the private /dev/shm of each cpu node's engine (the image build itself runs in
`simctl up --cluster cpu`)."""
import hashlib
import os
import shutil

import yaml

from tests.unit.sim.test_simctl_router import REPO, _simctl

ENGINE = {"engine-a": "r/cpu@sha256:1", "engine-b": "r/cpu@sha256:2", "engine-broken": "r/cpu@sha256:3"}


def test_the_engine_site_is_keyed_by_the_requirements_bytes_not_their_path(tmp_path, monkeypatch):
    engine_image = _simctl("engine_image")
    with open(os.path.join(REPO, "sim", "images", "engine", "requirements.txt"), "rb") as f:
        want = hashlib.sha256(f.read()).hexdigest()[:16]
    assert engine_image.requirements_key() == want
    copy = tmp_path / "other-checkout"
    shutil.copytree(os.path.join(REPO, "sim", "images", "engine"), str(copy))
    monkeypatch.setattr(engine_image, "ENGINE_DIR", str(copy))
    assert engine_image.requirements_key() == want


def test_both_cpu_inventories_get_the_engine_images(tmp_path, monkeypatch):
    inventories = _simctl("inventories")
    monkeypatch.setattr(inventories, "REPO", str(tmp_path))
    inventories.write_sim_image(_simctl("clusters").cluster_def("cpu"), {"cpu": ENGINE})
    for inv in ("sim-cpu", "sim-cpu-single"):
        got = yaml.safe_load((tmp_path / "inventories" / inv / "group_vars" / "all" / "sim_image.yml").read_text())
        assert got == {"kimi_k3_image": "r/cpu@sha256:1", "sim_image_alt": "r/cpu@sha256:2",
                       "sim_image_broken": "r/cpu@sha256:3"}


def test_the_dev_variant_is_written_as_sim_image_dev_and_reports_a_development_version(tmp_path, monkeypatch):
    inventories = _simctl("inventories")
    monkeypatch.setattr(inventories, "REPO", str(tmp_path))
    inventories.write_sim_image(_simctl("clusters").cluster_def("cpu"), {"cpu": dict(ENGINE, **{
        "engine-dev": "r/cpu@sha256:4"})})
    got = yaml.safe_load((tmp_path / "inventories" / "sim-cpu" / "group_vars" / "all" / "sim_image.yml").read_text())
    assert (got["kimi_k3_image"], got["sim_image_dev"]) == ("r/cpu@sha256:1", "r/cpu@sha256:4")
    version, lines = _simctl("engine_image").ENGINE_VARIANTS["engine-dev"]
    assert version == "0.32.1.dev7+g5f76ae224.cpu"
    assert "__version__ = version = '0.32.1.dev7+g5f76ae224.cpu'" in lines[0]
    assert "s/^Version: .*/Version: 0.32.1.dev7+g5f76ae224.cpu/" in lines[0]


def test_a_cpu_nodes_engine_starts_with_a_dev_shm_of_its_own():
    assert _simctl("clusters").cluster_def("cpu")["node_shm"] == "2g"
    wrapper = _simctl("engines").node_shm_wrapper("2g")
    assert wrapper[:4] == ["unshare", "--mount", "--propagation", "private"]
    assert 'mount -t tmpfs -o size=2g,mode=1777 shm /dev/shm && exec "$@"' in wrapper
