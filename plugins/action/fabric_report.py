# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side action: judge every node's fabric job result against its spec once, write the fabric section.

Documentation lives in plugins/modules/fabric_report.py; the logic in plugins/plugin_utils/fabric/report.py and the
run shared with preflight_report in plugins/plugin_utils/actions/report.py.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.actions import report as report_action
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.actions import specs as action_specs
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.fabric import report as R
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import files as plan_files
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import recipe_data
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.actions.templated import to_plain

REPORT_MODE = plan_files.ARTIFACT_FILE_MODE
PREFLIGHT_FILES = ("preflight-report.json", "preflight-report.md")
_NOT_SET = object()


def _outcome_of(hostvars, host, var):
    """(result dict or None, failure message or None, skip reason or None) of one host's fabric job."""
    raw = report_action.registered(hostvars, host, var, default=_NOT_SET)
    if raw is _NOT_SET:
        return None, "the fabric job did not run on this host", None
    raw = raw or {}
    return raw.get("result"), raw.get("failure"), raw.get("skipped")


def _read(path):
    if not os.path.exists(path):
        return None
    with open(path) as handle:
        return handle.read()


def _files(dest, report):
    files = {"fabric-report.json": (json.dumps(report, indent=2, sort_keys=True) + "\n", REPORT_MODE),
             "fabric-report.md": (R.render_markdown(report), REPORT_MODE)}
    texts = [_read(os.path.join(dest, name)) for name in PREFLIGHT_FILES]
    if texts[0] is not None:
        merged = R.merge_into_preflight(texts[0], texts[1], report)
        files.update(dict((name, (text, REPORT_MODE)) for name, text in zip(PREFLIGHT_FILES, merged)))
    return files


class ActionModule(report_action.ReportAction):
    SPEC = action_specs.FABRIC_REPORT

    def judge(self, args, task_vars):
        specs = to_plain(args["specs"])
        hosts = [str(h) for h in (args["hosts"] or sorted(specs))]
        results, failures, skipped = {}, {}, {}
        for host in hosts:
            results[host], failure, skip = _outcome_of(task_vars["hostvars"], host, args["outcome_var"])
            if failure:
                failures[host] = failure
            if skip:
                skipped[host] = skip
        recipe = recipe_data.load_recipe() or {}
        rows = (recipe.get("fabric") or {}).get("known_bad")
        # What a development build's rules are judged by (kimi_k3_vllm_version: image): the releases with a flag
        # snapshot and the recipe's explicit entries.
        image_rules = {"releases": sorted(recipe_data.load_snapshots() or {}),
                       "builds": (recipe.get("development_builds") or {}).get("builds")}
        report = R.build_report(dict((h, specs[h]) for h in hosts if h in specs), results, failures, skipped, rows,
                                image_rules)
        outputs = dict(ok=report["summary"]["ok"], report=report, failure_message=R.failure_message(report),
                       hosts=dict((h, R.host_facts(report, h)) for h in hosts), host_failures=R.host_failures(report),
                       markdown=R.render_markdown(report), msg=report_action.verdict("fabric", report["summary"]))
        return outputs, (_files(args["dest"], report) if args["dest"] else {})
