"""docs/install.md "Offline from a tarball directory", done for real: the collection tarball plus its dependencies
(community.docker and community.library_inventory_filtering_v1, repacked from the venv's `ansible` package by
scripts/repack_collection.py) in one directory, `ansible-galaxy collection install --offline` into an empty
collections path, and the installed copy resolves by FQCN from there."""
import json
import os
import shutil
import sys

import pytest

from tests.helpers import cli
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)


def _tool(name):
    path = os.path.join(BIN, name)
    if not os.access(path, os.X_OK):
        pytest.skip("%s not installed next to %s" % (name, sys.executable))
    return path


def _installed(ns, name):
    import ansible_collections

    for base in ansible_collections.__path__:
        cand = os.path.join(base, ns, name)
        if os.path.isfile(os.path.join(cand, "MANIFEST.json")):
            return cand
    pytest.skip("%s.%s is not installed in the venv" % (ns, name))
    return None


def _run(cmd, cwd, env):
    return cli.run(cmd, cwd=cwd, env=env).stdout


def test_offline_install_from_tarball_directory(tmp_path):
    offline, coll, cwd = tmp_path / "offline", tmp_path / "collections", tmp_path / "site"
    for d in (offline, coll, cwd):
        d.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env["ANSIBLE_COLLECTIONS_PATH"] = str(coll)
    _run([_tool("ansible-galaxy"), "collection", "build", "--output-path", str(offline), REPO], cwd, env)
    for dep in ("docker", "library_inventory_filtering_v1"):
        _run([sys.executable, os.path.join(REPO, "scripts", "repack_collection.py"), _installed("community", dep),
              str(offline)], cwd, env)
    tarballs = sorted(str(p) for p in offline.iterdir())
    out = _run([_tool("ansible-galaxy"), "collection", "install", "--offline", "-p", str(coll)] + tarballs, cwd, env)
    assert "gpufleet.kimi_k3:0.1.0 was installed successfully" in out, out
    inst = coll / "ansible_collections" / "gpufleet" / "kimi_k3"
    with open(str(inst / "MANIFEST.json")) as f:
        deps = json.load(f)["collection_info"]["dependencies"]
    assert set(deps) == {"community.docker"}
    assert (coll / "ansible_collections" / "community" / "docker" / "plugins" / "modules" / "docker_container.py").is_file()
    # the installed copy, not the working tree, answers to the FQCN
    doc = _run([_tool("ansible-doc"), "-t", "module", "--json", "gpufleet.kimi_k3.cluster_plan"], cwd, env)
    assert json.loads(doc)["gpufleet.kimi_k3.cluster_plan"]["doc"]["filename"].startswith(str(coll))
    shutil.rmtree(str(coll))
