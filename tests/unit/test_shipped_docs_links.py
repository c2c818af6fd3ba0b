"""The documents that ship in the collection tarball point only at what ships.

An operator reads the installed README.md, docs/ and the runbooks without the git checkout: a relative link to a
file left out by galaxy.yml's build_ignore (docs/dev/, docs/sim.md, scripts/) is a dead end there. Such files are
linked as the project repository's URLs instead (galaxy.yml ``repository``), and those links must name a file the
repository has. The operator commands of the README run from the installed collection and a site: every playbook
and inventory they name must come with the tarball.

The tarball is built once for the module (a few seconds) with the helper of test_collection_build.py.
"""
import os
import re
import subprocess
import tarfile

import pytest
import yaml

from tests.unit.test_collection_build import REPO, _build
from tests.unit.test_install_readme import sh_block

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _meta():
    with open(os.path.join(REPO, "galaxy.yml")) as f:
        return yaml.safe_load(f)


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    """Every member of the built tarball (files and their directories) -> the text of the shipped Markdown files."""
    _name, _names, path = _build(REPO, str(tmp_path_factory.mktemp("dist")))
    with tarfile.open(path) as tar:
        members = {m.name.rstrip("/") for m in tar.getmembers()}
        docs = {m.name: tar.extractfile(m).read().decode("utf-8") for m in tar.getmembers()
                if m.isfile() and m.name.endswith(".md")}
    for name in list(members):
        parts = name.split("/")
        members.update("/".join(parts[:i]) for i in range(1, len(parts)))
    return members, docs


def _checkout_files():
    out = subprocess.run(["git", "-C", REPO, "ls-files", "-co", "--exclude-standard"], stdout=subprocess.PIPE,
                         check=True).stdout.decode().splitlines()
    found = set(out)
    for name in out:
        parts = name.split("/")
        found.update("/".join(parts[:i]) for i in range(1, len(parts)))
    return found


def test_shipped_docs_are_the_readme_docs_and_role_readmes(shipped):
    members, docs = shipped
    assert "README.md" in docs and "docs/install.md" in docs and "docs/runbooks/README.md" in docs
    assert not [n for n in docs if n.startswith(("docs/dev/", "docs/sim"))]
    assert all(n == "README.md" or n.startswith("docs/") or re.match(r"roles/[^/]+/README\.md$", n) for n in docs)


def test_relative_links_of_shipped_docs_resolve_in_the_tarball(shipped):
    members, docs = shipped
    dead = []
    for name, text in sorted(docs.items()):
        for target in LINK.findall(text):
            if re.match(r"^(?:[a-z][a-z0-9+.-]*:|#)", target):
                continue
            path = os.path.normpath(os.path.join(os.path.dirname(name), target.split("#")[0]))
            if path not in members:
                dead.append("%s -> %s" % (name, target))
    assert dead == []


def test_project_links_name_files_of_the_repository(shipped):
    """Links to what only the git repository holds use galaxy.yml's repository URL and name a file it has."""
    _members, docs = shipped
    base = _meta()["repository"].rstrip("/") + "/"
    files = _checkout_files()
    bad, seen = [], 0
    for name, text in sorted(docs.items()):
        for target in LINK.findall(text):
            if target.startswith(base):
                seen += 1
                path = re.sub(r"^(?:blob|tree)/main/", "", target[len(base):].split("#")[0]).rstrip("/")
                if path not in files:
                    bad.append("%s -> %s" % (name, target))
            elif "github.com/gpufleet" in target:
                bad.append("%s -> %s (not under %s)" % (name, target, base))
    assert seen and bad == []


def test_readme_operator_commands_name_only_shipped_playbooks_and_inventories(shipped):
    """After the install, the README's commands run in the site that site_init makes from the installed copy: its
    playbooks wrap the collection's playbooks/<name>.yml and its inventories are copies of the tarball's."""
    members, _docs = shipped
    readme = os.path.join(REPO, "README.md")
    lines = sh_block(readme, "## Install (operators)") + sh_block(readme, "## Pointing it at a real cluster")
    missing = []
    for line in lines:
        for word in line.split("#")[0].split():
            if re.match(r"^(scripts|sim|tests|benchmarks|molecule|playbooks|docs)/", word):
                missing.append(word)          # a path of the checkout: the site has none of these
            elif re.match(r"^\w+\.yml$", word) and word != "requirements.yml":
                if "playbooks/" + word not in members:
                    missing.append(word)
            elif word.startswith("inventories/") and word.rstrip("/") not in members:
                missing.append(word)
    assert missing == []


def test_project_urls_share_one_home():
    meta = _meta()
    home = meta["repository"].rstrip("/")
    assert re.match(r"^https://github\.com/gpufleet/kimi_k3$", home), home
    assert meta["homepage"].rstrip("/") == home
    assert meta["documentation"].startswith(home + "/") and meta["issues"] == home + "/issues"
