"""Every secret option of every argument spec is declared no_log (issue #39): the roles' meta/argument_specs.yml
(every entry point), the modules' argument_spec (as main() hands it to AnsibleModule) and the action plugins'
specs. A secret-looking name is judged by its last words; a value from a fixed set (choices) or of a type that
cannot hold a secret (bool, int, float, path) is not one, and an option with suboptions is covered when each of
its secret suboptions is no_log."""
import glob
import importlib
import os
import re

import pytest
import yaml

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.actions import specs as action_specs

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SECRET_NAME = re.compile(r"(?:^|_)(?:token|password|passwd|passphrase|secrets?|credentials?|key|secrets?_values)$",
                         re.I)
NOT_SECRET_TYPES = ("bool", "int", "float", "path")


def looks_secret(name, spec):
    return bool(SECRET_NAME.search(name)) and not spec.get("choices") and spec.get("type") not in NOT_SECRET_TYPES


def unprotected(name, spec, path=""):
    """The secret-looking options under (and including) ``name`` that are not no_log; [] when protected."""
    spec, where = spec or {}, path + name
    if spec.get("no_log") is True:
        return []
    subs = spec.get("options") or {}
    if subs:
        found = [w for n, s in subs.items() for w in unprotected(n, s, where + ".")]
        covered = any(looks_secret(n, s or {}) for n, s in subs.items())
        return found if covered or not looks_secret(name, spec) else found + [where]
    return [where] if looks_secret(name, spec) else []


def role_specs():
    for path in sorted(glob.glob(os.path.join(REPO, "roles", "*", "meta", "argument_specs.yml"))):
        role = path.split(os.sep)[-3]
        with open(path) as handle:
            doc = yaml.safe_load(handle) or {}
        for entry, spec in (doc.get("argument_specs") or {}).items():
            yield "roles/%s:%s" % (role, entry), spec.get("options") or {}


class _Captured(Exception):
    pass


def module_specs():
    """The argument_spec each module's main() passes to AnsibleModule (stopped right there)."""
    for path in sorted(glob.glob(os.path.join(REPO, "plugins", "modules", "*.py"))):
        name = os.path.basename(path)[:-3]
        module = importlib.import_module("ansible_collections.gpufleet.kimi_k3.plugins.modules." + name)
        if not hasattr(module, "AnsibleModule"):
            continue  # documentation of an action plugin: action_specs holds its spec
        seen = {}

        def capture(argument_spec=None, **_kwargs):
            seen["spec"] = argument_spec
            raise _Captured()

        original, module.AnsibleModule = module.AnsibleModule, capture
        try:
            module.main()
        except _Captured:
            pass
        finally:
            module.AnsibleModule = original
        yield "plugins/modules/%s" % name, seen["spec"]


def action_plugin_specs():
    for name in sorted(vars(action_specs)):
        value = getattr(action_specs, name)
        if name.isupper() and isinstance(value, dict) and all(isinstance(v, dict) for v in value.values()):
            yield "plugin_utils/actions/specs.%s" % name, value


ALL_SPECS = list(role_specs()) + list(module_specs()) + list(action_plugin_specs())


@pytest.mark.parametrize("where, options", ALL_SPECS, ids=[w for w, _o in ALL_SPECS])
def test_every_secret_option_is_no_log(where, options):
    missing = [w for n, s in options.items() for w in unprotected(n, s)]
    assert missing == [], "%s: declare no_log: true on %s" % (where, ", ".join(missing))


def test_the_walk_sees_the_secret_options_of_the_collection():
    """The rule is not vacuous: the secrets the roles and modules take are found, and found protected."""
    secret = set()
    for where, options in ALL_SPECS:
        for name, spec in options.items():
            if looks_secret(name, spec or {}) or any(looks_secret(n, s or {})
                                                     for n, s in ((spec or {}).get("options") or {}).items()):
                secret.add("%s:%s" % (where.split(":")[0], name))
    assert {"roles/launch:launch_secret_values", "roles/router:router_secret_values",
            "roles/weights:weights_hf_token", "roles/node_secrets:node_secrets_values",
            "roles/image:image_registry_credentials", "plugins/modules/hf_stage:token"} <= secret
    assert any(s.endswith(":api_key") for s in secret)


@pytest.mark.parametrize("name, spec, found", [
    ("x_token", {"type": "str"}, True), ("x_secret_values", {"type": "dict"}, True),
    ("registry_credentials", {"type": "list"}, True), ("api_key", {}, True), ("x_password", {}, True),
    ("x_max_tokens", {"type": "int"}, False), ("x_keyfile", {"type": "str"}, False),
    ("x_key", {"type": "str", "choices": ["a", "b"]}, False), ("x_key_path", {"type": "path"}, False),
    ("x_secrets_dir", {"type": "str"}, False),
])
def test_the_secret_name_rule(name, spec, found):
    assert looks_secret(name, spec) is found
