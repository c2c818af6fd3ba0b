# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""One look at a node's container from an action plugin (vllm_wait, fabric_wait): vllm_node_status run on the node,
its result or why it could not be read. A miss is not a failure here: the callers count misses in a row."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleConnectionFailure


def read(action, module_args, task_vars):
    """(status, None) from gpufleet.kimi_k3.vllm_node_status, or (None, why) when the node or its engine did not
    answer."""
    try:
        status = action._execute_module(  # pylint: disable=protected-access
            module_name="gpufleet.kimi_k3.vllm_node_status", module_args=module_args, task_vars=task_vars)
    except AnsibleConnectionFailure as exc:
        return None, "node unreachable: %s" % exc
    if status.get("failed") or status.get("unreachable"):
        return None, status.get("msg")
    return status, None
