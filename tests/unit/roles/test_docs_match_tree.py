"""README.md and docs/dev/architecture.md name every role of roles/ and README's playbook table every playbook of
playbooks/, and nothing that is not there."""
import os
import re

from tests.helpers.runner import REPO


def _read(*parts):
    with open(os.path.join(REPO, *parts)) as handle:
        return handle.read()


def _dirs(name):
    return {d for d in os.listdir(os.path.join(REPO, name)) if os.path.isdir(os.path.join(REPO, name, d))}


def _section(text, heading):
    start = text.index(heading) + len(heading)
    end = text.find("\n#", start)
    return text[start:] if end < 0 else text[start:end]


def readme_layout_roles(text):
    """The role names in README's Layout line: `roles/` (a, b, ...)."""
    match = re.search(r"`roles/`\s*\(([^)]*)\)", _section(text, "## Layout"))
    assert match, "README's Layout names no roles"
    return {name.strip() for name in match.group(1).split(",")}


def architecture_roles(text):
    """The first column of the role table in architecture.md's Names section."""
    table = _section(text, "## Names").split("| role | job |", 1)[1]
    return set(re.findall(r"^\s*\| `([a-z_]+)` \|", table, re.M))


def readme_playbooks(text):
    """Playbook files README's playbook table names: playbooks/X.yml, `deploy.yml --tags`, gpufleet.kimi_k3.X."""
    table = _section(text, "## Playbooks and tags")
    names = set(re.findall(r"`playbooks/([a-z_]+)\.yml", table))
    names |= set(re.findall(r"^\| `([a-z_]+)\.yml", table, re.M))
    names |= set(re.findall(r"`gpufleet\.kimi_k3\.([a-z_]+) ", table))
    return names


def test_readme_layout_lists_every_role():
    assert readme_layout_roles(_read("README.md")) == _dirs("roles")


def test_architecture_names_every_role():
    assert architecture_roles(_read("docs", "dev", "architecture.md")) == _dirs("roles")


def test_readme_playbook_table_names_every_playbook():
    on_disk = {f[:-4] for f in os.listdir(os.path.join(REPO, "playbooks")) if f.endswith(".yml")}
    assert readme_playbooks(_read("README.md")) == on_disk


def test_the_parsers_see_a_missing_role():
    text = "## Layout\n\n`roles/` (plan, smoke)\n## Next\n"
    assert readme_layout_roles(text) == {"plan", "smoke"}
    arch = "## Names\n\n  | role | job |\n  | --- | --- |\n  | `plan` | x |\n\n## Local\n| `other` | y |\n"
    assert architecture_roles(arch) == {"plan"}
