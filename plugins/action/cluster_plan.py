# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side action: read the cluster's hostvars, validate the topology and render every node's plan.

Documentation lives in plugins/modules/cluster_plan.py. All logic is in module_utils (topology: the driver,
plan_variables: the variable table, plan_resolve / plan_checks: the derived deployment and its checks, plan_render: the output).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.plugins.action import ActionBase

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.actions import specs as action_specs
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import render as plan_render
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import topology
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import model_facts
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import files as plan_files
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import redaction
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import variables as plan_variables
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import recipe_data
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import role_variables
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.actions.templated import to_plain

NODE_VARS = ("ansible_host",)
# role variables the plan turns into values it hands the roles (plan_handover: image_pull)
HANDED_OVER_ROLE_VARS = ("image_mirror",)
WORKER_GROUP = "vllm_workers"
PLAN_FILE_MODE = plan_files.ARTIFACT_FILE_MODE  # owner only, like every artifact
PLAN_SCRIPT_MODE = 0o700


def _untemplated_if_oversized(hv):
    """``key -> value`` of a host's variables (``hv``: hostvars[host]): templated and plain, except an oversized one
    (a YAML alias bomb: 10^6 leaves from ten lines), handed over as the inventory holds it. Templating would expand
    every leaf (minutes, gigabytes); the plan refuses it by its size, counted through the shared references
    (plan_variables.size_problems). HostVarsVars keeps the untemplated variables in _vars (ansible-core 2.17 to
    2.21); without it every value is templated."""
    raw, memo = getattr(hv, "_vars", None) or {}, {}
    return lambda key: raw[key] if key in raw and plan_variables.oversized(raw[key], memo) else to_plain(hv[key])


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    @staticmethod
    def _node(host, hv, head, overrides, role_vars):
        """A host as topology.build_cluster_plan takes it: its kimi_k3_* variables and ansible_host, and the role
        variables the plan hands over derived (image_mirror)."""
        value = _untemplated_if_oversized(hv)
        node_vars = dict((key, value(key)) for key in hv if key.startswith(topology.PREFIX) or key in NODE_VARS)
        node_vars.update(overrides)
        node = {"host": host, "head": head, "vars": node_vars}
        # an oversized one is left to role_variable_problems, which refuses it by its size
        node.update((key, role_vars[key]) for key in HANDED_OVER_ROLE_VARS
                    if key in role_vars and not plan_variables.oversized(role_vars[key]))
        return node

    @staticmethod
    def _deployment_groups(args, hostvars):
        """{child group of the cluster group: its hosts}, head and worker groups left out; None when the inventory
        is not reachable. ``groups`` flattens the hierarchy, so the inventory behind hostvars is asked."""
        inventory = getattr(hostvars, "_inventory", None)
        cluster = getattr(inventory, "groups", {}).get(args["group"]) if inventory is not None else None
        if cluster is None:
            return None
        skip = (args["head_group"], WORKER_GROUP)
        return dict((child.name, set(h.name for h in child.get_hosts()))
                    for child in cluster.child_groups if child.name not in skip)

    def _cluster_nodes(self, args, task_vars, role_vars):
        """(nodes, routers) as topology.build_cluster_plan takes them, from the groups and every host's variables;
        ``role_vars``: {host: its role variables}."""
        groups, hostvars = task_vars.get("groups", {}), task_vars.get("hostvars", {})
        heads = set(groups.get(args["head_group"], []))
        nodes = [self._node(host, hostvars[host], host in heads, args["overrides"], role_vars.get(host, {}))
                 for host in groups.get(args["group"], [])]
        deployment_groups = self._deployment_groups(args, hostvars)
        for node in nodes if deployment_groups is not None else []:
            node["deployment_groups"] = sorted(g for g, members in deployment_groups.items() if node["host"] in members)
        routers = [self._node(host, hostvars[host], False, {}, role_vars.get(host, {}))
                   for host in groups.get(args["router_group"], [])]
        return nodes, routers

    @staticmethod
    def _role_vars(hv, options):
        """The role variables set for a host, templated; one whose template needs a run's facts is the role's to
        judge."""
        out, value = {}, _untemplated_if_oversized(hv)
        for key in hv:
            if key in options or key.startswith(role_variables.ROLE_PREFIXES):
                try:
                    out[key] = value(key)
                except Exception:  # pylint: disable=broad-except  # templating errors have no common base class
                    continue
        return out

    def _hosts_role_vars(self, task_vars, hosts):
        """{host: the role variables set for it} over ``hosts``, in their order."""
        hostvars, options = task_vars.get("hostvars", {}), role_variables.role_options()
        return dict((h, self._role_vars(hostvars[h], options)) for h in hosts if h in hostvars)

    def _with_role_variables(self, plan, task_vars, hosts, role_vars=None):
        """The plan, refused when a role variable the inventory sets is wrong (roles' argument specs);
        ``role_vars``: {host: its role variables} when already read."""
        role_vars = self._hosts_role_vars(task_vars, hosts) if role_vars is None else role_vars
        problems = role_variables.role_variable_problems([(h, role_vars[h]) for h in hosts if h in role_vars],
                                                         plan["plans"])
        if not problems:
            return plan
        return dict(plan, ok=False, errors=problems, plans={}, cluster={})

    def _write(self, dest, plan, scripts, secrets):
        """Write <dest>/<host>.json and .sh and plan.md (and the copy kept by plan id); what the result says about
        them, with --diff the latest rendering's files before and after. ``secrets``: the inventory's secret values,
        hidden in plan.md and the diff."""
        files = {"plan.md": (plan_render.plan_markdown(plan, secrets), PLAN_FILE_MODE)}
        for host, node_plan in plan["plans"].items():
            # Owner only: the plan names the cluster's addresses, ports and secret file paths.
            files["%s.json" % host] = (plan_render.plan_json(node_plan), PLAN_FILE_MODE)
            files["%s.sh" % host] = (scripts[host], PLAN_SCRIPT_MODE)
        # read before the write; the copies under plans/<id>/ are the same texts, so they are not shown twice
        diff = plan_files.file_diffs(dest, files, lambda text: redaction.redact(text, secrets)) if self._task.diff else None
        plan_id, written = plan_files.write_plan(dest, files, plan["plans"], check_mode=self._task.check_mode)
        out = {"plan_id": plan_id, "changed": bool(written), "written": written, "dest": dest}
        if diff:
            out["diff"] = diff
        return out

    @staticmethod
    def _outcome(plan):
        """The result keys every run returns (ok, cluster, problems, summary, msg, nodes; failed when refused)."""
        out = {"changed": False, "ok": plan["ok"], "cluster": plan["cluster"], "nodes": len(plan["plans"]),
               "errors": [plan_render.format_problem(p) for p in plan["errors"]], "problems": plan["errors"],
               "warnings_list": [plan_render.format_problem(p) for p in plan["warnings"]],
               "summary": plan_render.summary_table(plan).splitlines(),
               "msg": "planned %d node(s)" % len(plan["plans"])}
        if not plan["ok"]:
            out["failed"] = True
            out["msg"] = ("The inventory was refused before contacting any host (%d problem(s)):\n%s"
                          % (len(plan["errors"]), "\n".join(" - " + e for e in out["errors"])))
        return out

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        task_vars = task_vars or {}
        _valid, args = self.validate_argument_spec(action_specs.CLUSTER_PLAN)
        args = action_specs.null_is_default(args, action_specs.CLUSTER_PLAN)
        groups = task_vars.get("groups", {})
        hosts = list(groups.get(args["group"], [])) + list(groups.get(args["router_group"], []))
        role_vars = self._hosts_role_vars(task_vars, hosts)
        nodes, routers = self._cluster_nodes(args, task_vars, role_vars)
        recipe = recipe_data.load_recipe(args["recipe"])
        plan = topology.build_cluster_plan(nodes, recipe, recipe_data.load_snapshots(), routers,
                                           model_facts=model_facts.read)
        if plan["ok"]:
            plan = self._with_role_variables(plan, task_vars, [n["host"] for n in nodes + routers], role_vars)
        result.update(self._outcome(plan))
        scripts = dict((h, plan_render.run_script(p)) for h, p in plan["plans"].items())
        if plan["ok"] and args["dest"]:
            result.update(self._write(args["dest"], plan, scripts, topology.inventory_secrets(recipe, nodes + routers)))
        else:
            # Written to <dest>/<host>.sh otherwise: 2 KB per node that every later task would carry in plan_result
            # (issue #17: 2.3 MB at 1,152 nodes, walked by register, the callback and every task's variables).
            result["scripts"] = scripts
        if args["return_plans"]:
            # what the roles read (plan_result, registered by the plan role): every contract key is the plan's own
            result["plans"] = plan["plans"]
        # else plan.yml: rendered, written and shown; nothing after it reads plan_result.plans (issue #17).
        return result
