# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side action: read or update the deployment state record (``<plan_dir>/state.json``).

Documentation lives in plugins/modules/deployment_state.py; the record's logic in plugin_utils/rollout/state.py,
the moves an upgrade may make in plugin_utils/rollout/transitions.py.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.actions import specs as action_specs
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.rollout import state as deploy_state
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import files as plan_files
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.rollout import transitions as rollout


def _now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _update(record, op, args):
    """The record after ``op``; the upgrade operations are moves of the rollout state machine (RolloutError)."""
    if op == "ready":
        return deploy_state.mark_ready(record, args.get("plan_id"), args.get("image"), _now())
    if op == "failed":
        return deploy_state.mark_failed(record, args.get("plan_id"), _now(), str(args.get("reason") or ""))
    upgrade = dict((k, args.get(k)) for k in ("from_image", "to_image", "from_plan_id", "to_plan_id"))
    return rollout.apply(record, rollout.event_of(op, args.get("stage")), upgrade, _now())


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        _valid, args = self.validate_argument_spec(action_specs.DEPLOYMENT_STATE)
        op = args["op"]
        if not args["plan_dir"]:  # present but empty: the spec's `required` lets it through
            raise AnsibleActionFail("deployment_state: plan_dir is required (the plan role's plan_dir)")
        if op == "upgrade_stage" and not args.get("stage"):
            raise AnsibleActionFail("deployment_state: op=upgrade_stage needs stage (launch, smoke or rollback)")
        record = plan_files.read_state(args["plan_dir"])
        changed = False
        if op != "read":
            try:
                new = _update(record, op, args)
            except ValueError as exc:  # rollout.RolloutError: an illegal move, the record untouched
                raise AnsibleActionFail("deployment_state: %s" % exc)
            changed = new != record
            if changed and not self._task.check_mode:
                plan_files.write_state(args["plan_dir"], new)
            record = new
        result.update(changed=changed, state=record, interrupted=deploy_state.interrupted(record),
                      rollout_state=rollout.state_of(record),
                      deployed_plans=plan_files.read_plans(args["plan_dir"],
                                                           (record["deployed"] or {}).get("plan_id")),
                      kept_plans=plan_files.plans_by_hash(args["plan_dir"]) if op == "read" else {})
        return result
