"""A module's DOCUMENTATION with the options of the collection's doc fragments merged in, as ansible-doc merges
them (the ansible.builtin fragments the modules use carry attributes only, no options)."""
import importlib

import yaml

PREFIX = "gpufleet.kimi_k3."


def module_doc(module):
    """The parsed DOCUMENTATION of ``module`` (a module object); ``options`` includes the fragments' options."""
    doc = yaml.safe_load(module.DOCUMENTATION)
    options = dict(doc.get("options") or {})
    for fragment in doc.get("extends_documentation_fragment") or []:
        if fragment.startswith(PREFIX):  # gpufleet.kimi_k3.<fragment>[.<variable>]
            frag_name, _dot, var = fragment[len(PREFIX):].partition(".")
            frag = importlib.import_module("ansible_collections.gpufleet.kimi_k3.plugins.doc_fragments." + frag_name)
            text = getattr(frag.ModuleDocFragment, var.upper() or "DOCUMENTATION")
            options.update(yaml.safe_load(text).get("options") or {})
    doc["options"] = options
    return doc
