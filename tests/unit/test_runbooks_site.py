"""The runbooks are written for an operator site (docs/runbooks/README.md): every `ansible-playbook` command in them
names a playbook wrapper the site has (roles/site `site_playbooks`, one per collection playbook) or a playbook of
the collection by FQCN, and none uses the git checkout's `playbooks/*.yml` paths."""
import glob
import os
import re
import shlex

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUNBOOKS = sorted(glob.glob(os.path.join(REPO, "docs", "runbooks", "*.md")))
# the command's playbook argument: the first word after the options that take a value are skipped
# the runbooks README's template line, `ansible-playbook <playbook>.yml -i inventories/<cluster> [...]`
PLACEHOLDER = "_playbook_.yml"
VALUE_OPTS = {"-i", "-e", "--tags", "--limit", "-l", "-t", "--skip-tags", "--extra-vars", "--inventory"}


def _site_playbooks():
    with open(os.path.join(REPO, "roles", "site", "defaults", "main.yml")) as f:
        return set(yaml.safe_load(f)["site_playbooks"])


def commands(text):
    """Every `ansible-playbook ...` command of a Markdown text, in code blocks and inline code."""
    found = []
    for m in re.finditer(r"ansible-playbook\s+([^`\n]*)", text):
        found.append(m.group(1).rstrip("\\").strip())
    return found


def playbook_of(args):
    words = shlex.split(args.split("#")[0].replace("<", "_").replace(">", "_"), posix=True)
    skip = False
    for w in words:
        if skip:
            skip = False
        elif w in VALUE_OPTS:
            skip = True
        elif not w.startswith("-"):
            return w
    return None


def test_commands_parser_finds_inline_and_block_commands():
    text = "run `ansible-playbook smoke.yml -i inventories/<c>` then\n```sh\nansible-playbook -i x deploy.yml \\\n```"
    assert [playbook_of(c) for c in commands(text)] == ["smoke.yml", "deploy.yml"]
    assert playbook_of("playbooks/plan.yml -e plan_dir=/tmp/plan") == "playbooks/plan.yml"


@pytest.mark.parametrize("path", RUNBOOKS, ids=os.path.basename)
def test_every_runbook_command_names_a_playbook_the_site_has(path):
    with open(path) as f:
        text = f.read()
    site = _site_playbooks()
    bad = []
    for cmd in commands(text):
        book = playbook_of(cmd)
        fqcn = re.fullmatch(r"gpufleet\.kimi_k3\.(\w+)", book or "")
        if book == PLACEHOLDER and os.path.basename(path) == "README.md":
            continue
        if not (fqcn and fqcn.group(1) in site | {"site_init"}) and book not in {n + ".yml" for n in site}:
            bad.append(cmd)
    assert bad == [], "%s: commands whose playbook the site does not have: %s" % (os.path.basename(path), bad)
    assert "playbooks/" not in text, "%s uses the checkout's playbooks/ paths" % os.path.basename(path)


def test_runbooks_have_commands():
    """The check above is not vacuous: the runbooks hold dozens of commands, each parsed to a playbook."""
    cmds = [c for p in RUNBOOKS for c in commands(open(p).read())]
    assert len(cmds) > 40, len(cmds)
    assert all(playbook_of(c) for c in cmds)
