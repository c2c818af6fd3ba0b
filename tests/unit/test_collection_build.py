"""The collection tarball built by ``ansible-galaxy collection build`` carries the collection and nothing else.

Two checks:
* the real tree: the tarball holds plugins/, roles/, playbooks/ and data/vllm_flags/ (what the roles and the
  controller read at run time) and none of the local-only directories;
* galaxy.yml's ``build_ignore`` against a scratch tree that is guaranteed to contain every local-only directory
  (in a fresh clone .venv, build/ or sim/.state/ may not exist yet, so the first check alone could pass vacuously).
"""
import os
import shutil
import sys
import tarfile

import pytest

from tests.helpers import cli

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Directories that must never ship: the venv, build output (incl. the build/collections link back to the repo),
# the rehearsal cluster (and its runtime state: SSH keys, engine data-roots), playbook artifacts, git metadata,
# test suites, benchmarks, CI and dev scripts, molecule scenarios (galaxy.yml build_ignore, docs/install.md).
LOCAL_ONLY = (".venv/", "build/", "sim/", "artifacts/", ".git/", ".ci/", "scripts/", "benchmarks/", "molecule/",
              "tests/unit/", "tests/integration/", "tests/helpers/", "tests/chaos/", "tests/realparser/",
              "inventories/sim-", "docs/sim", "docs/dev/", "docs/chaos-soak.md", "changelogs/fragments/")
# Everything an installed collection needs, and nothing else: each shipped file is one of these or under one of the
# directories (names ending in /). The operator docs ship; the rehearsal cluster's pages and the developer docs not.
SHIPPED_FILES = {"MANIFEST.json", "FILES.json", "README.md", "LICENSE", "execution-environment.yml", "requirements.txt",
                 "requirements.yml", "meta/runtime.yml", "changelogs/changelog.yaml", "CHANGELOG.rst"}
SHIPPED_DIRS = ("plugins/", "roles/", "playbooks/", "data/", "docs/runbooks/", "tests/sanity/")
SHIPPED_DOCS = {"access.md", "awx.md", "capacity.md", "deployments.md", "image.md", "install.md", "layouts.md", "monitoring.md",
                "preflight.md", "secrets.md", "smoke.md", "variables.md", "weights.md"}
EXAMPLE_INVENTORIES = {"gb300-cluster", "gb300-dep16", "gb300-fleet", "gb300-pd", "mi355x-cluster",
                       "mi355x-rdma-2node"}


def _galaxy():
    cand = os.path.join(os.path.dirname(sys.executable), "ansible-galaxy")
    path = cand if os.access(cand, os.X_OK) else shutil.which("ansible-galaxy")
    if not path:
        pytest.skip("ansible-galaxy not installed")
    return path


def _build(src, out_dir):
    env = dict(os.environ)
    env.pop("ANSIBLE_CONFIG", None)
    proc = cli.run([_galaxy(), "collection", "build", "--force", "--output-path", out_dir, src], cwd=out_dir,
                   env=env)
    tarballs = [f for f in os.listdir(str(out_dir)) if f.endswith(".tar.gz")]
    assert len(tarballs) == 1, (tarballs, cli.failure(proc))
    path = os.path.join(str(out_dir), tarballs[0])
    with tarfile.open(path) as tar:
        return tarballs[0], tar.getnames(), path


def _offenders(names):
    return sorted(n for n in names
                  if n.startswith(LOCAL_ONLY) or "/__pycache__/" in "/" + n or n.endswith((".pyc", ".tar.gz")))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return _build(REPO, tmp_path_factory.mktemp("dist"))


def test_tarball_named_after_galaxy_yml(built):
    import yaml

    with open(os.path.join(REPO, "galaxy.yml")) as f:
        meta = yaml.safe_load(f)
    assert built[0] == "{namespace}-{name}-{version}.tar.gz".format(**meta)


@pytest.mark.parametrize("prefix", ["plugins/", "roles/", "playbooks/", "data/vllm_flags/", "meta/runtime.yml",
                                    "LICENSE", "requirements.txt", "requirements.yml", "tests/sanity/ignore-2.21.txt",
                                    "inventories/gb300-cluster/"])
def test_tarball_contains(built, prefix):
    names = built[1]
    assert any(n == prefix or n.startswith(prefix) and n != prefix.rstrip("/") for n in names), \
        "%s missing from the tarball; top level: %s" % (prefix, sorted({n.split("/")[0] for n in names}))


