"""execution-environment.yml: valid ansible-builder 3 schema, consistent with galaxy.yml and requirements.txt (one
declaration each), and the CI variant scripts/ee_ci.py builds differs only by the documented substitutions."""
import os
import subprocess
import sys

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _load(name):
    with open(os.path.join(REPO, name)) as f:
        return yaml.safe_load(f)


@pytest.fixture(scope="module")
def ee():
    return _load("execution-environment.yml")


def test_schema_v3(ee):
    schema = pytest.importorskip("ansible_builder.ee_schema")
    assert ee["version"] == 3
    schema.validate_schema(ee)


def _dev_pin(name, marker):
    with open(os.path.join(REPO, "requirements-dev.txt")) as f:
        for line in f:
            req, _sep, mark = line.partition(";")
            if req.strip().startswith(name + "==") and mark.strip() == marker:
                return req.strip()
    raise AssertionError("requirements-dev.txt pins no %s for %s" % (name, marker))


def _installed_version(ns, name):
    import json

    import ansible_collections

    for root in ansible_collections.__path__:
        manifest = os.path.join(root, ns, name, "MANIFEST.json")
        if os.path.isfile(manifest):
            with open(manifest) as f:
                return json.load(f)["collection_info"]["version"]
    pytest.skip("%s.%s is not installed in the venv" % (ns, name))
    return None


def test_one_declaration_of_each_fact(ee):
    """The EE pins the releases the test suite runs (requirements-dev.txt's ansible-core, and the community.docker
    its `ansible` package ships), each inside the range the collection declares."""
    from packaging.specifiers import SpecifierSet

    galaxy = _load("galaxy.yml")
    deps = ee["dependencies"]
    assert deps["python"] == "requirements.txt"
    core = deps["ansible_core"]["package_pip"]
    assert core == _dev_pin("ansible-core", 'python_version >= "3.12"') == "ansible-core==2.21.5"
    with open(os.path.join(REPO, "requirements.txt")) as f:
        core_range = [ln.strip() for ln in f if ln.startswith("ansible-core")][0][len("ansible-core"):]
    assert core.split("==")[1] in SpecifierSet(core_range)
    colls = {c["name"]: c for c in deps["galaxy"]["collections"]}
    docker = colls["community.docker"]["version"]
    import ansible.release
    if ansible.release.__version__ == core.split("==")[1]:
        # the dev venv's release (the matrix's oldest leg carries community.docker 4.x on purpose)
        assert docker == "==" + _installed_version("community", "docker")
    assert docker[2:] in SpecifierSet(galaxy["dependencies"]["community.docker"])
    ours = "collections/{namespace}-{name}-{version}.tar.gz".format(**galaxy)
    assert colls[ours]["type"] == "file"
    assert ee["additional_build_files"] == [{"src": os.path.basename(ours), "dest": "collections"}]


def test_ci_variant_substitutes_base_sources_and_package_manager(ee):
    pytest.importorskip("ansible_builder")
    from scripts.ee_ci import TAG, WORK, ci_definition

    tarballs = {"gpufleet.kimi_k3": "gpufleet-kimi_k3-0.1.0.tar.gz", "community.docker": "community-docker-5.4.0.tar.gz",
                "community.library_inventory_filtering_v1": "community-library_inventory_filtering_v1-1.1.5.tar.gz"}
    ci = ci_definition(ee, "kimi-sim/base:abc", tarballs)
    from ansible_builder.ee_schema import validate_schema

    validate_schema(ci)
    assert ci["images"]["base_image"]["name"] == "kimi-sim/base:abc"
    assert ci["options"]["package_manager_path"] == "/usr/bin/apt-get" and ci["options"]["tags"] == [TAG]
    assert sorted(c["name"] for c in ci["dependencies"]["galaxy"]["collections"]) == \
        sorted("collections/" + t for t in tarballs.values())
    assert ci["dependencies"]["python"] == os.path.join(REPO, "requirements.txt")
    assert ci["build_arg_defaults"]["ANSIBLE_GALAXY_CLI_COLLECTION_OPTS"] == "--offline"
    assert [f["src"] for f in ci["additional_build_files"] if f["dest"] == "collections"] == \
        [os.path.join(WORK, "src", t) for t in sorted(tarballs.values())]
    assert {f["dest"] for f in ci["additional_build_files"]} <= {"collections", "ca"}
    # bookworm's python3 is 3.11: the dev venv's ansible-core pin for it
    assert ci["dependencies"]["ansible_core"] == {"package_pip": _dev_pin("ansible-core", 'python_version < "3.12"')}
    # everything else as shipped
    for key in ("ansible_runner", "system"):
        assert ci["dependencies"][key] == ee["dependencies"][key]
    assert ci["additional_build_steps"]["append_final"] == ee["additional_build_steps"]["append_final"]


def test_ansible_builder_create_writes_the_containerfile(tmp_path):
    builder = os.path.join(os.path.dirname(sys.executable), "ansible-builder")
    if not os.access(builder, os.X_OK):
        pytest.skip("ansible-builder not installed (requirements-dev.txt)")
    p = subprocess.run([builder, "create", "-f", os.path.join(REPO, "execution-environment.yml"), "-c",
                        str(tmp_path / "ctx"), "--output-filename", "Containerfile"], cwd=REPO,
                       capture_output=True, text=True, timeout=120, check=False)
    assert p.returncode == 0, p.stdout + p.stderr
    cf = (tmp_path / "ctx" / "Containerfile").read_text()
    assert 'ARG EE_BASE_IMAGE="registry.fedoraproject.org/fedora-minimal:42"' in cf
    assert "ansible-galaxy collection install" in cf
    assert (tmp_path / "ctx" / "_build" / "requirements.txt").is_file()
