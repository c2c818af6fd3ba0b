# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""next_steps filter: the closing summary of the plan, preflight and deploy playbooks
(plugin_utils.summary.next_steps)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: next_steps
author: gpufleet maintainers (@gpufleet)
version_added: 0.1.0
short_description: Closing summary of a playbook run - reports written, endpoint, what to run next
description:
  - Lines naming the artifacts directory, the plan files, the reports of O(stage) that exist on the controller,
    the endpoint URLs of the plan (deploy) and the next command to run.
options:
  _input:
    description: C(plan_result) of the gpufleet.kimi_k3.plan role.
    type: dict
    required: true
  stage:
    description: Which playbook ends.
    type: str
    choices: [plan, preflight, deploy]
    required: true
  artifacts_dir:
    description: The artifacts directory (C(lookup('gpufleet.kimi_k3.artifacts_dir'))).
    type: path
    required: true
  inventory:
    description: The inventory the run used (first of C(ansible_inventory_sources)), for the next command.
    type: path
  run_tags:
    description: C(ansible_run_tags); a deploy run limited to C(plan)/C(preflight) ends like those playbooks.
    type: list
    elements: str
"""

EXAMPLES = r"""
- name: Summary
  ansible.builtin.debug:
    msg: "{{ plan_result | gpufleet.kimi_k3.next_steps('deploy', lookup('gpufleet.kimi_k3.artifacts_dir'),
             ansible_inventory_sources | first, ansible_run_tags) }}"
"""

RETURN = r"""
_value:
  description: Summary lines.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.summary import next_steps as _next_steps
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.actions.templated import plain_view, to_plain


def next_steps(plan_result, stage, artifacts_dir, inventory=None, run_tags=None):
    try:
        return _next_steps.summary(stage, plain_view(plan_result), str(artifacts_dir),
                                   str(inventory) if inventory else None, run_tags=to_plain(run_tags))
    except ValueError as exc:
        raise AnsibleFilterError("next_steps: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"next_steps": next_steps}
