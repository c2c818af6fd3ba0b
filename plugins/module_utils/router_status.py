# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the vllm-router says about its backends, in the plan's terms (pure functions).

Inputs are what vllm-router 0.1.17 serves: ``GET /workers`` on its API port
(``{"workers": [{"url", "worker_type", "is_healthy", ...}], ...}``) and its Prometheus text on the metrics port
(``vllm_router_processed_requests_total{worker="<url>"}``, ``vllm_router_worker_health{worker="<url>"}``). Each
backend URL is mapped back to the plan's deployment (``router.backends: [{deployment, kind, url}]``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

_SAMPLE = re.compile(r'^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)')
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def _norm(url):
    return str(url or "").rstrip("/")


def worker_samples(text, metric):
    """``{worker url: value}`` of one per-worker metric in Prometheus text (other lines ignored)."""
    out = {}
    for line in str(text or "").splitlines():
        m = _SAMPLE.match(line.strip())
        if not m or m.group("name") != metric:
            continue
        labels = dict(_LABEL.findall(m.group("labels")))
        try:
            value = float(m.group("value"))
        except ValueError:
            continue
        if "worker" in labels:
            out[_norm(labels["worker"])] = out.get(_norm(labels["worker"]), 0.0) + value
    return out


def backend_health(workers, backends):
    """Per plan backend: ``{deployment, kind, url, known, healthy}`` from ``GET /workers``; a backend the router
    does not list counts as unhealthy (``known: false``)."""
    listed = {}
    for w in (workers or {}).get("workers") or []:
        if isinstance(w, dict):
            listed[_norm(w.get("url"))] = bool(w.get("is_healthy"))
    rows = []
    for b in backends or []:
        url = _norm(b.get("url"))
        rows.append({"deployment": b.get("deployment"), "kind": b.get("kind"), "url": url,
                     "known": url in listed, "healthy": listed.get(url, False)})
    return rows


def health_problems(rows, router_host):
    """One line per unhealthy backend, naming the deployment, its URL and what to do; [] when all are healthy."""
    lines = []
    for r in rows:
        if r["healthy"]:
            continue
        why = "is not healthy in the router" if r["known"] else "is not among the router's workers"
        lines.append("%s: backend %s (%s %s) %s; the router sends it no requests. Check that deployment "
                     "(playbooks/status.yml) and run playbooks/deploy.yml to restart it."
                     % (router_host, r["deployment"], r["kind"], r["url"], why))
    return lines


def usage(before_text, after_text, backends, metric="vllm_router_processed_requests_total"):
    """Requests the router sent each plan backend between two metric scrapes: ``[{deployment, kind, url,
    requests}]`` plus ``unplanned`` (workers the router used that the plan does not name)."""
    before = worker_samples(before_text, metric)
    after = worker_samples(after_text, metric)
    rows, planned = [], set()
    for b in backends or []:
        url = _norm(b.get("url"))
        planned.add(url)
        rows.append({"deployment": b.get("deployment"), "kind": b.get("kind"), "url": url,
                     "requests": int(after.get(url, 0.0) - before.get(url, 0.0))})
    unplanned = sorted(u for u in after if u not in planned and after[u] - before.get(u, 0.0) > 0)
    return {"backends": rows, "unplanned": unplanned, "total": sum(r["requests"] for r in rows)}


def usage_lines(report):
    """Markdown table lines of a ``usage`` report."""
    lines = ["| deployment | kind | url | requests via the router |", "| --- | --- | --- | --- |"]
    for r in report.get("backends") or []:
        lines.append("| %s | %s | %s | %d |" % (r["deployment"], r["kind"], r["url"], r["requests"]))
    for u in report.get("unplanned") or []:
        lines.append("| (not in the plan) | - | %s | used |" % u)
    return lines
