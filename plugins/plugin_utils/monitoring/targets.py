# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Monitoring configuration for a planned Kimi-K3 deployment (pure functions, no I/O).

From the cluster plan (``plan_result.plans``: every node with ``serves_http`` has an ``api_url`` whose ``/metrics``
Prometheus can scrape) build:

* Prometheus file_sd target groups, one per serving node, labelled ``kimi_k3_cluster``, ``node``, ``role``,
  ``node_rank`` (and the router's, when there is one),
* a Prometheus configuration whose scrape jobs read those files,
* a Grafana dashboard from the panel list in ``data/monitoring/vllm-dashboard.yml``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

try:
    from urllib.parse import urlsplit
except ImportError:  # pragma: no cover - Python 2 is not supported by this collection
    from urlparse import urlsplit  # type: ignore

VLLM_JOB = "kimi_k3_vllm"
ROUTER_JOB = "kimi_k3_router"
METRICS_PATH = "/metrics"
SELECTOR = 'kimi_k3_cluster="$cluster", node=~"$node"'
DASHBOARD_SCHEMA_VERSION = 39
_METRIC_RE = re.compile(r"\b(vllm:[a-z0-9_:]+)")


class MonitoringError(ValueError):
    """Input the monitoring configuration cannot be built from (message names the host/variable and the fix)."""


def _endpoint(url, who):
    """(scheme, 'host:port') of an endpoint URL."""
    parts = urlsplit(str(url))
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise MonitoringError("%s: endpoint %r is not an http(s) URL. Fix: run gpufleet.kimi_k3.plan first (its "
                              "api_url) or give the router as http(s)://host:port." % (who, url))
    port = parts.port or (443 if parts.scheme == "https" else 80)
    host = "[%s]" % parts.hostname if ":" in parts.hostname else parts.hostname
    return parts.scheme, "%s:%d" % (host, port)


def plan_targets(plans):
    """The plan's ``cluster.monitoring``: ``vllm`` ({host: {host, role, node_rank, serves_http, api_url,
    metrics_url}} of every vLLM node serving HTTP) and ``routers`` ([{name, url}] scraped on the router's
    metrics port, which is not its API port)."""
    vllm, routers = {}, []
    for host, plan in sorted(plans.items()):
        if plan.get("role") == "router":
            routers.append({"name": host, "url": plan["router"]["metrics_url"]})
        elif plan.get("serves_http") and plan.get("api_url"):
            vllm[host] = {"host": host, "role": plan["role"], "node_rank": plan["node_rank"], "serves_http": True,
                          "api_url": plan["api_url"], "metrics_url": plan["api_url"].rstrip("/") + METRICS_PATH}
    return {"vllm": vllm, "routers": routers}


def vllm_targets(plans, cluster_name):
    """file_sd target groups of every vLLM node that serves /metrics, in node_rank order: (scheme, groups).
    A router's plan is skipped: its API port serves no vLLM metrics (``router_targets`` scrapes it)."""
    if not plans:
        raise MonitoringError("plan_result.plans is empty. Fix: run gpufleet.kimi_k3.plan first in the same play.")
    groups, schemes = [], set()
    for plan in sorted(plans.values(), key=lambda p: (p.get("node_rank", 0), p.get("host", ""))):
        # the router host's API port serves no vLLM metrics; its own Prometheus port is the router job's target
        if not plan.get("serves_http") or not plan.get("api_url") or plan.get("role") == "router":
            continue
        scheme, address = _endpoint(plan["api_url"], plan.get("host", "?"))
        schemes.add(scheme)
        groups.append({"targets": [address],
                       "labels": {"kimi_k3_cluster": str(cluster_name), "node": str(plan["host"]),
                                  "role": str(plan.get("role", "")), "node_rank": str(plan.get("node_rank", ""))}})
    if not groups:
        raise MonitoringError("no node of the plan serves HTTP (serves_http). Fix: check the plan's strategy.")
    if len(schemes) > 1:
        raise MonitoringError("the nodes mix http and https endpoints (%s). Fix: one scheme for the cluster."
                              % ", ".join(sorted(schemes)))
    return schemes.pop(), groups


def router_targets(routers, cluster_name):
    """file_sd target groups for router URLs (``[{"name", "url"}]`` or plain URLs): (scheme or None, groups)."""
    groups, schemes = [], set()
    for i, router in enumerate(routers or []):
        entry = router if isinstance(router, dict) else {"url": router}
        name = str(entry.get("name") or "router-%d" % i)
        scheme, address = _endpoint(entry.get("url"), "router %s" % name)
        schemes.add(scheme)
        groups.append({"targets": [address], "labels": {"kimi_k3_cluster": str(cluster_name), "node": name,
                                                        "role": "router"}})
    if len(schemes) > 1:
        raise MonitoringError("the routers mix http and https endpoints. Fix: one scheme for the routers.")
    return (schemes.pop() if schemes else None), groups


def scrape_job(job, scheme, sd_file, interval, ca_file=None):
    """One scrape_configs entry reading its targets from a file_sd file (path relative to the config file)."""
    job_def = {"job_name": job, "scheme": scheme, "metrics_path": METRICS_PATH, "scrape_interval": interval,
               "file_sd_configs": [{"files": [sd_file], "refresh_interval": "1m"}]}
    if scheme == "https" and ca_file:
        job_def["tls_config"] = {"ca_file": ca_file}
    return job_def


def prometheus_config(jobs, interval):
    """A complete prometheus.yml (global settings + the given scrape jobs)."""
    return {"global": {"scrape_interval": interval, "evaluation_interval": interval},
            "scrape_configs": list(jobs)}


def _panel(number, spec, datasource, y):
    width = 12
    targets = []
    for i, target in enumerate(spec["targets"]):
        targets.append({"refId": chr(ord("A") + i), "expr": target["expr"].replace("SELECTOR", SELECTOR),
                        "legendFormat": target.get("legend", ""), "datasource": datasource})
    return {"id": number, "type": spec.get("type", "timeseries"), "title": spec["title"],
            "gridPos": {"h": 8, "w": width, "x": ((number - 1) % 2) * width, "y": y},
            "datasource": datasource, "targets": targets,
            "fieldConfig": {"defaults": {"unit": spec.get("unit", "short")}, "overrides": []},
            "options": {"legend": {"displayMode": "table", "placement": "bottom", "showLegend": True},
                        "tooltip": {"mode": "multi", "sort": "desc"}}}


def _variables(datasource, cluster_name):
    return [
        {"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus"},
        {"name": "cluster", "label": "Cluster", "type": "query", "datasource": datasource, "refresh": 2,
         "query": "label_values(vllm:num_requests_running, kimi_k3_cluster)",
         "current": {"text": cluster_name, "value": cluster_name}},
        {"name": "node", "label": "Node", "type": "query", "datasource": datasource, "refresh": 2, "multi": True,
         "includeAll": True, "allValue": ".*",
         "query": 'label_values(vllm:num_requests_running{kimi_k3_cluster="$cluster"}, node)'},
    ]


def dashboard(spec, cluster_name, uid):
    """The Grafana dashboard (classic JSON model) for ``spec`` (data/monitoring/vllm-dashboard.yml)."""
    datasource = {"type": "prometheus", "uid": "${datasource}"}
    panels = [_panel(i + 1, p, datasource, (i // 2) * 8) for i, p in enumerate(spec["panels"])]
    return {"id": None, "uid": uid, "title": "%s - %s" % (spec["title"], cluster_name),
            "tags": ["vllm", "kimi-k3", "gpufleet"], "timezone": "browser", "editable": True, "graphTooltip": 1,
            "schemaVersion": DASHBOARD_SCHEMA_VERSION, "version": 1, "refresh": "30s",
            "time": {"from": "now-1h", "to": "now"},
            "annotations": {"list": [{"name": "Annotations & Alerts", "builtIn": 1, "type": "dashboard",
                                      "datasource": {"type": "grafana", "uid": "-- Grafana --"}, "enable": True,
                                      "hide": True}]},
            "templating": {"list": _variables(datasource, cluster_name)}, "panels": panels}


def dashboard_uid(cluster_name):
    """A Grafana uid (<= 40 of [A-Za-z0-9_-]) derived from the cluster name."""
    return ("kimi-k3-" + re.sub(r"[^A-Za-z0-9_-]+", "-", str(cluster_name)))[:40]


def metric_names(spec):
    """The vllm:* series the dashboard queries (base names, as scraped)."""
    names = set()
    for panel in spec["panels"]:
        for target in panel["targets"]:
            names.update(_METRIC_RE.findall(target["expr"]))
    return sorted(names)


def monitoring_files(plans, cluster_name, spec, routers=None, interval="15s", ca_file=None):
    """``{relative path: document}`` of everything written under <artifacts>/monitoring/, plus a summary."""
    scheme, groups = vllm_targets(plans, cluster_name)
    jobs = [scrape_job(VLLM_JOB, scheme, "targets/vllm.json", interval, ca_file)]
    files = {"targets/vllm.json": groups}
    r_scheme, r_groups = router_targets(routers, cluster_name)
    if r_groups:
        jobs.append(scrape_job(ROUTER_JOB, r_scheme, "targets/router.json", interval, ca_file))
        files["targets/router.json"] = r_groups
    files["prometheus.yml"] = prometheus_config(jobs, interval)
    board = dashboard(spec, cluster_name, dashboard_uid(cluster_name))
    files["grafana/kimi-k3-dashboard.json"] = board
    summary = {"targets": [t for g in groups for t in g["targets"]],
               "router_targets": [t for g in r_groups for t in g["targets"]],
               "jobs": [j["job_name"] for j in jobs], "metrics": metric_names(spec), "dashboard_uid": board["uid"]}
    return files, summary
