#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: deployment_state
short_description: Read or update the deployment state record on the controller
version_added: 0.1.0
description:
  - Action plugin, runs on the controller. The record is C(<plan_dir>/state.json); C(<plan_dir>/deployed) is a
    symlink to C(plans/<plan_id>/), the kept plan files of the deployed plan.
  - C(deployed) names the plan (id, image) that last became ready; C(upgrade) is set while an upgrade runs (from
    which digest to which, and its stage) and cleared when the new digest passed its smoke gate or the rollback is
    serving; C(last_run) tells whether the last launch became ready or failed, and why.
  - The upgrade operations are moves of the rollout state machine (C(plugins/plugin_utils/rollout/transitions.py));
    the state is
    C(idle) without an upgrade, else the upgrade's stage. A move the table does not hold (for example the smoke
    stage before the launch stage, or a second upgrade while one is in progress) fails naming the state, the move
    and the moves allowed from there, and leaves the record as it was.
  - The plan role writes every rendered plan to C(plans/<plan_id>/); a failed or interrupted run therefore never
    rewrites the deployed plan's files.
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.kimi_k3.attributes
  - gpufleet.kimi_k3.attributes.action
options:
  plan_dir:
    description: The plan role's plan directory (C(plan_result.dest)).
    type: path
    required: true
  op:
    description:
      - C(read) returns the record; C(ready) and C(failed) record the outcome of a launch of O(plan_id).
      - C(upgrade_begin) notes an upgrade (stage C(pull)); C(upgrade_stage) moves it to O(stage); C(upgrade_end)
        closes it after the smoke gate passed or the rollback serves; C(upgrade_recover) closes an interrupted one
        after the digest it started from was relaunched; C(upgrade_supersede) notes an upgrade (as
        C(upgrade_begin)) over an interrupted one the operator chose to ignore.
    type: str
    choices: [read, ready, failed, upgrade_begin, upgrade_stage, upgrade_end, upgrade_recover, upgrade_supersede]
    default: read
  plan_id:
    description: Plan id (C(plan_result.plan_id)) for C(ready) and C(failed).
    type: str
  image:
    description: Image reference of the plan for C(ready).
    type: str
  reason:
    description: Why the launch failed, for C(failed).
    type: str
  from_image:
    description: Digest running before the upgrade (the rollback target), for C(upgrade_begin).
    type: str
  to_image:
    description: Digest being installed, for C(upgrade_begin).
    type: str
  from_plan_id:
    description: Plan id running before the upgrade, for C(upgrade_begin).
    type: str
  to_plan_id:
    description: Plan id being installed, for C(upgrade_begin).
    type: str
  stage:
    description: Upgrade stage for C(upgrade_stage) (C(pull) is entered by C(upgrade_begin) only).
    type: str
    choices: [launch, smoke, rollback]
author:
  - gpufleet maintainers (@gpufleet)
attributes:
  check_mode:
    details: Reports the change it would make and writes nothing.
"""

EXAMPLES = r"""
- name: Read the deployment state
  gpufleet.kimi_k3.deployment_state:
    plan_dir: "{{ plan_result.dest }}"
  register: state
  run_once: true
  delegate_to: localhost
"""

RETURN = r"""
state:
  description: The record after the operation (C(version), C(deployed), C(upgrade), C(last_run)).
  returned: always
  type: dict
interrupted:
  description: Text describing an interrupted upgrade (C(upgrade) set), or null.
  returned: always
  type: str
rollout_state:
  description: The rollout state after the operation (C(idle), C(pull), C(launch), C(smoke), C(rollback), C(unknown)).
  returned: always
  type: str
deployed_plans:
  description: Node plans (host -> plan) of the deployed plan, from its kept files (empty when none).
  returned: always
  type: dict
kept_plans:
  description: Every kept node plan by host and plan hash (host -> plan_hash -> plan), for O(op=read).
  returned: always
  type: dict
"""
