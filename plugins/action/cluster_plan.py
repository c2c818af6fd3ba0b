# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side action: read the cluster's hostvars, validate the topology and render every node's plan.

Documentation lives in plugins/modules/cluster_plan.py. All logic is in module_utils (topology: the driver,
plan_variables: the variable table, plan_validate: the validators, plan_render: the output).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.plugins.action import ActionBase

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils import action_specs, plan_contract, plan_render, topology
from ansible_collections.gpufleet.kimi_k3.plugins.filter.plan import _FALLBACK_VARS as FALLBACK_VARS
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils import plan_files, recipe_data
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.templated import to_plain

NODE_VARS = ("ansible_host",)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    @staticmethod
    def _node(host, hv, head, overrides):
        """A host as topology.build_cluster_plan takes it: its kimi_k3_* variables and ansible_host."""
        node_vars = dict((key, to_plain(hv[key])) for key in hv if key.startswith(topology.PREFIX) or key in NODE_VARS)
        node_vars.update(overrides)
        return {"host": host, "head": head, "vars": node_vars}

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        task_vars = task_vars or {}
        _valid, args = self.validate_argument_spec(action_specs.CLUSTER_PLAN)
        args = action_specs.null_is_default(args, action_specs.CLUSTER_PLAN)
        group, head_group, overrides = args["group"], args["head_group"], args["overrides"]
        groups = task_vars.get("groups", {})
        hosts = list(groups.get(group, []))
        heads = set(groups.get(head_group, []))
        hostvars = task_vars.get("hostvars", {})
        nodes = [self._node(host, hostvars[host], host in heads, overrides) for host in hosts]
        routers = [self._node(host, hostvars[host], False, {})
                   for host in groups.get(args["router_group"], [])]
        recipe = recipe_data.load_recipe(args["recipe"])
        snapshots = recipe_data.load_snapshots()
        plan = topology.build_cluster_plan(nodes, recipe, snapshots, routers)
        result["changed"] = False
        result["ok"] = plan["ok"]
        result["cluster"] = plan["cluster"]
        result["plans"] = plan["plans"]
        scripts = dict((h, plan_render.run_script(p)) for h, p in plan["plans"].items())
        result["errors"] = [plan_render.format_problem(p) for p in plan["errors"]]
        result["problems"] = plan["errors"]
        result["warnings_list"] = [plan_render.format_problem(p) for p in plan["warnings"]]
        result["summary"] = plan_render.summary_table(plan).splitlines()
        if not plan["ok"]:
            result["failed"] = True
            result["msg"] = ("The inventory was refused before contacting any host (%d problem(s)):\n%s"
                             % (len(plan["errors"]), "\n".join(" - " + e for e in result["errors"])))
        else:
            result["msg"] = "planned %d node(s)" % len(plan["plans"])
            if args["dest"]:
                files = {}
                for host, node_plan in plan["plans"].items():
                    files["%s.json" % host] = (plan_render.plan_json(node_plan), 0o644)
                    files["%s.sh" % host] = (scripts[host], 0o755)
                result["plan_id"], written = plan_files.write_plan(args["dest"], files, plan["plans"],
                                                                   check_mode=self._task.check_mode)
                result["changed"] = bool(written)
                result["written"] = written
                result["dest"] = args["dest"]
        if not (plan["ok"] and args["dest"]):
            # Written to <dest>/<host>.sh otherwise: 2 KB per node that every later task would carry in plan_result
            # (issue #17: 2.3 MB at 1,152 nodes, walked by register, the callback and every task's variables).
            result["scripts"] = scripts
        # The files hold the rendered plans; plan_result (what the roles read: this result, registered by the plan
        # role) the plans with every contract key (issue #17: formerly a set_fact through the plan_complete filter).
        # hostvars are read only for a plan that lacks a key.
        result["plans"] = plan_contract.complete(
            {"plans": plan["plans"]},
            lambda host: dict((k, to_plain(hostvars[host][k])) for k in FALLBACK_VARS if k in hostvars[host]),
            recipe.get("defaults") or {})["plans"]
        return result
