# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side action: judge every node's probe against its plan once, write the report files.

Documentation lives in plugins/modules/preflight_report.py; the logic in plugins/plugin_utils/preflight/ and the
run shared with fabric_report in plugins/plugin_utils/actions/report.py.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible.errors import AnsibleActionFail

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.actions import report as report_action
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.actions import specs as action_specs
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import contract as plan_contract
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.preflight import expect as E
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.preflight import report as R
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import files as plan_files
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import recipe_data
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.actions.templated import to_plain


def _probe_of(hostvars, host, var):
    """(node_probe facts or None, failure message or None) from the host's registered probe result."""
    res = report_action.registered(hostvars, host, var)
    if res is None:
        return None, "no probe result (the probe task did not run on this host)"
    facts = (res.get("ansible_facts") or {}).get("node_probe")
    if facts:
        return facts, None
    return None, (res.get("msg") or ("unreachable" if res.get("unreachable") else "probe failed"))[:500]


def _expected(plan_result, hosts, recipe):
    expected = {}
    for host in hosts:
        try:
            plan = plan_contract.require(plan_result, host)
        except ValueError as exc:
            raise AnsibleActionFail(str(exc))
        expected[host] = E.expected_from_plan(plan, plan_result.get("cluster") or {}, recipe)
    return expected


class ActionModule(report_action.ReportAction):
    SPEC = action_specs.PREFLIGHT_REPORT

    def judge(self, args, task_vars):
        args = action_specs.null_is_default(args, self.SPEC)
        hosts = [str(h) for h in (args["hosts"] or task_vars.get("ansible_play_hosts_all") or [])]
        plan_result = to_plain(task_vars.get("plan_result") or {})
        expected = _expected(plan_result, hosts, recipe_data.load_recipe(args["recipe"]))
        probes, failures = {}, {}
        for host in hosts:
            probes[host], failure = _probe_of(task_vars["hostvars"], host, args["probe_var"])
            if failure:
                failures[host] = failure
        report = R.build_report(hosts, probes, expected, to_plain(args["thresholds"]), failures)
        outputs = self._outputs(report, args["show_pass"])
        mode = plan_files.ARTIFACT_FILE_MODE
        files = {"preflight-report.json": (outputs["json"], mode), "preflight-report.md": (outputs["markdown"], mode)}
        if args["dest"]:
            # The files hold them: not also carried in the registered result (440 KB at 32 nodes, walked by every
            # later task's variables).
            del outputs["json"], outputs["markdown"]
        return outputs, files

    @staticmethod
    def _outputs(report, show_pass):
        return {
            "ok": report["summary"]["ok"],
            "report": report,
            "failed_hosts": report["summary"]["failed_hosts"],
            "host_failures": R.host_failures(report),
            "table": R.render_table(report, include_pass=show_pass),
            "markdown": R.render_markdown(report),
            "json": json.dumps(report, indent=2, sort_keys=True) + "\n",
            "failure_message": R.failure_message(report),
            "msg": report_action.verdict("preflight", report["summary"]),
        }
