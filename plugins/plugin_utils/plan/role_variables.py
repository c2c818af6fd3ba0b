# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Role variables an operator sets in the inventory, checked by the plan before any host is contacted.

A role variable's one declaration is its role's ``meta/argument_specs.yml`` (type, elements, choices, suboptions,
default, meaning; the role validates it when it runs). The plan reads the same declarations and validates every
role variable the inventory sets on a vllm_cluster or vllm_router host with Ansible's own ArgumentSpecValidator,
then runs the checks a role makes of the value against the plan (an image mirror rewrite, the registry logins a
pull needs, a controller CA file): the operator learns of them before the first host is contacted, not after the
nodes have been probed.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import difflib
import glob
import os
import re

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.errors import UnsupportedError

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.weights import integrity as weights_integrity
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.image import reference as image_ref
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import recipe_data
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import redaction
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import variables as plan_variables

_COLLECTION_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
ROLES_DIR = os.path.join(_COLLECTION_ROOT, "roles")
_CACHE = {}


def role_options(roles_dir=ROLES_DIR):
    """{variable: (role, its argument spec)} over every role's ``main`` entry point."""
    if roles_dir not in _CACHE:
        out = {}
        for path in sorted(glob.glob(os.path.join(roles_dir, "*", "meta", "argument_specs.yml"))):
            role = os.path.basename(os.path.dirname(os.path.dirname(path)))
            doc = recipe_data.load_yaml(path) or {}
            options = (((doc.get("argument_specs") or {}).get("main") or {}).get("options") or {})
            for name, spec in options.items():
                out[name] = (role, spec)
        _CACHE[roles_dir] = out
    return _CACHE[roles_dir]


def _task_names(tasks):
    """Names a list of tasks gives variables: ``register`` and ``set_fact`` keys, blocks included."""
    out = set()
    for task in tasks if isinstance(tasks, list) else []:
        if not isinstance(task, dict):
            continue
        if isinstance(task.get("register"), str):
            out.add(task["register"])
        for key in ("ansible.builtin.set_fact", "set_fact"):
            if isinstance(task.get(key), dict):
                out.update(k for k in task[key] if k != "cacheable")
        for key in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks"):
            out |= _task_names(task.get(key))
    return out


def internal_names(roles_dir=ROLES_DIR):
    """Variables the collection's own roles and playbooks register or set while they run: at plan time in a later
    play (an upgrade's rollback re-plans) they are in hostvars, and are none of the inventory's mistakes."""
    key = ("internal", roles_dir)
    if key not in _CACHE:
        root = os.path.dirname(roles_dir)
        out = set()
        for path in sorted(glob.glob(os.path.join(roles_dir, "*", "tasks", "*.yml"))
                           + glob.glob(os.path.join(root, "playbooks", "*.yml"))):
            out |= _task_names(recipe_data.load_yaml(path))
        _CACHE[key] = out
    return _CACHE[key]


SECRET_WORDS = ("secret", "token", "password", "credential")


def _hides_value(name, spec):
    """Whether the value may be a secret: the validator's message (which can quote the value) is not shown."""
    return bool(spec.get("no_log")) or any(w in name.lower() for w in SECRET_WORDS) or any(
        _hides_value(n, s) for n, s in (spec.get("options") or {}).items())


def _spec_secrets(value, spec):
    """The parts of ``value`` its spec declares no_log (the whole value, or suboptions at any depth)."""
    if spec.get("no_log"):
        return redaction.leaves(value)
    suboptions = spec.get("options") or {}
    items = value if isinstance(value, list) else [value]
    return [s for item in items if isinstance(item, dict) for name, sub in suboptions.items() if name in item
            for s in _spec_secrets(item[name], sub or {})]


def _spec_for_given(spec):
    """The option's spec for validating a value that is set: no top-level required/default."""
    spec = copy.deepcopy(spec)
    spec.pop("required", None)
    spec.pop("default", None)
    return spec


def _validation_errors(name, value, spec):
    """ArgumentSpecValidator's errors of one value, as (message, names only: the message quotes no value)."""
    try:
        errors = ArgumentSpecValidator({name: _spec_for_given(spec)}).validate({name: value}).errors
    except (OverflowError, ValueError) as exc:  # ansible-core's int check reads "INF" as a float and raises
        return [("%s cannot be converted to %s: %s" % (name, spec.get("type", "str"), exc), False)]
    return [(str(e), isinstance(e, UnsupportedError)) for e in errors]


