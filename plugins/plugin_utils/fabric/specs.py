# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fabric job's spec for every node of every deployment, built from the plan (controller side, pure).

The job (roles/fabric/files/fabric_job.py) reads nothing but its spec and the container's env; everything it
needs comes from ``plan_result`` plus the recipe's ``fabric`` section (vendor backends, dispatch sizes, the
ports peers dial, the expert-parallel kernels' tests). The judge of the results is ``fabric_report``.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import ipaddress

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan.contract import arg_value

PROTOCOL = "kimi-k3-fabric/1"
IFNAME_SUFFIXES = ("_SOCKET_IFNAME", "_SOCK_IFNAME")
COLLECTIVE_ENV_PREFIXES = ("NCCL_", "RCCL_")
NAME_ENV = ("VLLM_NIXL_SIDE_CHANNEL_HOST", "VLLM_HOST_IP")
NAME_FLAGS = ("--master-addr", "--data-parallel-address")
DEFAULT_OPTIONS = {"timeout_s": 60, "port_share": 0.5, "collect_env": False, "ep_timeout_s": 300,
                   "image_check_timeout_s": 180}


class FabricSpecError(ValueError):
    """A plan the fabric step cannot build a job from (message names host, setting and fix)."""


def deployments(plan_result):
    """[{name, head, hosts}] of the plan: cluster.deployments, or one deployment of every vLLM node."""
    cluster = plan_result.get("cluster") or {}
    plans = plan_result.get("plans") or {}
    found = cluster.get("deployments") or []
    if found:
        return [{"name": d["name"], "head": d["head"], "hosts": list(d["hosts"])} for d in found]
    hosts = [h for h in cluster.get("order") or sorted(plans) if plans.get(h, {}).get("role") != "router"]
    head = cluster.get("head") or next((h for h in hosts if plans[h].get("role") == "head"), hosts[0] if hosts else None)
    return [{"name": "main", "head": head, "hosts": hosts}] if hosts else []


def vendor_profile(fabric_data, plan):
    """The recipe's fabric entry for the plan's vendor, or FabricSpecError naming the host."""
    vendors = fabric_data.get("vendors") or {}
    vendor = plan.get("vendor")
    if vendor not in vendors:
        known = ", ".join(sorted(vendors))
        raise FabricSpecError("%s: the fabric step has no backend for vendor %r (known: %s). Fix: add it under "
                              "fabric.vendors in data/recipes/kimi_k3.yml." % (plan.get("host"), vendor, known))
    return vendors[vendor]


def ranks_per_node(profile, cluster):
    """Processes per node: one per GPU of the plan, or the vendor's fixed number (1 on the CPU profile)."""
    value = profile.get("ranks_per_node", 1)
    if value == "gpus":
        return max(1, int(cluster.get("gpus_per_node") or 1))
    return max(1, int(value))


def socket_ifnames(env):
    """{variable: [interface, ...]} of every ``*_SOCKET_IFNAME`` in the plan's env (exclusions ``^x`` name none;
    NCCL's exact-match ``=x`` is the name x)."""
    out = {}
    for name in sorted(env or {}):
        if name.endswith(IFNAME_SUFFIXES):
            names = [n.strip().lstrip("=") for n in str(env[name]).split(",")]
            names = [n for n in names if n and not n.startswith("^")]
            if names:
                out[name] = names
    return out


def collective_env(env):
    """The plan's NCCL_* / RCCL_* settings: what the known-bad table (fabric.known_bad) is judged against."""
    return dict((k, str(v)) for k, v in sorted((env or {}).items()) if k.startswith(COLLECTIVE_ENV_PREFIXES))


def is_address(value):
    try:
        ipaddress.ip_address(str(value).strip("[]"))
        return True
    except ValueError:
        return False


def plan_names(plans):
    """Every host name (not an address literal) the deployment's plans use: addresses, env, rendezvous flags."""
    names = set()
    for plan in plans:
        env = plan.get("env") or {}
        values = [plan.get("internal_address")] + [env.get(k) for k in NAME_ENV]
        values += [arg_value(plan.get("vllm_args"), f) for f in NAME_FLAGS]
        names.update(str(v) for v in values if v and not is_address(v))
    return sorted(names)


def dp_across_nodes(plan):
    """Whether the plan's data-parallel ranks span nodes (the head then serves the DP RPC port to its peers)."""
    parallel = plan.get("parallel") or {}
    return parallel.get("dp_local") is not None and parallel["dp"] > parallel["dp_local"]


def node_ports(plan, is_head, fabric_data):
    """[{port, name}] this node serves its peers during serving (recipe fabric.ports), sorted by port."""
    ports = {}
    env = plan.get("env") or {}
    for entry in fabric_data.get("ports") or []:
        if entry.get("where") == "head" and not is_head:
            continue
        when = str(entry.get("when", "always"))
        if when == "dp_across_nodes" and not dp_across_nodes(plan):
            continue
        if when.startswith("env:") and not env.get(when[4:]):
            continue
        value = plan.get(entry["plan_key"]) if entry.get("plan_key") else env.get(entry.get("env"))
        if value not in (None, ""):
            ports.setdefault(int(value), entry["name"])
    return [{"port": p, "name": ports[p]} for p in sorted(ports)]


