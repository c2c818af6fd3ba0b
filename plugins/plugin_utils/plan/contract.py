# -*- coding: utf-8 -*-
# Copyright: gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The plan contract (docs/dev/architecture.md "Plan contract"): the keys of ``plan_result.plans[host]`` and of
``plan_result.cluster`` a role may read, each with its type, and the check the plan role's ``require`` task runs
for every role before it reads the plan.

Types are ``str``, ``int``, ``bool``, ``dict``, ``list``; a trailing ``?`` allows null. Only the top-level type is
checked: the cluster_plan action builds the values, the check catches a plan_result that is not its result (an
older collection's, or one edited by a play).
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

PREFIX = "kimi_k3_"

HOST_KEYS = {
    "host": "str", "role": "str", "deployment": "str", "deployment_kind": "str", "node_rank": "int", "nnodes": "int",
    "vendor": "str?", "accelerator": "str?", "strategy": "str?", "vllm_version": "str?", "image": "str",
    "image_pull": "dict",
    "internal_address": "str", "serves_http": "bool", "start_phase": "int", "api_url": "str?",
    "health_url": "str", "metrics_url": "str?", "api_base_url": "str?", "features": "dict",
    "container": "dict", "env": "dict", "secret_env": "list", "vllm_args": "list", "docker_host": "str",
    "docker_client": "dict", "engine_client": "dict",
    "model": "str", "model_revision": "str?", "model_cache_dir": "str?", "served_model_name": "str?",
    "api_host": "str", "api_port": "int", "master_port": "int?", "dp_rpc_port": "int?",
}
CLUSTER_KEYS = {
    "mode": "str", "deployments": "list", "router": "dict?", "head": "str", "head_address": "str",
    "order": "list", "endpoints": "list", "metrics_urls": "list", "monitoring": "dict", "api_access": "str",
    "strategy": "str", "accelerator": "str", "vendor": "str", "interconnect": "str?", "vllm_version": "str",
    "image": "str", "nnodes": "int", "gpus_per_node": "int", "total_gpus": "int", "tensor_parallel_size": "int",
    "pipeline_parallel_size": "int", "data_parallel_size": "int", "dp_lb_mode": "str?", "all2all_backend": "str?",
    "capacity": "dict?", "timeouts": "dict?", "smoke_pass_marks": "dict",
}
CONTRACT_KEYS = tuple(HOST_KEYS)
RUN_PLAN_FIRST = "run the gpufleet.kimi_k3.plan role first (every playbook of the collection does)"
_TYPES = {"str": (str,), "int": (int,), "bool": (bool,), "dict": (dict,), "list": (list, tuple)}


def type_ok(value, declared):
    """Whether ``value`` has the declared type (``int`` is no ``bool``)."""
    if value is None:
        return declared.endswith("?")
    name = declared.rstrip("?")
    if name == "int" and isinstance(value, bool):
        return False
    return isinstance(value, _TYPES[name])


def _type_name(value):
    return "null" if value is None else {bool: "bool", int: "int", float: "float"}.get(type(value)) or next(
        (n for n, t in _TYPES.items() if isinstance(value, t)), type(value).__name__)


def missing_keys(plan, keys=None):
    """Contract keys absent from one host's plan (``keys`` None: HOST_KEYS) or the cluster summary (CLUSTER_KEYS);
    ``plan`` may be None."""
    keys = HOST_KEYS if keys is None else keys
    if not isinstance(plan, dict):
        return list(keys)
    return [k for k in keys if k not in plan]


def wrong_types(mapping, keys=None):
    """``["key is <type>, expected <type>"]`` for every present contract key of the wrong type (``keys`` None:
    HOST_KEYS)."""
    keys = HOST_KEYS if keys is None else keys
    return ["%s is %s, expected %s" % (k, _type_name(mapping[k]), keys[k].replace("?", " or null"))
            for k in keys if k in mapping and not type_ok(mapping[k], keys[k])]


def _contract_problem(host, what, mapping, keys):
    missing = missing_keys(mapping, keys)
    if missing:
        return ("%s: the plan's %s lacks %s - the plan role is older than this role; update the collection."
                % (host, what, ", ".join(missing)))
    wrong = wrong_types(mapping, keys)
    if wrong:
        return ("%s: in the plan's %s, %s - plan_result is not the cluster_plan result; %s."
                % (host, what, "; ".join(wrong), RUN_PLAN_FIRST))
    return None


def _plans_of(plan_result, host):
    plans = plan_result.get("plans") if isinstance(plan_result, dict) else None
    if isinstance(plan_result, dict) and "plans" not in plan_result and plan_result.get("nodes"):
        raise ValueError("%s: plan_result holds no plans (the plan role ran with plan_return_plans: false, as "
                         "playbooks/plan.yml does) - apply gpufleet.kimi_k3.plan with plan_return_plans: true "
                         "before this role." % host)
    if not plans:
        raise ValueError("%s: plan_result is not set - %s." % (host, RUN_PLAN_FIRST))
    if host not in plans:
        raise ValueError("%s: the plan has no entry for this host (is it in group vllm_cluster?) - %s."
                         % (host, RUN_PLAN_FIRST))
    return plans


def require(plan_result, host):
    """One host's plan, or ValueError naming the host, the key and what to do: the host's plan and the cluster
    summary hold every contract key with its type."""
    plans = _plans_of(plan_result, host)
    problem = (_contract_problem(host, "entry for this host", plans[host], HOST_KEYS)
               or _contract_problem(host, "cluster summary", plan_result.get("cluster"), CLUSTER_KEYS))
    if problem:
        raise ValueError(problem)
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
