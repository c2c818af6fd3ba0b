# -*- coding: utf-8 -*-
# Copyright: gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the capacity role (thin wrappers around module_utils.capacity).

Documentation: capacity_restart.yml and capacity_values.yml beside this file.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils import capacity
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.templated import to_plain


def capacity_restart(models_result, wanted):
    result = to_plain(models_result or {})
    return capacity.restart_decision(result.get("status"), result.get("json"), wanted)


def capacity_values(values):
    return capacity.curve_values(to_plain(values or []))


class FilterModule(object):
    def filters(self):
        return {"capacity_restart": capacity_restart, "capacity_values": capacity_values}
