# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters used by the upgrade role (thin wrappers around plugin_utils/rollout/transitions.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Documentation: one <filter>.yml beside this file per filter.

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.rollout import transitions as rollout


def upgrade_outcome(hosts, target_image, previous_image):
    """What the finish phase of an upgrade does, from the facts the launch and smoke phases left on the hosts."""
    hosts = list(hosts or [])
    if not all(isinstance(h, Mapping) for h in hosts):
        raise AnsibleFilterError("upgrade_outcome expects the cluster hosts' variables "
                                 "(groups['vllm_cluster'] | map('extract', hostvars))")
    return rollout.outcome(hosts, str(target_image), str(previous_image))


def upgrade_rollback_target(record, head_image):
    """``{image, plan_id}`` an upgrade rolls back to (the state record's deployed plan, else the head's image)."""
    if record is not None and not isinstance(record, Mapping):
        raise AnsibleFilterError("upgrade_rollback_target expects the deployment state record (deployment_state's "
                                 "state) or none")
    return rollout.rollback_target(record, head_image)


class FilterModule(object):
    def filters(self):
        return {"upgrade_outcome": upgrade_outcome, "upgrade_rollback_target": upgrade_rollback_target}
