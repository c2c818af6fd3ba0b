"""The plan is the single source of truth: no role or playbook reads a kimi_k3_* inventory variable
that the plan already resolved - they read plan_result.plans[inventory_hostname] / plan_result.cluster.

Reads are kimi_k3_* names inside Jinja (``{{ ... }}`` and the bare expressions of when/that/loop/...). Setting a
variable (a YAML key, e.g. ``plan_overrides: {kimi_k3_max_model_len: ...}``) and naming one in a message or a
comment are not reads. Files under meta/ are documentation.
"""
import glob
import os
import re

import yaml

from tests.helpers.runner import REPO

# Not resolved into the plan: secrets (the plan records their presence only) and the controller's output directory.
NOT_IN_PLAN = {"kimi_k3_api_key", "kimi_k3_hf_token", "kimi_k3_artifacts_dir"}
# Files that still read resolved variables; remove an entry when its file is fixed: a stale entry fails the test
# below. (Empty: every role and playbook reads the plan.)
KNOWN = {}
BARE = {"when", "that", "failed_when", "changed_when", "until", "loop", "with_items"}
JINJA = re.compile(r"{{(.*?)}}|{%(.*?)%}", re.S)
NAME = re.compile(r"\bkimi_k3_[a-z0-9_]+")


def expressions(node, key=None):
    """Every Jinja expression in a parsed YAML document."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from expressions(v, k)
    elif isinstance(node, list):
        for v in node:
            yield from expressions(v, key)
    elif isinstance(node, str):
        if key in BARE:
            yield node
        for m in JINJA.finditer(node):
            yield m.group(1) or m.group(2)


def reads(path):
    with open(path) as handle:
        docs = list(yaml.safe_load_all(handle))
    found = set()
    for doc in docs:
        for expr in expressions(doc):
            found.update(NAME.findall(expr))
    return found - NOT_IN_PLAN


def files():
    out = glob.glob(os.path.join(REPO, "roles", "*", "*", "*.yml")) + glob.glob(os.path.join(REPO, "playbooks", "*.yml"))
    return sorted(os.path.relpath(p, REPO) for p in out if "/meta/" not in p)


def test_no_role_or_playbook_reads_a_variable_the_plan_resolved():
    offenders = {}
    for rel in files():
        found = reads(os.path.join(REPO, rel)) - KNOWN.get(rel, set())
        if found:
            offenders[rel] = sorted(found)
    assert offenders == {}, "read plan_result.plans[inventory_hostname] / plan_result.cluster instead: %s" % offenders


def test_known_exceptions_are_not_stale():
    stale = dict((rel, sorted(names - reads(os.path.join(REPO, rel)))) for rel, names in KNOWN.items()
                 if names - reads(os.path.join(REPO, rel)))
    assert stale == {}, "these files no longer read these variables - remove them from KNOWN: %s" % stale


def test_the_detector_sees_reads_and_ignores_settings(tmp_path):
    p = tmp_path / "t.yml"
    p.write_text("- name: x\n  ansible.builtin.debug:\n    msg: \"{{ kimi_k3_model | default('m') }} kimi_k3_image\"\n"
                 "  when: kimi_k3_strategy == 'x'\n  vars:\n    plan_overrides: {kimi_k3_max_model_len: 8}\n"
                 "    key: \"{{ kimi_k3_api_key }}\"\n")
    assert reads(str(p)) == {"kimi_k3_model", "kimi_k3_strategy"}
