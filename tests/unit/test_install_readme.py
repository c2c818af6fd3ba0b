"""The README's "Install (operators)" commands and docs/install.md's "From a built tarball" commands, run verbatim.

Where: a copy of the checkout (what a clone holds: the tracked and not-ignored files) with the development link
`scripts/setup.sh` makes (build/collections/ansible_collections/gpufleet/kimi_k3 -> the working tree), so the
checkout's own ansible.cfg - collections_path = build/collections first - is in force, as it is for an operator
who builds in a clone; a temporary HOME, so `~/.ansible/collections` and `~/kimi-site` are empty at the start;
the venv's bin first on PATH (`python3`, `ansible-*` are the venv's); no ANSIBLE_* variables.

Offline, and honest about it: there is no Galaxy access here. community.docker (and its dependency) come from the
venv's `ansible` package, which ansible-galaxy finds on sys.path and skips ("is already installed, skipping") -
what an operator whose pip installed `ansible` sees too; an operator with ansible-core only gets it from Galaxy.
The first command, the venv (`python3 -m venv ~/kimi-venv && . ~/kimi-venv/bin/activate && pip install -r
requirements.txt`), is checked word for word but not run: it would download the whole list. The test venv stands in
for ~/kimi-venv (its bin is first on PATH, `pip install -r requirements.txt` runs in it with PIP_NO_INDEX=1 and
passes only because the venv already satisfies the list). The venv line ran for real on a clean HOME with the
PyPI mirror when it was written (#39).

Not run verbatim: the README's last command, `cd ~/kimi-site && ansible-playbook deploy.yml -i
inventories/gb300-cluster`, which would contact the example's nodes (10.20.0.x). The same command runs with
--syntax-check (the site's deploy.yml resolves gpufleet.kimi_k3.deploy from the installed copy), and the site's
plan.yml - which contacts no host - runs for real on that inventory.
"""
import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.helpers import cli
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
API_KEY = "sk-test-0123456789"


def sh_block(path, heading):
    """The first ```sh block after the line `heading` of a Markdown file, as a list of command lines."""
    with open(path) as f:
        text = f.read()
    start = text.index("\n" + heading + "\n")
    block = re.search(r"```sh\n(.*?)```", text[start:], re.S)
    assert block, "no sh block under %r in %s" % (heading, path)
    return [line for line in block.group(1).splitlines() if line.strip() and not line.startswith("#")]


