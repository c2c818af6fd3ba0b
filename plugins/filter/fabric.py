# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter of the fabric role (a thin wrapper around plugin_utils.fabric.specs). Documentation: fabric_specs.yml.
The judgement is the fabric_report action."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.fabric import specs as fabric
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import recipe_data
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.actions.templated import to_plain


def fabric_specs(plan_result, hosts=None, options=None, recipe="kimi_k3"):
    """{deployments, specs} of the fabric job for every deployment of ``hosts`` (computed once, run_once)."""
    data = (recipe_data.load_recipe(recipe) or {}).get("fabric")
    if not data:
        raise AnsibleFilterError("fabric_specs: the recipe %s has no fabric section" % recipe)
    try:
        return fabric.build_specs(to_plain(plan_result or {}), data, to_plain(options or {}),
                                  [str(h) for h in hosts] if hosts is not None else None)
    except fabric.FabricSpecError as exc:
        raise AnsibleFilterError(str(exc))
    except (KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError("fabric_specs: the plan lacks %s - run the gpufleet.kimi_k3.plan role first" % exc)


class FilterModule(object):
    def filters(self):
        return {"fabric_specs": fabric_specs}
