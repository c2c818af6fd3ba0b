"""Every module's documentation as ansible-core merges its doc fragments (ansible.utils.plugin_docs.add_fragments,
the merge ansible-doc and validate-modules run): the shared attributes, the check-mode details the variants say
for several modules at once, and the container options documented once for the spec declared once."""
import importlib
import os

import pytest
import yaml
from ansible.utils.plugin_docs import add_fragments

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.engine import api as engine_api

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
MODULES = sorted(f[:-3] for f in os.listdir(os.path.join(REPO, "plugins", "modules")) if f.endswith(".py"))
ACTIONS = sorted(f[:-3] for f in os.listdir(os.path.join(REPO, "plugins", "action")) if f.endswith(".py"))
PACKAGES = {"gpufleet.kimi_k3.": "ansible_collections.gpufleet.kimi_k3.plugins.doc_fragments.",
            "ansible.builtin.": "ansible.plugins.doc_fragments."}


class FragmentLoader(object):
    """The part of ansible's fragment loader add_fragments uses: a fragment class by name, or None."""

    def get(self, name):
        for prefix, package in PACKAGES.items():
            if name.startswith(prefix):
                try:
                    module = importlib.import_module(package + name[len(prefix):])
                except ImportError:  # "<fragment>.<variable>": add_fragments retries without the variable
                    return None
                return type("Fragment", (module.ModuleDocFragment,), {"ansible_name": name})
        return None


def merged_doc(name):
    module = importlib.import_module("ansible_collections.gpufleet.kimi_k3.plugins.modules." + name)
    doc = yaml.safe_load(module.DOCUMENTATION)
    add_fragments(doc, module.__file__, fragment_loader=FragmentLoader(), is_module=True)
    return doc


# the modules that show --diff (their own diff_mode attribute overrides the shared "none")
DIFF = {"site_files", "cluster_plan"}


@pytest.mark.parametrize("name", MODULES)
def test_every_module_has_the_shared_attributes_and_says_what_it_does_in_check_mode(name):
    attrs = merged_doc(name)["attributes"]
    assert attrs["check_mode"]["support"] == "full" and attrs["check_mode"]["description"]
    assert attrs["check_mode"]["details"].strip()
    assert attrs["diff_mode"]["support"] == ("full" if name in DIFF else "none") and attrs["platform"]["platforms"] == "posix"
    assert ("action" in attrs) == (name in ACTIONS)
    if name in ACTIONS:
        assert attrs["action"]["support"] == "full" and attrs["bypass_host_loop"]["support"] == "none"


READ_ONLY = "Read-only; runs unchanged in check mode."
REPORT = "Judges and writes the report files in check mode as well; never reports a change."
VARIANTS = {"vllm_node_status": READ_ONLY, "vllm_container_log": READ_ONLY, "preflight_report": REPORT,
            "fabric_report": REPORT}


@pytest.mark.parametrize("name,details", sorted(VARIANTS.items()))
def test_the_variants_give_their_modules_the_shared_check_mode_details(name, details):
    assert merged_doc(name)["attributes"]["check_mode"]["details"] == details


def _spec_of(option):
    """An option's documentation in argument_spec terms (type, default, required, suboptions)."""
    out = {"type": option.get("type", "str"), "default": option.get("default"),
           "required": bool(option.get("required"))}
    if "suboptions" in option:
        out["options"] = dict((k, _spec_of(v)) for k, v in option["suboptions"].items())
    return out


def _declared(spec):
    out = {"type": spec.get("type", "str"), "default": spec.get("default"), "required": bool(spec.get("required"))}
    if "options" in spec:
        out["options"] = dict((k, _declared(v)) for k, v in spec["options"].items())
    return out


@pytest.mark.parametrize("name", ["vllm_node_status", "vllm_container_log", "vllm_wait", "fabric_wait"])
def test_the_container_options_are_documented_as_the_engine_spec_declares_them(name):
    options = merged_doc(name)["options"]
    spec = engine_api.container_spec()
    assert dict((k, _spec_of(options[k])) for k in spec) == dict((k, _declared(v)) for k, v in spec.items())
    assert options["docker_client"]["type"] == "dict" and sorted(options["docker_client"]["suboptions"]) == sorted(
        ["tls", "validate_certs", "ca_path", "client_cert", "client_key", "use_ssh_client"])


def test_node_probe_gets_the_client_options_alone():
    options = merged_doc("node_probe")["options"]
    assert "docker_client" in options and "container" not in options
    assert options["docker_host"]["required"] is True  # its own: the plan's, never a default
