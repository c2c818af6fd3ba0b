# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side action: every layout the inventory's hardware allows, each rendered by the plan, ranked.

Documentation lives in plugins/modules/cluster_layouts.py. The logic is plugin_utils.plan.layouts; the nodes are
read exactly as cluster_plan reads them (same class), so a layout is the plan of this inventory with its layout
variables set.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.gpufleet.kimi_k3.plugins.action.cluster_plan import ActionModule as PlanAction
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.actions import specs as action_specs
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.actions.templated import to_plain
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import files as plan_files
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import layouts
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import model_facts
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import recipe_data
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import render as plan_render
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import topology
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan.variables import PREFIX

REPORT_MODE = plan_files.ARTIFACT_FILE_MODE


class ActionModule(PlanAction):
    TRANSFERS_FILES = False

    def _target(self, args, nodes):
        """The task's target, else the head's kimi_k3_target (the inventory's), else None."""
        if args["target"] is not None:
            return to_plain(args["target"])
        head = next((n for n in nodes if n["head"]), nodes[0] if nodes else None)
        return head["vars"].get(PREFIX + "target") if head else None

    def run(self, tmp=None, task_vars=None):
        result = super(PlanAction, self).run(tmp, task_vars)  # ActionBase's: the plan's run is not this one
        task_vars = task_vars or {}
        _valid, args = self.validate_argument_spec(action_specs.CLUSTER_LAYOUTS)
        args = action_specs.null_is_default(args, action_specs.CLUSTER_LAYOUTS)
        plan_args = dict(args, overrides={})
        groups = task_vars.get("groups", {})
        hosts = list(groups.get(args["group"], [])) + list(groups.get(args["router_group"], []))
        nodes, routers = self._cluster_nodes(plan_args, task_vars, self._hosts_role_vars(task_vars, hosts))
        recipe = recipe_data.load_recipe(args["recipe"])
        report = layouts.enumerate_layouts(nodes, recipe, recipe_data.load_snapshots(), routers=routers,
                                           target=self._target(args, nodes), model_facts=model_facts.read,
                                           build=topology.build_cluster_plan)
        if not report["ok"]:
            errors = [plan_render.format_problem(p) for p in report["errors"]]
            result.update(failed=True, errors=errors, msg="The layouts were not listed:\n" + "\n".join(errors))
            return result
        best = report["best"]
        result.update(changed=False, best=best["layout"] if best else None, reason=best["reason"] if best else None,
                      layouts=len(report["layouts"]), summary=layouts.markdown(report).splitlines()[:6],
                      msg="%d layout(s), %d render" % (len(report["layouts"]),
                                                       len([r for r in report["layouts"] if r["status"] == "ok"])))
        if args["dest"]:
            files = {"layouts.json": (json.dumps(layouts.plain(report), indent=2, sort_keys=True) + "\n", REPORT_MODE),
                     "layouts.md": (layouts.markdown(report), REPORT_MODE)}
            written = plan_files.write_files(args["dest"], files, check_mode=self._task.check_mode)
            result.update(changed=bool(written), written=written, dest=args["dest"])
        return result
