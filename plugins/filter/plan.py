# -*- coding: utf-8 -*-
# Copyright: gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the plan role (thin wrappers around module_utils.plan_contract).

Documentation: plan_problem.yml, plan_problems.yml and plan_complete.yml beside this file (one page per filter).
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils import plan_contract
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils import recipe_data
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.templated import to_plain

# The inventory variables plan_contract.complete may fall back on (temporary, see its docstring).
_FALLBACK_VARS = tuple(plan_contract.PREFIX + k for k in (
    "docker_host", "model_revision", "model_cache_dir", "served_model_name", "api_host", "api_port", "master_port",
    "dp_rpc_port"))


def plan_problem(plan_result, host):
    """'' when ``plan_result`` holds a complete plan for ``host``, else what is wrong and what to do."""
    host = str(host)
    plans = plan_result.get("plans") if plan_result and hasattr(plan_result, "get") else None
    if plans and host in plans:
        # Only this host's plan is converted (once per host: converting the whole cluster's plan_result on every
        # host is quadratic in the number of nodes); require() sees the same plan.
        plan_result = {"plans": {host: to_plain(plans[host])}}
    try:
        plan_contract.require(to_plain(plan_result) if plan_result else None, host)
    except ValueError as exc:
        return str(exc)
    return ""


def plan_problems(plan_result, hosts):
    """[plan_problem(plan_result, host) for every host with a problem]: the require check of a whole play, once."""
    return [p for p in (plan_problem(plan_result, h) for h in hosts) if p]


def plan_complete(plan_result, hostvars, recipe="kimi_k3"):
    """``plan_result`` with the contract keys every role reads filled in where the plan lacks them."""
    if not isinstance(plan_result, dict) and not hasattr(plan_result, "items"):
        raise AnsibleFilterError("plan_complete expects the cluster_plan result")
    defaults = recipe_data.load_recipe(recipe).get("defaults") or {}

    def host_vars(host):
        hv = hostvars[host]
        return dict((k, to_plain(hv[k])) for k in _FALLBACK_VARS if k in hv)

    return plan_contract.complete(to_plain(plan_result), host_vars, defaults)


class FilterModule(object):
    def filters(self):
        return {"plan_problem": plan_problem, "plan_problems": plan_problems, "plan_complete": plan_complete}
