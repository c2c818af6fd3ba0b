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


_RANK = re.compile(r"@\d+$")


def _norm(url):
    """The backend URL of a router worker: vllm-router lists a data-parallel backend once per DP rank it found
    (``http://host:port@<rank>``); those entries are the one planned backend."""
    return _RANK.sub("", str(url or "")).rstrip("/")


def worker_samples(text, metric, only=None, combine=None):
    """``{backend url: value}`` of one per-worker metric in Prometheus text (other lines ignored); ``only``: a
    ``(label, value)`` the sample must carry; the DP ranks of one backend are summed (or ``combine(a, b)``)."""
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
        if only and labels.get(only[0]) != only[1]:
            continue
        if "worker" in labels:
            url = _norm(labels["worker"])
            out[url] = value if url not in out else (combine or (lambda a, b: a + b))(out[url], value)
    return out


def backend_health(workers, backends, metrics_text="", direct=None):
    """Per plan backend: ``{deployment, kind, url, known, healthy, circuit_open}``.

    ``healthy``: the router lists it (``GET /workers``) as healthy AND its circuit breaker is closed
    (``vllm_router_cb_state`` 0 in the metrics; the router stops sending to a worker whose requests failed long
    before its next health check marks it unhealthy). A backend the router does not list counts as unhealthy.
    ``workers`` None: health from the metrics alone (``vllm_router_worker_health``). ``direct``: ``{url: HTTP
    status of its /health from the router node}``; an open circuit breaker of a backend that answers 200 there
    (repaired since) is not a problem: the router tries it again with the next requests (``reachable``).
    """
    listed = {}
    if workers is None:  # metrics only: the router's health gauge per worker (every DP rank must be 1)
        for url, v in worker_samples(metrics_text, "vllm_router_worker_health", combine=min).items():
            listed[url] = v == 1.0
    for w in (workers or {}).get("workers") or []:
        if isinstance(w, dict):
            url = _norm(w.get("url"))
            listed[url] = listed.get(url, True) and bool(w.get("is_healthy"))
    cb_state = worker_samples(metrics_text, "vllm_router_cb_state", combine=max)
    direct = None if direct is None else dict((_norm(k), v) for k, v in direct.items())
    rows = []
    for b in backends or []:
        url = _norm(b.get("url"))
        circuit_open = cb_state.get(url, 0.0) != 0.0
        reachable = None if direct is None else (direct or {}).get(url) == 200
        rows.append({"deployment": b.get("deployment"), "kind": b.get("kind"), "url": url, "known": url in listed,
                     "circuit_open": circuit_open, "reachable": reachable,
                     "healthy": listed.get(url, False) and (not circuit_open or reachable is True)})
    return rows


def health_problems(rows, router_host):
    """One line per unhealthy backend, naming the deployment, its URL and what to do; [] when all are healthy."""
    lines = []
    for r in rows:
        if r["healthy"]:
            continue
        if not r["known"]:
            why = "is not among the router's workers"
        elif r.get("circuit_open"):
            why = "has its circuit breaker open in the router (its requests failed)"
        else:
            why = "is not healthy in the router (its /health checks fail)"
        lines.append("%s: backend %s (%s %s) %s; the router sends it no requests. Check that deployment "
                     "(status.yml in the site) and run deploy.yml to restart it."
                     % (router_host, r["deployment"], r["kind"], r["url"], why))
    return lines


def usage(before_text, after_text, backends):
    """What the router sent each plan backend between two metric scrapes: ``{backends: [{deployment, kind, url,
    requests, succeeded}], unplanned, total}``. ``requests``: attempts (``vllm_router_processed_requests_total``,
    retries included); ``succeeded``: ``vllm_router_cb_outcomes_total{outcome="success"}`` (None when the router
    does not count outcomes for it, as for PD workers); ``unplanned``: workers the plan does not name."""
    def delta(metric, url, only=None):
        b = worker_samples(before_text, metric, only)
        a = worker_samples(after_text, metric, only)
        return None if url not in a else int(a[url] - b.get(url, 0.0))
    after = worker_samples(after_text, "vllm_router_processed_requests_total")
    before = worker_samples(before_text, "vllm_router_processed_requests_total")
    rows, planned = [], set()
    for b in backends or []:
        url = _norm(b.get("url"))
        planned.add(url)
        rows.append({"deployment": b.get("deployment"), "kind": b.get("kind"), "url": url,
                     "requests": delta("vllm_router_processed_requests_total", url) or 0,
                     "succeeded": delta("vllm_router_cb_outcomes_total", url, ("outcome", "success"))})
    unplanned = sorted(u for u in after if u not in planned and after[u] - before.get(u, 0.0) > 0)
    return {"backends": rows, "unplanned": unplanned, "total": sum(r["requests"] for r in rows)}


def usage_lines(report):
    """Markdown table lines of a ``usage`` report."""
    lines = ["| deployment | kind | url | requests sent (with retries) | succeeded |", "| --- | --- | --- | --- | --- |"]
    for r in report.get("backends") or []:
        ok = "-" if r.get("succeeded") is None else str(r["succeeded"])
        lines.append("| %s | %s | %s | %d | %s |" % (r["deployment"], r["kind"], r["url"], r["requests"], ok))
    for u in report.get("unplanned") or []:
        lines.append("| (not in the plan) | - | %s | used | - |" % u)
    return lines