def _env(home):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "PIP_", "VIRTUAL_ENV"))}
    env.update(HOME=str(home), PATH=BIN + os.pathsep + env.get("PATH", "/usr/bin:/bin"), ANSIBLE_NOCOLOR="1",
               PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    return env


VENV_LINE = ("python3 -m venv ~/kimi-venv && . ~/kimi-venv/bin/activate && pip install -r %s"
             "   # ansible-core + libraries")


def without_venv(lines, requirements="requirements.txt"):
    """The commands after the venv line, which must come first (ansible-galaxy is ansible-core's) and read as
    VENV_LINE; its pip step runs in the test venv instead."""
    assert lines[0] == VENV_LINE % requirements, lines[0]
    return ["python3 -m pip install -r %s" % requirements] + lines[1:]


def _bash(script, cwd, env, timeout=300):
    return cli.run(["bash", "-e", "-c", script], cwd=cwd, env=env, timeout=timeout).stdout


def _clone(dest):
    """A clone's files plus the development link, as after `git clone` and `scripts/setup.sh`."""
    files = subprocess.run(["git", "-C", REPO, "ls-files", "-co", "--exclude-standard", "-z"], stdout=subprocess.PIPE,
                           check=True).stdout.decode().split("\0")
    for rel in filter(None, files):
        src = os.path.join(REPO, rel)
        if os.path.isfile(src):
            os.makedirs(os.path.join(str(dest), os.path.dirname(rel)), exist_ok=True)
            shutil.copy2(src, os.path.join(str(dest), rel))
    link = dest / "build" / "collections" / "ansible_collections" / "gpufleet" / "kimi_k3"
    link.parent.mkdir(parents=True)
    os.symlink(str(dest), str(link))


def _installed_path(cwd, env):
    out = _bash("ansible-galaxy collection list gpufleet.kimi_k3", cwd, env)
    return re.findall(r"^# (\S+)$", out, re.M)


@pytest.fixture()
def checkout(tmp_path):
    if not os.access(os.path.join(BIN, "ansible-galaxy"), os.X_OK) or shutil.which("git") is None:
        pytest.skip("needs the venv's ansible-galaxy and git")
    clone, home, elsewhere = tmp_path / "kimi_k3", tmp_path / "home", tmp_path / "empty"
    for d in (clone, home, elsewhere):
        d.mkdir()
    _clone(clone)
    return clone, home, elsewhere


def test_readme_blocks_are_what_this_test_runs():
    readme = sh_block(os.path.join(REPO, "README.md"), "## Install (operators)")
    assert readme[-1].startswith("cd ~/kimi-site && ansible-playbook deploy.yml -i inventories/"), readme
    assert any("site_init" in line for line in readme)
    guide = sh_block(os.path.join(REPO, "docs", "install.md"), "### From a built tarball")
    assert guide[0].startswith("git clone "), guide
    # on a clean machine ansible-galaxy exists only after the venv line, and the collection's own install does not
    # depend on Galaxy (community.docker has a line of its own)
    for block in (readme, guide[1:]):
        assert without_venv(block)[1].startswith("ansible-galaxy collection build"), block
        installs = [line for line in block if "collection install" in line and ".tar.gz" in line]
        assert installs and all("--no-deps" in line for line in installs), installs
        assert any("-r requirements.yml" in line for line in block), block


def test_readme_install_and_site_commands_verbatim(checkout):
    clone, home, elsewhere = checkout
    env = _env(home)
    lines = without_venv(sh_block(os.path.join(REPO, "README.md"), "## Install (operators)"))
    out = _bash("\n".join(lines[:-1]), clone, env)
    # community.docker: not from Galaxy (none here) but the venv's `ansible` package, found, so Galaxy is not asked
    assert "Nothing to do. All requested collections are already installed." in out, out
    assert "gpufleet.kimi_k3:0.1.0 was installed successfully" in out, out
    inst = home / ".ansible" / "collections" / "ansible_collections" / "gpufleet" / "kimi_k3"
    assert (inst / "MANIFEST.json").is_file()
    # nothing landed in the checkout's development collections path besides its link
    assert os.listdir(str(clone / "build" / "collections" / "ansible_collections")) == ["gpufleet"]
    assert os.path.islink(str(clone / "build" / "collections" / "ansible_collections" / "gpufleet" / "kimi_k3"))
    site = home / "kimi-site"
    assert (site / "deploy.yml").is_file() and (site / "inventories" / "gb300-cluster" / "hosts.yml").is_file()
    assert not [n for n in os.listdir(str(site / "inventories")) if n.startswith("sim")]

    # from anywhere else the FQCN resolves to the installed copy
    assert _installed_path(elsewhere, env) == [str(home / ".ansible" / "collections" / "ansible_collections")]
    _bash(lines[-2].replace("~/kimi-site", "~/second-site"), elsewhere, env)
    assert (home / "second-site" / "upgrade.yml").is_file()

    # the last command, without contacting the example's nodes
    _bash(lines[-1] + " --syntax-check", elsewhere, env)
    plan_env = dict(env, KIMI_K3_API_KEY=API_KEY)
    _bash("cd ~/kimi-site && ansible-playbook plan.yml -i inventories/gb300-cluster", elsewhere, plan_env)
    plans = sorted(os.listdir(str(site / "artifacts" / "plan")))
    assert "gb300-tray01.json" in plans and "gb300-tray01.sh" in plans, plans
    assert not (inst / "artifacts").exists()


def test_install_md_tarball_commands_verbatim(checkout):
    clone, home, elsewhere = checkout
    env = _env(home)
    lines = sh_block(os.path.join(REPO, "docs", "install.md"), "### From a built tarball")
    # the first line is the clone (the fixture made it): the rest runs in it, twice (a second run replaces)
    for attempt in (1, 2):
        out = _bash("\n".join(without_venv(lines[1:])), clone, env)
        assert "gpufleet.kimi_k3:0.1.0 was installed successfully" in out, (attempt, out)
    assert _installed_path(elsewhere, env) == [str(home / ".ansible" / "collections" / "ansible_collections")]
    out = _bash("ansible-playbook gpufleet.kimi_k3.site_init -e site_dir=~/kimi-site", elsewhere, env)
    assert (home / "kimi-site" / "status.yml").is_file(), out
