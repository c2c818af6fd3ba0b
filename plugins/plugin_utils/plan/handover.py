# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What roles would otherwise derive in Jinja, written into the plan once (pure functions): roles read it.

* every plan: ``health_url`` (a node without an HTTP server watches its deployment's endpoint), ``metrics_url``
  (None without an HTTP server; the router's is its Prometheus port, not its API port), ``api_base_url`` (the
  OpenAI base URL, ``api_url`` + ``/v1``) and ``features`` (the runner toggles the container's environment sets),
* every plan: ``image_pull``, the plan's image as the node pulls and runs it (``reference``: the planned image;
  ``pinned``: whether it names a digest; ``pull``: the name pulled, under the host's ``image_mirror`` rules when one
  matches, same digest; ``mirrored``; ``rule``: the matching ``source -> mirror`` or None),
* the router's ``router.workers_url`` (its view of the backends) and ``router.liveness_url``, and every router
  backend's ``health_url`` and ``metrics_url``,
* ``cluster.metrics_urls`` and every ``cluster.deployments[].metrics_urls``: the endpoints' ``/metrics``.

``endpoint_urls`` is the same derivation for an OpenAI base URL an operator names (``capacity_base_url``);
``measured_endpoint`` picks the entry point a whole-deployment measurement uses and the engines' metrics.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.image import reference as image_ref

HEALTH_PATH = "/health"
METRICS_PATH = "/metrics"
OPENAI_PATH = "/v1"
MODELS_PATH = "/models"
# vllm-router's admin paths on its API port: its view of every worker, and "alive" without asking the workers
WORKERS_PATH = "/workers"
LIVENESS_PATH = "/liveness"
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


def image_pull(image, mirrors=None):
    """``{reference, pinned, pull, mirrored, rule}`` of ``image`` under the ``image_mirror`` rules ``mirrors``. Rules
    the role-variable check refuses (plugin_utils.plan.role_variables) leave the name as planned: such a plan is refused."""
    out = {"reference": image, "pinned": image_ref.image_reference_parse(image, allow_unpinned=True)["pinned"],
           "pull": image, "mirrored": False, "rule": None}
    source = image_ref.image_mirror(image, mirrors if isinstance(mirrors, dict) else None, allow_unpinned=True)
    if not source["problem"]:
        out.update(pull=source["pull"], mirrored=source["mirrored"], rule=source["rule"])
    return out


def endpoint_urls(base_url):
    """``{base_url, models_url, health_url}`` of an OpenAI base URL (``.../v1``): the model list under it, the
    server's health beside it."""
    given = "" if base_url is None else str(base_url).strip()
    base = given.rstrip("/")
    root = base[:-len(OPENAI_PATH)] if base.endswith(OPENAI_PATH) else base
    return {"base_url": given, "models_url": _under(base, MODELS_PATH), "health_url": _under(root, HEALTH_PATH)}


def measured_endpoint(result, base_url=""):
    """What a measurement of the whole deployment (the capacity curve) talks to, from the plan's ``result``
    (``plans`` and ``cluster``): ``endpoint_urls`` of the entry point plus ``metrics_urls`` and ``via``.

    The entry point is ``base_url`` when the operator names one, else the router's when the plan has one (a fleet
    or a prefill/decode split is measured as its clients reach it), else the head's. The engines' figures (KV
    budget, queue, preemptions) come from every serving engine's ``/metrics``: the router's own are not an engine's.
    """
    result = result if isinstance(result, dict) else {}
    cluster, plans = result.get("cluster") or {}, result.get("plans") or {}
    router = cluster.get("router") or {}
    if base_url and str(base_url).strip():
        via, url = "capacity_base_url", base_url
    elif router.get("host") in plans:
        via, url = "router %s" % router["host"], plans[router["host"]]["api_base_url"]
    else:
        via, url = "head %s" % cluster.get("head"), (plans.get(cluster.get("head")) or {}).get("api_base_url")
    engines = [u for d in cluster.get("deployments") or [] for u in d.get("metrics_urls") or []]
    return dict(endpoint_urls(url), metrics_urls=engines, via=via)


def _router_urls(router, api_url):
    router.update(workers_url=_under(api_url, WORKERS_PATH), liveness_url=_under(api_url, LIVENESS_PATH))
    _backend_urls(router["backends"])


def publish(plans, cluster, mirrors=None):
    """Add the values above to ``plans`` and ``cluster`` (in place); ``mirrors``: ``{host: its image_mirror}``."""
    mirrors = mirrors or {}
    for host, plan in plans.items():
        plan["image_pull"] = image_pull(plan["image"], mirrors.get(host))
        plan["health_url"] = _under(_watched(plan, cluster), HEALTH_PATH)
        plan["api_base_url"] = _under(plan["api_url"], OPENAI_PATH)
        plan["features"] = dict((name, plan["env"].get(env, "0") == "1") for name, env in FEATURE_ENV.items())
        if plan["role"] == "router":
            plan["metrics_url"] = plan["router"]["metrics_url"]
            _router_urls(plan["router"], plan["api_url"])
        else:
            plan["metrics_url"] = _under(plan["api_url"], METRICS_PATH) if plan["serves_http"] else None
    cluster["metrics_urls"] = [_under(u, METRICS_PATH) for u in cluster.get("endpoints") or []]
    for deployment in cluster.get("deployments") or []:
        deployment["metrics_urls"] = [_under(u, METRICS_PATH) for u in deployment.get("endpoints") or []]
