# -*- coding: utf-8 -*-
# Copyright: gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The per-host plan keys every role reads (docs/dev/architecture.md "Plan contract"), and their presence check.

``CONTRACT_KEYS`` are the keys a role may rely on in ``plan_result.plans[host]``. ``missing_keys`` names what a
plan lacks; ``complete`` fills the keys the cluster_plan action does not publish yet.

``complete`` fills only keys a plan lacks. The cluster_plan action publishes every NEW_KEYS key itself (also
master_port and dp_rpc_port, and deployment / deployment_kind: docs/deployments.md), so for a current plan it
changes nothing; for a plan written by an older collection it derives them from the rendered argv
(``--master-port``, ``--data-parallel-rpc-port``, ...), else the host's inventory variable, else the recipe default.
It is the only place outside the plan that reads those ``kimi_k3_*`` variables.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.engine_api import DEFAULT_DOCKER_HOST

PREFIX = "kimi_k3_"

BASE_KEYS = ("host", "role", "node_rank", "vendor", "accelerator", "strategy", "image", "vllm_version",
             "internal_address", "api_url", "serves_http", "container", "env", "secret_env", "vllm_args")
NEW_KEYS = ("docker_host", "model", "model_revision", "model_cache_dir", "served_model_name", "api_host",
            "api_port", "master_port", "dp_rpc_port")
CONTRACT_KEYS = BASE_KEYS + NEW_KEYS
RUN_PLAN_FIRST = "run the gpufleet.kimi_k3.plan role first (every playbook of the collection does)"


def missing_keys(plan):
    """Contract keys absent from one host's plan (``plan`` may be None)."""
    if not isinstance(plan, dict):
        return list(CONTRACT_KEYS)
    return [k for k in CONTRACT_KEYS if k not in plan]


def require(plan_result, host):
    """One host's plan, or ValueError naming the host and what to do."""
    plans = (plan_result or {}).get("plans") if isinstance(plan_result, dict) else None
    if isinstance(plan_result, dict) and "plans" not in plan_result and plan_result.get("nodes"):
        raise ValueError("%s: plan_result holds no plans (the plan role ran with plan_return_plans: false, as "
                         "playbooks/plan.yml does) - apply gpufleet.kimi_k3.plan with plan_return_plans: true "
                         "before this role." % host)
    if not plans:
        raise ValueError("%s: plan_result is not set - %s." % (host, RUN_PLAN_FIRST))
    if host not in plans:
        raise ValueError("%s: the plan has no entry for this host (is it in group vllm_cluster?) - %s."
                         % (host, RUN_PLAN_FIRST))
    missing = missing_keys(plans[host])
    if missing:
        raise ValueError("%s: the plan lacks %s - the plan role is older than this role; update the collection."
                         % (host, ", ".join(missing)))
    return plans[host]


def arg_value(argv, flag):
    """Value of the last ``--flag VALUE`` / ``--flag=VALUE`` in ``argv`` (None when absent)."""
    value = None
    for i, item in enumerate(argv or []):
        item = str(item)
        if item == flag and i + 1 < len(argv):
            value = str(argv[i + 1])
        elif item.startswith(flag + "="):
            value = item.split("=", 1)[1]
    return value


def _cache_dir(plan, recipe_defaults):
    """Host side of the mount onto the container's HF cache directory."""
    target = recipe_defaults.get("container_cache_dir")
    for volume in (plan.get("container") or {}).get("volumes") or []:
        parts = str(volume).split(":")
        if len(parts) >= 2 and parts[1] == target:
            return parts[0]
    return None


def _derived(plan, host_vars, recipe_defaults):
    """Values of NEW_KEYS from the plan's argv and mounts, else the inventory, else the recipe's defaults."""
    argv = plan.get("vllm_args") or []

    def pick(flag, var, default=None):
        found = arg_value(argv, flag) if flag else None
        if found is not None:
            return found
        value = host_vars.get(PREFIX + var)
        return value if value not in (None, "") else default

    return {
        "docker_host": pick(None, "docker_host", DEFAULT_DOCKER_HOST),
        "model": str(argv[0]) if argv else None,
        "model_revision": pick("--revision", "model_revision"),
        "model_cache_dir": _cache_dir(plan, recipe_defaults) or pick(None, "model_cache_dir",
                                                                     recipe_defaults.get("model_cache_dir")),
        "served_model_name": pick("--served-model-name", "served_model_name"),
        "api_host": pick("--host", "api_host", "0.0.0.0"),
        "api_port": int(pick("--port", "api_port", recipe_defaults.get("api_port"))),
        "master_port": int(pick("--master-port", "master_port", recipe_defaults.get("master_port"))),
        "dp_rpc_port": int(pick("--data-parallel-rpc-port", "dp_rpc_port", recipe_defaults.get("dp_rpc_port"))),
    }


def complete(plan_result, hostvars_of, recipe_defaults):
    """``plan_result`` with every host plan holding NEW_KEYS (existing keys kept). ``hostvars_of(host)`` -> dict."""
    out = dict(plan_result)
    plans = {}
    for host, plan in (plan_result.get("plans") or {}).items():
        plan = dict(plan)
        todo = [k for k in NEW_KEYS if k not in plan]
        if todo:
            derived = _derived(plan, hostvars_of(host), recipe_defaults)
            plan.update((k, derived[k]) for k in todo)
        plans[host] = plan
    out["plans"] = plans
    return out