def _type_problem(host, name, value, role, spec):
    errors = _validation_errors(name, value, spec)
    if not errors:
        return None
    # A key the spec does not take is named (a misspelt 'pasword'): the message holds key names, no value.
    unsupported = next((m for m, names_only in errors if names_only), None)
    fix = "set %s as roles/%s/meta/argument_specs.yml declares it (docs: ansible-doc -t role gpufleet.kimi_k3.%s)." % (
        name, role, role)
    if unsupported:
        key, supported = (unsupported.split(". ", 1) + [""])[:2]
        verb = "are not keys" if "," in key else "is not a key"
        message = "%s %s role %s takes (%s)" % (key, verb, role, supported.rstrip(".").lower())
        fix = _renames(key, supported) + fix
    elif _hides_value(name, spec):
        message = "is not what role %s takes (%s)" % (role, spec.get("type", "str"))
    else:
        message = _plain_types(" ".join(errors[0][0].split()))
    return _problem(host, name, message.rstrip(".") + ".", fix)


def _renames(keys, supported):
    """'rename pasword to password; ' for each unsupported key (validator text ``a.pasword, a.usr``) close to a
    supported one (``Supported parameters include: password, registry, username.``); key names only."""
    names = [n.strip() for n in supported.split(":", 1)[-1].rstrip(".").split(",") if n.strip()]
    out = []
    for key in (k.strip().rsplit(".", 1)[-1] for k in keys.split(",")):
        close = difflib.get_close_matches(key.lower(), names, n=1, cutoff=0.6)
        if close:
            out.append("rename %s to %s" % (key, close[0]))
    return "; ".join(out) + ("; otherwise " if out else "")


def _plain_types(message):
    """The validator's wording of every supported ansible-core: 2.17 says "of type <class 'str'>", later ones "of
    type str"."""
    return re.sub(r"<class '(\w+)'>", r"\1", message)


def _problem(host, variable, message, fix):
    return {"host": host, "variable": variable, "message": message, "fix": fix}


def _mirror_problem(host, value, node_vars, plan):
    image = (plan or {}).get("image")
    if not image:
        return None
    verdict = image_ref.image_mirror(image, value, allow_unpinned=True)
    if verdict["problem"] is None:
        return None
    return _problem(host, "image_mirror", "%s." % verdict["problem"].rstrip("."),
                    "map a repository to a repository (docker.io/vllm/vllm-openai: harbor.example/mirror/vllm-openai)"
                    " or a prefix ending in / to a prefix ending in / (docs/image.md).")


def _credentials_problem(host, value, node_vars, plan):
    image = (plan or {}).get("image")
    if not image:
        return None
    source = image_ref.image_mirror(image, node_vars.get("image_mirror") or {}, allow_unpinned=True)
    verdict = image_ref.registry_logins(value, source["pull"])
    if verdict["problem"] is None:
        return None
    return _problem(host, "image_registry_credentials", "%s." % verdict["problem"].rstrip("."),
                    "give every entry registry, username and password (the password from a vault).")


def _controller_file_problem(name):
    def check(host, value, node_vars, plan):
        if not value or os.path.isfile(os.path.expanduser(str(value))):
            return None
        return _problem(host, name, "%r is not a file on the controller." % (value,),
                        "set %s to the CA bundle's path on the controller (empty: the system CAs)." % name)
    return check


def _image_strings_problem(host, value, node_vars, plan):
    """A custom smoke image needs the strings its transcription must contain: without them the vision group could
    only check for a non-empty answer, which any broken vision tower gives (the smoke refuses the group too)."""
    if not value or node_vars.get("smoke_image_expected_strings"):
        return None
    return _problem(host, "smoke_image", "%r comes without smoke_image_expected_strings: the vision group could not "
                    "judge its transcription." % (value,),
                    "set smoke_image_expected_strings to strings the image's text contains (e.g. [NORTHWIND, "
                    "'18.09']), or leave smoke_image empty for the shipped receipt.")