def test_tarball_carries_the_changelog_of_its_release(built):
    """CHANGELOG.rst (antsibull-changelog release) ships and names the version galaxy.yml builds, and
    changelogs/changelog.yaml records that release."""
    import yaml

    with open(os.path.join(REPO, "galaxy.yml")) as f:
        version = str(yaml.safe_load(f)["version"])
    with tarfile.open(built[2]) as tar:
        rst = tar.extractfile("CHANGELOG.rst").read().decode("utf-8")
        record = yaml.safe_load(tar.extractfile("changelogs/changelog.yaml"))
    assert ("\nv%s\n" % version) in rst and "Release Summary" in rst
    assert version in record["releases"] and record["releases"][version]["changes"]["release_summary"]


def test_tarball_has_flag_snapshots(built):
    snaps = [n for n in built[1] if n.startswith("data/vllm_flags/") and n.endswith(".json")]
    assert snaps, "no data/vllm_flags/vllm-<version>.json in the tarball"


def test_tarball_excludes_local_state(built):
    assert _offenders(built[1]) == []


def _unexpected(name):
    if name in SHIPPED_FILES or name.startswith(SHIPPED_DIRS):
        return False
    parts = name.split("/")
    if parts[0] == "docs" and len(parts) == 2:
        return parts[1] not in SHIPPED_DOCS
    return not (parts[0] == "inventories" and len(parts) > 2 and parts[1] in EXAMPLE_INVENTORIES)


def test_tarball_ships_only_what_an_installed_collection_needs(built):
    with tarfile.open(built[2]) as tar:
        files = [m.name for m in tar.getmembers() if m.isfile()]
    assert sorted(n for n in files if _unexpected(n)) == []
    assert {n.split("/")[1] for n in files if n.startswith("inventories/")} == EXAMPLE_INVENTORIES
    assert {n.split("/")[1] for n in files if n.count("/") == 1 and n.startswith("docs/")} == SHIPPED_DOCS
    assert not [n for n in files if n.startswith(("inventories/sim", "changelogs/fragments", "docs/dev"))]


def test_build_ignore_excludes_local_dirs(tmp_path):
    """Every local-only directory present in the source tree stays out of the tarball (galaxy.yml build_ignore)."""
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(os.path.join(REPO, "galaxy.yml"), str(src / "galaxy.yml"))
    (src / "README.md").write_text("readme\n")
    (src / "meta").mkdir()
    (src / "meta" / "runtime.yml").write_text('---\nrequires_ansible: ">=2.17.0"\n')
    (src / "plugins" / "modules").mkdir(parents=True)
    (src / "plugins" / "modules" / "dummy.py").write_text("# dummy\n")
    (src / "plugins" / "modules" / "__pycache__").mkdir()
    (src / "plugins" / "modules" / "__pycache__" / "dummy.cpython-312.pyc").write_bytes(b"\0")
    for d in (".venv/bin", "build/collections", "sim/.state/ssh", "artifacts/plans", ".git/objects",
              ".pytest_cache/v", ".hypothesis/examples", "mutants/plugins"):
        (src / d).mkdir(parents=True)
        (src / d / "sentinel").write_text("must not ship\n")
    (src / "sim" / "simctl").write_text("#!/bin/sh\n")
    (src / "old-gpufleet-kimi_k3-0.0.1.tar.gz").write_bytes(b"\0")

    out = tmp_path / "out"
    out.mkdir()
    names = _build(src, out)[1]
    assert "plugins/modules/dummy.py" in names
    assert "sim/simctl" not in names  # the rehearsal cluster is development tooling (docs/sim.md)
    assert _offenders(names) == []
    assert not [n for n in names if n.startswith((".pytest_cache", ".hypothesis", "mutants"))]


def test_license_is_the_gpl_galaxy_yml_names(built):
    import yaml

    with open(os.path.join(REPO, "galaxy.yml")) as f:
        meta = yaml.safe_load(f)
    assert meta["license"] == ["GPL-3.0-or-later"]
    with open(os.path.join(REPO, "LICENSE")) as f:
        text = f.read()
    assert "GNU GENERAL PUBLIC LICENSE" in text and "Version 3, 29 June 2007" in text
    assert "LICENSE" in built[1]


def test_shipped_sanity_ignores_name_only_shipped_files(built):
    """ansible-test sanity on the tarball (Galaxy's importer) fails on ignore entries for files that do not ship:
    those belong in tests/sanity/dev-ignore.txt (scripts/sanity.sh appends it in the repo copy)."""
    names = set(built[1])
    ignores = [n for n in names if n.startswith("tests/sanity/ignore-") and n.endswith(".txt")]
    assert ignores
    bad = []
    for n in ignores:
        with open(os.path.join(REPO, n)) as f:
            bad += ["%s: %s" % (n, line.split()[0]) for line in f if line.strip() and line.split()[0] not in names]
    assert bad == [], "move these entries to tests/sanity/dev-ignore.txt: %s" % bad
    assert "tests/sanity/dev-ignore.txt" not in names
