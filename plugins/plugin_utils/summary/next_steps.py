# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The closing summary of a playbook run: what was written where, the endpoint, what to run next (pure)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

# stage -> artifacts (relative to the artifacts directory; <head> is replaced) worth pointing at, in order
REPORTS = {
    "plan": [],
    "preflight": ["preflight-report.md", "preflight-report.json"],
    "deploy": ["preflight-report.md", "smoke/smoke-<head>.md", "smoke/smoke-<head>.json",
               "monitoring/prometheus.yml", "monitoring/grafana/kimi-k3-dashboard.json"],
}
NEXT = {
    "plan": "next: ansible-playbook deploy.yml -i {inv} --tags preflight   (read-only checks of every node)",
    "preflight": "next: fix every failed check (the report names host, check and fix), then "
                 "ansible-playbook deploy.yml -i {inv}",
    "deploy": "next: curl {url}/v1/models   (monitoring: ansible-playbook gpufleet.kimi_k3.monitoring -i {inv})",
}


def _rel(path, cwd):
    rel = os.path.relpath(path, cwd)
    return path if rel.startswith("..") else rel


def _endpoint_lines(plan_result):
    cluster = plan_result.get("cluster") or {}
    plans = plan_result.get("plans") or {}
    head = plans.get(cluster.get("head"), {})
    lines = ["endpoint: %s/v1 (OpenAI API; model %s)" % (url, head.get("served_model_name") or "?")
             for url in cluster.get("endpoints") or []]
    return lines or ["endpoint: none (no node serves HTTP in this plan)"]


def effective_stage(stage, run_tags=None):
    """deploy.yml run with --tags plan / preflight only ends like those playbooks."""
    tags = set(run_tags or ["all"])
    if stage == "deploy" and "all" not in tags and tags <= {"plan", "preflight"}:
        return "preflight" if "preflight" in tags else "plan"
    return stage


def summary(stage, plan_result, artifacts_dir, inventory, exists=os.path.exists, cwd=None, run_tags=None):
    """Lines for ``stage`` (plan, preflight, deploy); only files that ``exists`` are named."""
    if stage not in NEXT:
        raise ValueError("stage must be one of %s, got %r" % (", ".join(sorted(NEXT)), stage))
    stage = effective_stage(stage, run_tags)
    cwd = cwd or os.getcwd()
    plan_result = plan_result or {}
    head = (plan_result.get("cluster") or {}).get("head") or ""
    lines = ["artifacts: %s" % _rel(artifacts_dir, cwd)]
    plan_dir = plan_result.get("dest")
    if plan_dir and exists(plan_dir):
        lines.append("plans: %s/<host>.json and <host>.sh (%d node(s)), plan.md to read"
                     % (_rel(plan_dir, cwd), plan_result.get("nodes", len(plan_result.get("plans") or {}))))
    for rel in REPORTS[stage]:
        path = os.path.join(artifacts_dir, rel.replace("<head>", head))
        if exists(path):
            lines.append("report: %s" % _rel(path, cwd))
    if stage == "deploy":
        lines += _endpoint_lines(plan_result)
    urls = (plan_result.get("cluster") or {}).get("endpoints") or ["http://<head>:8000"]
    lines.append(NEXT[stage].format(inv=_rel(inventory, cwd) if inventory else "<inventory>", url=urls[0]))
    return lines
