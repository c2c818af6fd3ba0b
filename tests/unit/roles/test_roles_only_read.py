"""Roles read the plan; they do not compute what the plan could hand over. Every line of roles/ (task files,
defaults, vars, handlers, templates) and playbooks/ is scanned for Jinja that builds a URL from a plan value,
rewrites one, parses the plan's environment strings back into settings, or applies the image mirror (the plan hands
over image_pull). A line that must stay would be listed in KNOWN with the reason it is still there: a new one fails
the test, and so does a listed one that is gone (shrink the list)."""
import os
import re

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

# rule -> (pattern, lines it applies to)
RULES = {
    # "{{ x.api_url }}/health", "{{ x.api_url ~ '/v1' }}", "{{ x.api_url }}/{{ 'health' if y else 'liveness' }}": a
    # path joined onto an endpoint
    "url-join": (re.compile(r"""(~\s*['"]/[A-Za-z])|(\}\}/([A-Za-z]|\{\{))"""), re.compile(r"url", re.I)),
    # "{{ url | regex_replace('/+$', '') }}": an endpoint rewritten
    "url-rewrite": (re.compile(r"regex_replace|urlsplit|\|\s*replace\("), re.compile(r"url|endpoint", re.I)),
    # "{{ plan.env.VLLM_USE_X | default('0') == '1' }}": a setting parsed back out of the container's environment
    "env-parse": (re.compile(r"""\.env(\.[A-Z][A-Z0-9_]*|\[['"])"""), None),
    # the pull reference computed from the plan's image and the image_mirror rules: the filter, or the rules read
    "mirror-rewrite": (re.compile(r"gpufleet\.kimi_k3\.image_mirror\b|\{\{[^}]*\bimage_mirror\b"), None),
}

# (file, rule) -> (lines, why it is still computed in the role): none. The operator's own endpoint URLs
# (capacity_base_url) go through a filter on the plan's derivation (plan_handover.endpoint_urls), not Jinja.
KNOWN = {}

SUFFIXES = (".yml", ".yaml", ".j2")


def _lines(root):
    walked = [w for top in ("roles", "playbooks") for w in os.walk(os.path.join(root, top))]
    for base, _dirs, files in walked:
        if os.sep + "files" in base or os.sep + "meta" in base:
            continue  # shipped scripts and documentation, not Jinja
        for name in sorted(f for f in files if f.endswith(SUFFIXES)):
            path = os.path.join(base, name)
            with open(path) as handle:
                for number, line in enumerate(handle, 1):
                    if not line.lstrip().startswith("#"):
                        yield os.path.relpath(path, root).replace(os.sep, "/"), number, line


def offenders(root):
    """{(file, rule): [line numbers]} of every line that computes what the plan could hand over."""
    found = {}
    for rel, number, line in _lines(root):
        for rule, (pattern, scope) in RULES.items():
            if pattern.search(line) and (scope is None or scope.search(line)):
                found.setdefault((rel, rule), []).append(number)
    return found


def test_roles_compute_nothing_the_plan_could_hand_over():
    found = dict((key, len(lines)) for key, lines in offenders(REPO).items())
    new = dict((k, offenders(REPO)[k]) for k in found if k not in KNOWN or found[k] > KNOWN[k][0])
    assert not new, "Jinja in roles/ computes what the plan could hand over (file, rule): lines %s. Fix: add the " \
                    "value to the plan (plugins/plugin_utils/plan/handover.py) and read it." % new
    gone = [k for k in KNOWN if found.get(k, 0) < KNOWN[k][0]]
    assert not gone, "%s no longer compute(s) in Jinja: lower or remove its KNOWN entry" % gone


@pytest.mark.parametrize("line, rule", [
    ("    url: \"{{ plan.api_url ~ '/health' }}\"", "url-join"),
    ("    url: \"{{ item.url | regex_replace('/+$', '') }}/health\"", "url-join"),
    ("    health_urls: [\"{{ plan.api_url }}/{{ 'health' if up else 'liveness' }}\"]", "url-join"),
    ("    urls: \"{{ endpoints | map('regex_replace', '/*$', '/metrics') | list }}\"", "url-rewrite"),
    ("    v2: \"{{ smoke_plan.env.VLLM_USE_V2_MODEL_RUNNER | default('0') == '1' }}\"", "env-parse"),
    ("    image: \"{{ (p.image | gpufleet.kimi_k3.image_mirror(m)).pull }}\"", "mirror-rewrite"),
    ("    src: \"{{ p.image | gpufleet.kimi_k3.image_mirror }}\"", "mirror-rewrite"),
    ("    logins: \"{{ creds | my_logins(p.image, image_mirror) }}\"", "mirror-rewrite"),
])
def test_each_rule_sees_its_offender(tmp_path, line, rule):
    (tmp_path / "roles" / "r" / "tasks").mkdir(parents=True)
    (tmp_path / "roles" / "r" / "tasks" / "main.yml").write_text("---\n# " + line + "\n" + line + "\n")
    assert offenders(str(tmp_path))[("roles/r/tasks/main.yml", rule)] == [3]


@pytest.mark.parametrize("line", [
    "    url: \"{{ plan_result.plans[inventory_hostname].health_url }}\"",
    "    site_inventory_root: \"{{ site_collection_root }}/inventories\"",
    "    msg: \"{{ rows | map(attribute='url') | join(', ') }}\"",
    "    image: \"{{ launch_plan.image_pull.pull }}\"",
    "    url: \"{{ capacity_endpoint.health_url }}\"",
])
def test_reading_the_plan_is_no_offence(tmp_path, line):
    (tmp_path / "roles" / "r" / "defaults").mkdir(parents=True)
    (tmp_path / "roles" / "r" / "defaults" / "main.yml").write_text("---\n" + line + "\n")
    assert offenders(str(tmp_path)) == {}


def test_a_playbook_is_scanned_too(tmp_path):
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "playbooks" / "status.yml").write_text(
        "---\n- hosts: all\n  tasks:\n    - x:\n        url: \"{{ plan_result.plans[h].api_url ~ '/health' }}\"\n")
    assert offenders(str(tmp_path)) == {("playbooks/status.yml", "url-join"): [5]}
