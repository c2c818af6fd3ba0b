"""The documentation-only module files of the controller-side actions describe exactly the arguments their action
validates (plugin_utils/actions/specs.py): names, types, defaults, choices, required, list elements.

validate-modules makes this comparison for modules that call AnsibleModule; these files hold only documentation
(like ansible.builtin.debug), so the comparison lives here."""
import importlib

import pytest
import yaml

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.actions import specs as action_specs
from tests.helpers.module_docs import module_doc

ACTIONS = {"cluster_plan": action_specs.CLUSTER_PLAN, "cluster_layouts": action_specs.CLUSTER_LAYOUTS, "preflight_report": action_specs.PREFLIGHT_REPORT,
           "vllm_wait": action_specs.VLLM_WAIT, "fabric_wait": action_specs.FABRIC_WAIT, "deployment_state": action_specs.DEPLOYMENT_STATE,
           "monitoring_config": action_specs.MONITORING_CONFIG,
           "fabric_report": action_specs.FABRIC_REPORT, "site_files": action_specs.SITE_FILES}


def documented_options(name):
    module = importlib.import_module("ansible_collections.gpufleet.kimi_k3.plugins.modules." + name)
    return module, module_doc(module)["options"]


@pytest.mark.parametrize("name", sorted(ACTIONS))
def test_documentation_is_the_actions_argument_spec(name):
    module, options = documented_options(name)
    spec = ACTIONS[name]
    assert sorted(options) == sorted(spec)
    for option, want in spec.items():
        doc = options[option]
        assert doc.get("type", "str") == want.get("type", "str"), option
        assert doc.get("default") == want.get("default"), option
        assert doc.get("choices") == want.get("choices"), option
        assert bool(doc.get("required")) == bool(want.get("required")), option
        assert doc.get("elements") == want.get("elements"), option
    yaml.safe_load(module.EXAMPLES)
    yaml.safe_load(module.RETURN)


@pytest.mark.parametrize("name", sorted(ACTIONS))
def test_the_module_file_is_documentation_only(name):
    """No main(): the action plugin is what runs (an AnsibleModule stub would be a second copy of the spec)."""
    module, _options = documented_options(name)
    assert not hasattr(module, "main")
