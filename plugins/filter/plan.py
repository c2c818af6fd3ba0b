# -*- coding: utf-8 -*-
# Copyright: gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the plan role (thin wrappers around plugin_utils.plan.contract).

Documentation: plan_problem.yml and plan_problems.yml beside this file (one page per filter).
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import contract as plan_contract
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.actions.templated import to_plain


def plan_problem(plan_result, host):
    """'' when ``plan_result`` holds ``host``'s plan and the cluster summary with every contract key of its type,
    else what is wrong and what to do."""
    host = str(host)
    plans = plan_result.get("plans") if plan_result and hasattr(plan_result, "get") else None
    if plans and host in plans:
        # Only this host's plan is converted, and the cluster summary is checked as it is (top-level types): the
        # check runs on every host, and converting the whole plan_result each time is quadratic in the nodes.
        plan_result = {"plans": {host: to_plain(plans[host])}, "cluster": plan_result.get("cluster")}
    else:
        plan_result = to_plain(plan_result) if plan_result else None
    try:
        plan_contract.require(plan_result, host)
    except ValueError as exc:
        return str(exc)
    return ""


def plan_problems(plan_result, hosts):
    """[plan_problem(plan_result, host) for every host with a problem]: the require check of a whole play, once."""
    return [p for p in (plan_problem(plan_result, h) for h in hosts) if p]


class FilterModule(object):
    def filters(self):
        return {"plan_problem": plan_problem, "plan_problems": plan_problems}
