# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters used by the launch role (thin wrappers around module_utils)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Documentation: one <filter>.yml beside this file per filter.

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.rollout import state as deploy_state
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.launch import watch as launch_watch
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.launch import secrets as secrets_utils


def launch_failure_summary(results, tail=40, log_dir=None):
    """One consolidated failure text from ``{host: vllm_wait result}``."""
    return launch_watch.failure_summary(dict(results), tail=int(tail), log_dir=log_dir)


def launch_culprit(results):
    """The host whose failure came first among ``{host: vllm_wait result}``."""
    return launch_watch.culprit(dict(results))


def launch_secrets(plan, node_dir, entrypoint):
    """``{env, volumes, entrypoint, files}`` that hand the plan's secrets to the container as read-only files."""
    if not isinstance(plan, dict):
        raise AnsibleFilterError("launch_secrets expects a node plan")
    return secrets_utils.container_secrets(plan, str(node_dir), list(entrypoint))


def launch_restart_reasons(plans, statuses, changed_hosts, kept_plans=None):
    """One line per node saying why the group restarts."""
    return deploy_state.restart_reasons(dict(plans), dict(statuses), list(changed_hosts), dict(kept_plans or {}))


def launch_cluster_report(plans, statuses, kept_plans, record):
    """Per-node status lines and drift from the inventory's plan (playbooks/status.yml)."""
    return deploy_state.cluster_report(dict(plans), dict(statuses), dict(kept_plans or {}), record)


class FilterModule(object):
    def filters(self):
        return {"launch_failure_summary": launch_failure_summary, "launch_culprit": launch_culprit,
                "launch_secrets": launch_secrets, "launch_restart_reasons": launch_restart_reasons,
                "launch_cluster_report": launch_cluster_report}
