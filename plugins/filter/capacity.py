# -*- coding: utf-8 -*-
# Copyright: gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the capacity role (thin wrappers around module_utils.capacity.curve).

Documentation: capacity_restart.yml, capacity_values.yml, capacity_refusal.yml and capacity_endpoint.yml beside this
file.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.capacity import curve as capacity
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import capacity_check
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.actions.templated import to_plain
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import handover as plan_handover


def capacity_restart(models_result, wanted):
    result = to_plain(models_result or {})
    return capacity.restart_decision(result.get("status"), result.get("json"), wanted)


def capacity_values(values, models_result=None):
    result = to_plain(models_result or {})
    running = capacity.running_max_model_len(result.get("status"), result.get("json"))
    return capacity.curve_values(to_plain(values or []), running)


def _tri_state(served):
    """True, False or None (not launched); a template may hand None over as the text "None"."""
    if served is None or isinstance(served, bool):
        return served
    return {"none": None, "": None, "true": True, "false": False}.get(str(served).strip().lower(), bool(served))


def capacity_refusal(plan_cluster, value, served=None, log_text="", deployment=None):
    cap = capacity_check.deployment_capacity(to_plain(plan_cluster or {}), deployment)
    return capacity_check.point_refusal(cap, int(value), _tri_state(served), str(log_text or ""))


def capacity_endpoint(plan_result, base_url=""):
    return plan_handover.measured_endpoint(to_plain(plan_result or {}), to_plain(base_url or ""))


class FilterModule(object):
    def filters(self):
        return {"capacity_restart": capacity_restart, "capacity_values": capacity_values,
                "capacity_refusal": capacity_refusal, "capacity_endpoint": capacity_endpoint}