def message_sizes(plan, profile, fabric_data):
    """Bytes of the all-reduce, the all-to-all and the pairwise transfer at the plan's expert-parallel dispatch."""
    d = fabric_data["dispatch"]
    tokens = arg_value(plan.get("vllm_args"), "--max-num-batched-tokens")
    tokens = int(tokens) if tokens else int(d["default_tokens"])
    a2a = tokens * int(d["hidden_size"]) * int(d["dispatch_bytes"])
    ar = tokens * int(d["hidden_size"]) * int(d["all_reduce_bytes"])
    cap = profile.get("max_bytes")
    if cap:
        a2a, ar = min(a2a, int(cap)), min(ar, int(cap))
    return {"all_reduce": ar, "all_to_all": a2a, "pair": a2a, "iterations": int(fabric_data.get("iterations", 5)),
            "tokens": tokens, "capped_at": int(cap) if cap else None}


def ep_kernel(plan, nnodes, fabric_data):
    """The plan's expert-parallel kernel with its own tests (DeepEP, MoRI), or None."""
    backend = arg_value(plan.get("vllm_args"), "--all2all-backend")
    for entry in fabric_data.get("ep_kernels") or []:
        if backend in entry.get("backends", []):
            scope = "internode" if nnodes > 1 else "intranode"
            return {"backend": backend, "module": entry["module"], "runner": entry.get("runner", "script"),
                    "scope": scope, "tests": list(entry.get(scope) or [])}
    return None


def image_check(plan, opts):
    """What the image's own parser judges when kimi_k3_vllm_version is ``image``: the node's final argv (extra
    args included) and the VLLM_* names of its env and secrets (vllm/envs.py); None when the plan pinned a release
    (its flag snapshot judged the argv at plan time)."""
    if not plan.get("vllm_version_from_image"):
        return None
    names = sorted(set(list(plan.get("env") or {}) + list(plan.get("secret_env") or [])))
    return {"argv": list(plan.get("vllm_args") or []), "env_names": [n for n in names if n.startswith("VLLM_")],
            "timeout_s": float(opts["image_check_timeout_s"])}


def _node_entry(plan, is_head, fabric_data):
    return {"host": plan["host"], "address": plan["internal_address"], "node_rank": int(plan["node_rank"]),
            "ports": node_ports(plan, is_head, fabric_data)}


def deployment_specs(plan_result, deployment, fabric_data, options=None):
    """{host: job spec} for one deployment ({name, head, hosts}) of the plan."""
    opts = dict(DEFAULT_OPTIONS, **(options or {}))
    plans = plan_result["plans"]
    missing = [h for h in deployment["hosts"] if h not in plans]
    if missing:
        raise FabricSpecError("%s: not in the plan (plan_result.plans) - run the gpufleet.kimi_k3.plan role first."
                              % ", ".join(missing))
    members = sorted((plans[h] for h in deployment["hosts"]), key=lambda p: int(p["node_rank"]))
    head = plans[deployment["head"]]
    nodes = [_node_entry(p, p["host"] == head["host"], fabric_data) for p in members]
    names = plan_names(members)
    return dict((p["host"], _node_spec(p, head, nodes, names, plan_result, fabric_data, opts, deployment["name"]))
                for p in members)


def _node_spec(plan, head, nodes, names, plan_result, fabric_data, opts, name):
    profile = vendor_profile(fabric_data, plan)
    per = ranks_per_node(profile, plan_result.get("cluster") or {})
    return {
        "protocol": PROTOCOL, "deployment": name, "host": plan["host"], "address": plan["internal_address"],
        "node_rank": int(plan["node_rank"]), "nnodes": len(nodes), "local_ranks": per,
        "world_size": per * len(nodes), "backend": profile["backend"],
        "master_host": head["host"], "master_addr": head["internal_address"], "master_port": int(head["master_port"]),
        "ifnames": socket_ifnames(plan.get("env")), "nodes": copy.deepcopy(nodes), "names": list(names),
        "sizes": message_sizes(plan, profile, fabric_data), "ep_kernel": ep_kernel(plan, len(nodes), fabric_data),
        "timeout_s": float(opts["timeout_s"]), "port_share": float(opts["port_share"]),
        "ep_timeout_s": float(opts["ep_timeout_s"]), "collect_env": bool(opts["collect_env"]),
        "collective_env": collective_env(plan.get("env")), "image_check": image_check(plan, opts),
        "expect": {"vllm_version": str(plan["vllm_version"]), "vendor": plan["vendor"],
                   "torch_build": profile["torch_build"], "image": plan["image"],
                   "version_from_image": bool(plan.get("vllm_version_from_image"))},
    }


def build_specs(plan_result, fabric_data, options=None, hosts=None):
    """{"deployments": [{name, head, hosts}], "specs": {host: spec}} for every deployment with a host in
    ``hosts`` (default: all). A deployment is tested whole or not at all: its ranks join one group."""
    wanted = set(hosts) if hosts is not None else None
    out = {"deployments": [], "specs": {}}
    for dep in deployments(plan_result):
        if wanted is not None and not wanted.intersection(dep["hosts"]):
            continue
        if wanted is not None and not wanted.issuperset(dep["hosts"]):
            raise FabricSpecError("deployment %s: the play holds only %s of its hosts %s - the fabric job needs every "
                                  "rank of a deployment. Fix: run without --limit, or limit to whole deployments."
                                  % (dep["name"], ", ".join(sorted(wanted.intersection(dep["hosts"]))),
                                     ", ".join(dep["hosts"])))
        out["deployments"].append(dep)
        out["specs"].update(deployment_specs(plan_result, dep, fabric_data, options))
    return out
