# -*- coding: utf-8 -*-
# Copyright: gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Assemble and render the preflight report (pure functions, controller side).

The report is deterministic (no timestamps): re-running preflight on an unchanged cluster rewrites identical
files, so the report tasks stay idempotent.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.preflight import checks as C
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.preflight import cluster as PC
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.preflight.fixes import FIX

REPORT_SCHEMA = 1
# How AnsibleModule refuses a module argument (the node_probe options set for the node, not the node itself).
OPTION_REFUSAL = re.compile(r"(argument '|Unsupported parameters |missing required arguments|value of \w+ must be )")
NODE_KEYS = ("vendor", "gpu_model", "gpu_count", "driver_version", "cuda_version", "rocm_version", "mnnvl", "kernel")


def build_report(hosts, probes, expected, thresholds=None, probe_failures=None):
    """-> {schema, summary, findings, drift, nodes, thresholds}. ``probe_failures``: {host: message} for hosts whose
    probe task failed or was unreachable (their findings say so)."""
    hosts = list(hosts)
    result = PC.run_checks(probes, expected, thresholds, hosts=hosts)
    for f in result["findings"]:
        if f["check"] == "probe" and f["status"] == "fail" and (probe_failures or {}).get(f["host"]):
            f["observed"] = "%s: %s" % (f["observed"], probe_failures[f["host"]])
            if OPTION_REFUSAL.match(probe_failures[f["host"]]):
                f["fix"] = FIX["probe.options"]
    nodes = {}
    for h in hosts:
        facts = probes.get(h) or {}
        node = dict((k, facts.get(k)) for k in NODE_KEYS)
        node["role"] = C.role_of(expected.get(h) or {}) if expected.get(h) else None
        node["engine_version"] = (facts.get("engine") or {}).get("version")
        nodes[h] = node
    return {"schema": REPORT_SCHEMA, "summary": result["summary"], "findings": result["findings"],
            "drift": result["drift"], "nodes": nodes, "thresholds": C.merge_thresholds(thresholds)}


def _cell(text, width):
    text = (text or "").replace("\n", " ")
    return text if len(text) <= width else text[:width - 1] + "~"


def render_table(report, include_pass=True, width=None):
    """Plain-text table (one line per finding), failures first, then the fixes of failing/warning checks."""
    rows = [f for f in report["findings"] if include_pass or f["status"] != "pass"]
    head = ("HOST", "CHECK", "STATUS", "OBSERVED", "EXPECTED")
    cols = [max([len(head[0])] + [len(f["host"]) for f in rows]),
            max([len(head[1])] + [len(f["check"]) for f in rows]), 6]
    obs_w = width or 70
    exp_w = 40
    fmt = "%%-%ds  %%-%ds  %%-%ds  %%-%ds  %%s" % (cols[0], cols[1], cols[2], obs_w)
    lines = [fmt % head, fmt % tuple("-" * n for n in (cols[0], cols[1], cols[2], obs_w, exp_w))]
    for f in rows:
        lines.append((fmt % (f["host"], f["check"], f["status"].upper(), _cell(f["observed"], obs_w),
                             _cell(f["expected"], exp_w))).rstrip())
    s = report["summary"]
    lines.append("")
    lines.append("%s: %d hosts, %d fail, %d warn, %d skipped, %d pass" % (
        "PREFLIGHT OK" if s["ok"] else "PREFLIGHT FAILED", s["hosts"], s["fail"], s["warn"], s["skip"], s["pass"]))
    todo = [f for f in report["findings"] if f["status"] in ("fail", "warn")]
    if todo:
        lines.append("")
        lines.append("What to do:")
        for f in todo:
            lines.append("- [%s] %s %s: %s" % (f["status"].upper(), f["host"], f["check"], f["fix"]))
    return "\n".join(lines)


def _md(text):
    return str(text if text is not None else "").replace("|", "\\|").replace("\n", " ")


def render_markdown(report):
    s = report["summary"]
    out = ["# Preflight report", ""]
    out.append("**%s** - %d hosts, %d fail, %d warn, %d skipped, %d pass." % (
        "OK" if s["ok"] else "FAILED", s["hosts"], s["fail"], s["warn"], s["skip"], s["pass"]))
    out.append("")
    todo = [f for f in report["findings"] if f["status"] != "pass"]
    if todo:
        out += ["## Problems", "", "| host | check | status | observed | expected | fix |",
                "| --- | --- | --- | --- | --- | --- |"]
        for f in todo:
            out.append("| %s | %s | %s | %s | %s | %s |" % tuple(_md(f[k]) for k in (
                "host", "check", "status", "observed", "expected", "fix")))
        out.append("")
    out += ["## Nodes", "", "| host | role | vendor | model | GPUs | driver | CUDA | ROCm | MNNVL | kernel | engine |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for h, n in report["nodes"].items():
        out.append("| %s |" % _md(h) + " | ".join(_md(C._s(n.get(k))) for k in (
            "role", "vendor", "gpu_model", "gpu_count", "driver_version", "cuda_version", "rocm_version", "mnnvl",
            "kernel", "engine_version")) + " |")
    out += ["", "## Drift", "", "| attribute | value | hosts |", "| --- | --- | --- |"]
    for attr, values in report["drift"].items():
        for value, hs in sorted(values.items()):
            out.append("| %s | %s | %s |" % (_md(attr), _md(value), _md(", ".join(hs))))
    out += ["", "## All checks", "", "| host | check | status | observed | expected |",
            "| --- | --- | --- | --- | --- |"]
    for f in report["findings"]:
        out.append("| %s | %s | %s | %s | %s |" % tuple(_md(f[k]) for k in (
            "host", "check", "status", "observed", "expected")))
    return "\n".join(out) + "\n"


def failure_message(report):
    """One-paragraph message: every failing host/check with observed vs expected (the whole cluster)."""
    fails = [f for f in report["findings"] if f["status"] == "fail"]
    if not fails:
        return "preflight passed"
    parts = ["%s %s: %s (expected %s)" % (f["host"], f["check"], f["observed"], f["expected"]) for f in fails]
    return "Preflight failed on %s - %d failing check(s): %s" % (
        ", ".join(report["summary"]["failed_hosts"]), len(fails), "; ".join(parts))


def _host_line(host, f):
    return "%s %s: %s (expected %s) - fix: %s" % (host, f["check"], f["observed"], f["expected"], f["fix"])


def host_failures(report):
    """{host: message} for every host a failure is charged to: its failing checks with their fixes, the cluster
    findings (drift) it is part of, and how many of its checks were skipped behind them."""
    out = {}
    for host in report["summary"]["failed_hosts"]:
        fails = [f for f in report["findings"] if f["status"] == "fail"]
        own = [f for f in fails if f["host"] == host] + [f for f in fails if host in (f.get("hosts") or [])]
        skipped = [f["check"] for f in report["findings"] if f["host"] == host and f["status"] == "skip"]
        msg = "Preflight failed on %s - %s" % (host, "; ".join(_host_line(host, f) for f in own).rstrip("."))
        if skipped:
            msg += ". Not checked until that is fixed: %s" % ", ".join(sorted(set(skipped)))
        out[host] = msg
    return out