def _weights_token_problem(host, node_vars, plan):
    """A Hugging Face token the weights role would send over plain http off loopback (module_utils.weights.integrity's
    rule, which the node applies too): refused here, before any host is contacted. The role's defaults: the endpoint
    is HF_ENDPOINT of the controller's environment, else the Hub; the token is kimi_k3_hf_token."""
    if not plan or plan.get("router"):
        return None
    if "weights_hf_token" in node_vars:
        has_token = bool(node_vars["weights_hf_token"])
    else:
        has_token = "HF_TOKEN" in (plan.get("secret_env") or [])
    from_env = not node_vars.get("weights_hf_endpoint") and bool(os.environ.get("HF_ENDPOINT"))
    endpoint = node_vars.get("weights_hf_endpoint") or os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    if not has_token or weights_integrity.token_allowed(endpoint):
        return None
    variable = "weights_hf_endpoint"
    message = weights_integrity.token_transport_problem(
        endpoint, "HF_ENDPOINT (the default of weights_hf_endpoint)" if from_env else variable)
    return _problem(host, variable, message + ".",
                    "set %s to an https:// URL (or an http://127.x / localhost mirror on the node), or leave "
                    "kimi_k3_hf_token / weights_hf_token unset for a public mirror (docs/weights.md)." % variable)


# Checks of a value against the plan or the controller, by variable (the role makes the same check when it runs).
SEMANTIC_CHECKS = {
    "smoke_image": _image_strings_problem,
    "image_mirror": _mirror_problem,
    "image_registry_credentials": _credentials_problem,
    "smoke_ca_path": _controller_file_problem("smoke_ca_path"),
    "capacity_ca_path": _controller_file_problem("capacity_ca_path"),
    "monitoring_ca_file": _controller_file_problem("monitoring_ca_file"),
}
ROLE_PREFIXES = ("image_", "launch_", "smoke_", "router_", "weights_", "capacity_", "preflight_", "teardown_",
                 "monitoring_", "upgrade_")


def _unknown_problem(host, name, options):
    close = difflib.get_close_matches(name, list(options), n=1, cutoff=0.85)
    if not close:
        return None
    return _problem(host, name, "is not a variable of role %s." % options[close[0]][0],
                    "did you mean %s? (roles/%s/meta/argument_specs.yml)" % (close[0], options[close[0]][0]))


def host_problems(host, node_vars, plan, options):
    """Problems of the role variables set on one host (``node_vars``: its variables, templated)."""
    out, internal = [], internal_names()
    for name in sorted(node_vars):
        if name not in options:
            issue = (_unknown_problem(host, name, options) if name.startswith(ROLE_PREFIXES)
                     and name not in internal else None)
            out += [issue] if issue else []
            continue
        role, spec = options[name]
        issue = _type_problem(host, name, node_vars[name], role, spec)
        if issue is None and name in SEMANTIC_CHECKS:
            issue = SEMANTIC_CHECKS[name](host, node_vars[name], node_vars, plan)
        out += [issue] if issue else []
    if not any(p["variable"] in ("weights_hf_endpoint", "weights_hf_token") for p in out):
        issue = _weights_token_problem(host, node_vars, plan)
        out += [issue] if issue else []
    return out


def role_variable_problems(hosts, plans, roles_dir=ROLES_DIR):
    """Problems of every host's role variables; ``hosts``: [(host, {role variable: value})]. A value every host
    shares (group_vars/all) is reported once. The problems pass the plan's redaction: a variable whose spec hides
    its value (no_log, a secret's name) is a secret as a whole."""
    options, seen, out = role_options(roles_dir), set(), []
    # first: the validator and the redaction's search for secrets walk every leaf (an alias bomb's 10^6)
    oversized = plan_variables.size_problems([{"host": h, "vars": v} for h, v in hosts], judged=lambda n: n in options)
    if oversized:
        return oversized
    for host, node_vars in hosts:
        for issue in host_problems(host, node_vars, plans.get(host), options):
            key = (issue["variable"], issue["message"])
            if key not in seen:
                seen.add(key)
                out.append(issue)
    secrets = redaction.inventory_secrets(recipe_data.load_recipe(), [v for _h, v in hosts])
    secrets.update(s for _h, v in hosts for name in v if name in options
                   for s in _spec_secrets(v[name], options[name][1]))
    return redaction.redact_problems(out, secrets)
