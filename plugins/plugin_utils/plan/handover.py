# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What roles would otherwise derive in Jinja, written into the plan once (pure functions): roles read it.

* every plan: ``health_url`` (a node without an HTTP server watches its deployment's endpoint), ``metrics_url``
  (None without an HTTP server; the router's is its Prometheus port, not its API port), ``api_base_url`` (the
  OpenAI base URL, ``api_url`` + ``/v1``) and ``features`` (the runner toggles the container's environment sets),
* every router backend: ``health_url`` and ``metrics_url``,
* ``cluster.metrics_urls`` and every ``cluster.deployments[].metrics_urls``: the endpoints' ``/metrics``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

HEALTH_PATH = "/health"
METRICS_PATH = "/metrics"
OPENAI_PATH = "/v1"
# feature name -> the environment variable that switches it on ("1")
FEATURE_ENV = {"v2_model_runner": "VLLM_USE_V2_MODEL_RUNNER", "rust_frontend": "VLLM_USE_RUST_FRONTEND"}


def _under(url, path):
    return None if not url else url.rstrip("/") + path


def _watched(plan, cluster):
    """The endpoint a node's launch watches: its own, else its deployment's head, else the cluster's first."""
    if plan["serves_http"]:
        return plan["api_url"]
    for deployment in cluster.get("deployments") or []:
        if deployment["name"] == plan.get("deployment", "main") and deployment.get("api_url"):
            return deployment["api_url"]
    return (cluster.get("endpoints") or [None])[0]


def _backend_urls(backends):
    for backend in backends:
        backend.update(health_url=_under(backend["url"], HEALTH_PATH), metrics_url=_under(backend["url"], METRICS_PATH))


def publish(plans, cluster):
    """Add the URLs above to ``plans`` and ``cluster`` (in place)."""
    for plan in plans.values():
        plan["health_url"] = _under(_watched(plan, cluster), HEALTH_PATH)
        plan["api_base_url"] = _under(plan["api_url"], OPENAI_PATH)
        plan["features"] = dict((name, plan["env"].get(env, "0") == "1") for name, env in FEATURE_ENV.items())
        if plan["role"] == "router":
            plan["metrics_url"] = plan["router"]["metrics_url"]
            _backend_urls(plan["router"]["backends"])
        else:
            plan["metrics_url"] = _under(plan["api_url"], METRICS_PATH) if plan["serves_http"] else None
    cluster["metrics_urls"] = [_under(u, METRICS_PATH) for u in cluster.get("endpoints") or []]
    for deployment in cluster.get("deployments") or []:
        deployment["metrics_urls"] = [_under(u, METRICS_PATH) for u in deployment.get("endpoints") or []]
