# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Inventory topology -> validated per-node vLLM launch plans (pure functions, no I/O).

``build_cluster_plan(nodes, recipe, snapshots)`` takes

* ``nodes``: the inventory's cluster hosts in inventory order, each
  ``{"host": name, "head": bool, "vars": {variable: value}}`` (``vars`` holds the ``kimi_k3_*`` variables,
  ``ansible_host`` and ``inventory_hostname`` as Ansible resolves them for that host);
* ``recipe``: the recipe document (``data/recipes/kimi_k3.yml``);
* ``snapshots``: ``{vllm_version: flag snapshot}`` (``data/vllm_flags/vllm-<version>.json``),

and returns ``{"ok", "errors", "warnings", "cluster", "plans"}``. Every problem is collected (not just the
first); each names the host, the variable and the fix. Recipe knowledge stays in the recipe document: this
module only knows how to layer it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import hashlib
import json
import re
import shlex

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils import vllm_flags

PREFIX = "kimi_k3_"
DIGEST_RE = re.compile(r"^(?P<repo>[^@\s]+)@sha256:(?P<hex>[0-9a-f]{64})$")
SECRET_ENV = {"api_key": "VLLM_API_KEY", "hf_token": "HF_TOKEN"}
STRATEGY_NAMES = ("single_node_tp", "multi_node_tp", "multi_node_tep", "multi_node_tp_pp", "multi_node_dep",
                  "multi_node_tp_dp")

# Cluster-wide variables: name (without prefix) -> default (None = required or recipe-derived).
CLUSTER_VARS = {
    "accelerator": None,
    "gpus_per_node": None,
    "strategy": None,
    "tensor_parallel_size": None,
    "pipeline_parallel_size": None,
    "data_parallel_size": None,
    "dp_lb_mode": None,
    "interconnect": None,
    "all2all_backend": None,
    "moe_backend": None,
    "variant": "default",
    "model": None,
    "served_model_name": None,
    "features": None,
    "max_model_len": None,
    "kv_cache_dtype": None,
    "v2_model_runner": None,
    "rust_frontend": None,
    "socket_ifname": None,
    "nccl_nvls_enable": True,
    "vllm_version": None,
    "image": None,
    "allow_unpinned_image": False,
    "model_cache_dir": None,
    "api_port": None,
    "master_port": None,
    "dp_rpc_port": None,
    "extra_args": None,
    "extra_env": None,
    "container_name": None,
    "shm_size": None,
    "memlock": None,
    "restart_policy": "no",
}
# Secrets are checked for presence only; their values never enter a plan.
SECRET_VARS = ("api_key", "hf_token")


def _problem(host, variable, message, fix):
    return {"host": host, "variable": variable, "message": message, "fix": fix}


def format_problem(p):
    """One line an operator can act on: host, variable, what is wrong, what to do."""
    var = p["variable"] or "-"
    return "%s: %s: %s Fix: %s" % (p["host"], var, p["message"], p["fix"])


def _version_key(version):
    parts = []
    for piece in str(version).split("."):
        m = re.match(r"(\d+)", piece)
        parts.append(int(m.group(1)) if m else 0)
    return tuple(parts)


def pick_versioned(mapping, version):
    """Value of ``mapping`` ({version: value}) for the greatest key <= ``version``; None below all keys."""
    best = None
    for key in sorted(mapping, key=_version_key):
        if _version_key(key) <= _version_key(version):
            best = mapping[key]
    return best


def _eval_size(expr, gpus_per_node, nnodes):
    """Evaluate a recipe size expression such as ``G*N``, ``G``, ``N`` or ``1``."""
    value = 1
    for factor in str(expr).split("*"):
        factor = factor.strip()
        if factor == "G":
            value *= gpus_per_node
        elif factor == "N":
            value *= nnodes
        else:
            value *= int(factor)
    return value


def _as_int(value):
    if isinstance(value, bool):
        raise ValueError("boolean is not an integer")
    return int(value)


def _as_bool(value):
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "yes", "on", "1"):
        return True
    if isinstance(value, str) and value.strip().lower() in ("false", "no", "off", "0", ""):
        return False
    if isinstance(value, int):
        return bool(value)
    raise ValueError("not a boolean: %r" % (value,))


def _cluster_settings(nodes, errors):
    """Read cluster-wide variables; they must agree on every node (else: a problem naming both hosts)."""
    settings = {}
    for name, default in CLUSTER_VARS.items():
        var = PREFIX + name
        seen = []
        for node in nodes:
            if var in node["vars"] and node["vars"][var] is not None:
                seen.append((node["host"], node["vars"][var]))
        if not seen:
            settings[name] = copy.deepcopy(default)
            continue
        first_host, first = seen[0]
        for host, value in seen[1:]:
            if value != first:
                errors.append(_problem(host, var, "differs between %s (%r) and %s (%r); it is cluster-wide."
                                       % (first_host, first, host, value),
                                       "set %s once in group_vars/vllm_cluster." % var))
                break
        settings[name] = copy.deepcopy(first)
    settings["secrets"] = {}
    for name in SECRET_VARS:
        present = any(node["vars"].get(PREFIX + name) for node in nodes)
        settings["secrets"][name] = present
    return settings


def _order_nodes(nodes, errors):
    """Return nodes sorted by rank with ``rank`` set; exactly one head, head is rank 0, ranks unique."""
    heads = [n for n in nodes if n.get("head")]
    if len(heads) != 1:
        errors.append(_problem("vllm_head", "vllm_head",
                               "the head group must hold exactly one host, it holds %d (%s)."
                               % (len(heads), ", ".join(n["host"] for n in heads) or "none"),
                               "put the rank-0 node (alone) in the vllm_head group."))
    explicit = [n for n in nodes if n["vars"].get(PREFIX + "node_rank") is not None]
    ordered = []
    if explicit and len(explicit) != len(nodes):
        missing = [n["host"] for n in nodes if n not in explicit]
        errors.append(_problem(", ".join(missing), PREFIX + "node_rank",
                               "is set on some nodes but not on %s." % ", ".join(missing),
                               "set kimi_k3_node_rank on every node or on none (then the head is 0 and workers "
                               "follow in inventory order)."))
    if explicit and len(explicit) == len(nodes):
        by_rank = {}
        for node in nodes:
            try:
                rank = _as_int(node["vars"][PREFIX + "node_rank"])
            except (TypeError, ValueError):
                errors.append(_problem(node["host"], PREFIX + "node_rank", "is not an integer (%r)."
                                       % (node["vars"][PREFIX + "node_rank"],), "use 0..N-1."))
                continue
            if rank in by_rank:
                errors.append(_problem(node["host"], PREFIX + "node_rank",
                                       "rank %d is also given to %s." % (rank, by_rank[rank]["host"]),
                                       "give every node a distinct rank 0..N-1."))
                continue
            by_rank[rank] = node
            node = dict(node, rank=rank)
            ordered.append(node)
        ordered.sort(key=lambda n: n["rank"])
        ranks = [n["rank"] for n in ordered]
        if ranks and ranks != list(range(len(ranks))):
            errors.append(_problem(", ".join(n["host"] for n in ordered), PREFIX + "node_rank",
                                   "ranks %s are not 0..%d." % (ranks, len(nodes) - 1),
                                   "number the nodes 0..N-1 without gaps."))
        if ordered and heads and ordered[0]["host"] != heads[0]["host"]:
            errors.append(_problem(heads[0]["host"], PREFIX + "node_rank",
                                   "the head (vllm_head) must be rank 0, but rank 0 is %s." % ordered[0]["host"],
                                   "give the vllm_head host kimi_k3_node_rank: 0."))
    else:
        head = heads[0] if heads else None
        rest = [n for n in nodes if n is not head]
        ordered = [dict(n, rank=i) for i, n in enumerate(([head] if head else []) + rest)]
    return ordered


def internal_address(host, host_vars):
    """A node's cluster-internal address: kimi_k3_internal_address, else ansible_host, else the inventory name."""
    return host_vars.get(PREFIX + "internal_address") or host_vars.get("ansible_host") or host


def _address(node):
    return internal_address(node["host"], node["vars"])


def _api_host(node):
    return node["vars"].get(PREFIX + "api_host") or "0.0.0.0"


def _check_image(s, vendor, recipe, errors, where):
    image = s["image"]
    if not image:
        errors.append(_problem(where, PREFIX + "image", "is not set.",
                               "set the vLLM image by digest, e.g. vllm/vllm-openai@sha256:<64 hex>."))
        return
    unpinned_ok = _as_bool(s["allow_unpinned_image"])
    if not DIGEST_RE.match(str(image)):
        if "@sha256:" in str(image):
            errors.append(_problem(where, PREFIX + "image", "%r has a malformed digest." % (image,),
                                   "use repo@sha256:<64 lowercase hex> as printed by `docker buildx imagetools "
                                   "inspect` or the registry."))
        elif not unpinned_ok:
            errors.append(_problem(where, PREFIX + "image", "%r is not pinned by digest." % (image,),
                                   "use repo@sha256:<digest> (a tag can move under a running cluster), or set "
                                   "kimi_k3_allow_unpinned_image: true to accept the risk."))
    repo = str(image).split("@", 1)[0].lower()
    amd_markers = recipe.get("image_vendor_markers", {}).get("amd", [])
    is_amd_image = any(marker in repo for marker in amd_markers)
    if vendor == "nvidia" and is_amd_image:
        errors.append(_problem(where, PREFIX + "image", "%r is a ROCm image but the nodes are NVIDIA (%s)."
                               % (image, s["accelerator"]), "use a vllm/vllm-openai (CUDA 13) image digest."))
    if vendor == "amd" and not is_amd_image:
        errors.append(_problem(where, PREFIX + "image", "%r is not a ROCm image but the nodes are AMD (%s)."
                               % (image, s["accelerator"]), "use a vllm/vllm-openai-rocm image digest."))


def _features(s, recipe, errors, where):
    wanted = {name: spec.get("default", False) for name, spec in recipe["features"].items()}
    given = s["features"] or {}
    if not isinstance(given, dict):
        errors.append(_problem(where, PREFIX + "features", "must be a mapping of feature: true/false.",
                               "e.g. {tool_calling: true, reasoning: true, spec_decoding: false}."))
        return wanted
    for name, value in given.items():
        if name not in wanted:
            errors.append(_problem(where, PREFIX + "features", "unknown feature %r." % (name,),
                                   "use one of %s." % ", ".join(sorted(wanted))))
            continue
        try:
            wanted[name] = _as_bool(value)
        except ValueError:
            errors.append(_problem(where, PREFIX + "features", "%s: %r is not a boolean." % (name, value),
                                   "use true or false."))
    return wanted


def _resolve(nodes, recipe, snapshots, errors, warnings):
    """Validate the cluster and compute every derived setting; returns a context dict."""
    s = _cluster_settings(nodes, errors)
    ordered = _order_nodes(nodes, errors)
    head = ordered[0] if ordered else None
    where = head["host"] if head else "vllm_cluster"
    nnodes = len(ordered)
    ctx = {"settings": s, "nodes": ordered, "nnodes": nnodes, "head": head}
    defaults = recipe["defaults"]

    # Accelerator and GPUs per node.
    hw_name = s["accelerator"]
    hw = recipe["hardware"].get(str(hw_name).lower()) if hw_name else None
    if hw_name is None:
        errors.append(_problem(where, PREFIX + "accelerator", "is not set.",
                               "set it to one of %s." % ", ".join(sorted(recipe["hardware"]))))
    elif hw is None:
        errors.append(_problem(where, PREFIX + "accelerator", "%r is not a supported accelerator." % (hw_name,),
                               "use one of %s." % ", ".join(sorted(recipe["hardware"]))))
    ctx["hw"] = hw or {}
    ctx["accelerator"] = str(hw_name).lower() if hw else None
    vendor = ctx["hw"].get("vendor")
    ctx["vendor"] = vendor
    gpn = s["gpus_per_node"]
    if gpn is None:
        gpn = ctx["hw"].get("gpus_per_node")
    else:
        try:
            gpn = _as_int(gpn)
        except (TypeError, ValueError):
            errors.append(_problem(where, PREFIX + "gpus_per_node", "%r is not an integer." % (gpn,),
                                   "set the number of GPUs per node."))
            gpn = None
    if hw and gpn is not None and (gpn < 1 or gpn > hw["gpus_per_node"]):
        errors.append(_problem(where, PREFIX + "gpus_per_node",
                               "%d GPUs per node, but a %s node has %d." % (
                                   gpn, ctx["accelerator"], hw["gpus_per_node"]),
                               "use at most %d (a %s node%s)." % (hw["gpus_per_node"], ctx["accelerator"],
                                                                  " is one 4-GPU tray" if hw.get("gb_tray") else "")))
    ctx["gpus_per_node"] = gpn
    total = (gpn or 0) * nnodes
    ctx["total_gpus"] = total

    # vLLM version and its flag snapshot.
    version = str(s["vllm_version"] or defaults["vllm_version"])
    ctx["vllm_version"] = version
    ctx["snapshot"] = snapshots.get(version)
    if ctx["snapshot"] is None:
        errors.append(_problem(where, PREFIX + "vllm_version",
                               "no flag snapshot for vLLM %s, so its arguments cannot be checked." % version,
                               "use one of %s, or add data/vllm_flags/vllm-%s.json with "
                               "scripts/dump_vllm_flags.py." % (", ".join(sorted(snapshots, key=_version_key)),
                                                                version)))
    if _version_key(version) < _version_key(recipe["min_vllm_version"]):
        errors.append(_problem(where, PREFIX + "vllm_version", "vLLM %s cannot run Kimi-K3 (needs >= %s)."
                               % (version, recipe["min_vllm_version"]),
                               "use an image with vLLM >= %s." % recipe["min_vllm_version"]))

    # Strategy.
    strategy_name = s["strategy"]
    strategy = recipe["strategies"].get(strategy_name) if strategy_name else None
    if strategy_name is None:
        errors.append(_problem(where, PREFIX + "strategy", "is not set.",
                               "set one of %s." % ", ".join(recipe["strategies"])))
    elif strategy is None:
        errors.append(_problem(where, PREFIX + "strategy", "%r is not a known strategy." % (strategy_name,),
                               "use one of %s." % ", ".join(recipe["strategies"])))
    strategy = strategy or {}
    ctx["strategy_name"] = strategy_name
    ctx["strategy"] = strategy
    launch = strategy.get("launch")
    ctx["launch"] = launch
    if strategy and nnodes:
        if strategy.get("max_nodes") and nnodes > strategy["max_nodes"]:
            errors.append(_problem(where, PREFIX + "strategy",
                                   "%s runs on one node, but vllm_cluster has %d nodes." % (strategy_name, nnodes),
                                   "use a multi_node_* strategy, or keep one host in vllm_cluster."))
        if strategy.get("min_nodes") and nnodes < strategy["min_nodes"]:
            errors.append(_problem(where, PREFIX + "strategy",
                                   "%s needs at least %d nodes, vllm_cluster has %d."
                                   % (strategy_name, strategy["min_nodes"], nnodes),
                                   "add nodes to vllm_workers or use single_node_tp."))
        if gpn and total < strategy.get("min_gpus", 0):
            errors.append(_problem(where, PREFIX + "strategy",
                                   "%s needs at least %d GPUs, the cluster has %d (%d nodes x %d)."
                                   % (strategy_name, strategy["min_gpus"], total, nnodes, gpn),
                                   "add nodes (a %s node has %d GPUs) or choose a smaller strategy."
                                   % (ctx["accelerator"], ctx["hw"].get("gpus_per_node", 0))))
        if ctx["accelerator"] in strategy.get("unsupported_hardware", []):
            errors.append(_problem(where, PREFIX + "strategy", "%s is not supported on %s by the recipe."
                                   % (strategy_name, ctx["accelerator"]),
                                   "use multi_node_tp, multi_node_tep or multi_node_tp_dp on this hardware."))
        only = strategy.get("only_hardware")
        if only and ctx["accelerator"] and ctx["accelerator"] not in only:
            errors.append(_problem(where, PREFIX + "strategy", "%s is only offered for %s, not %s."
                                   % (strategy_name, ", ".join(only), ctx["accelerator"]),
                                   "use multi_node_dep or multi_node_tp_pp on this hardware."))

    # Parallel sizes.
    sizes = {}
    for key, var in (("tp", "tensor_parallel_size"), ("pp", "pipeline_parallel_size"), ("dp", "data_parallel_size")):
        given = s[var]
        if given is not None:
            try:
                sizes[key] = _as_int(given)
            except (TypeError, ValueError):
                errors.append(_problem(where, PREFIX + var, "%r is not an integer." % (given,), "use a positive integer."))
                sizes[key] = 1
        elif strategy and gpn:
            sizes[key] = _eval_size(strategy["sizes"][key], gpn, nnodes)
        else:
            sizes[key] = 1
    ctx["sizes"] = sizes
    if strategy and gpn and sizes["tp"] * sizes["pp"] * sizes["dp"] != total:
        errors.append(_problem(where, "%stensor_parallel_size/%spipeline_parallel_size/%sdata_parallel_size"
                               % (PREFIX, PREFIX, PREFIX),
                               "TP %d x PP %d x DP %d = %d, but the cluster has %d GPUs (%d nodes x %d)."
                               % (sizes["tp"], sizes["pp"], sizes["dp"], sizes["tp"] * sizes["pp"] * sizes["dp"],
                                  total, nnodes, gpn),
                               "make the product equal nodes x GPUs per node, or drop the overrides to use the "
                               "strategy's sizes."))
    if launch == "dp" and nnodes and sizes["dp"] % nnodes == 0:
        ctx["dp_local"] = sizes["dp"] // nnodes
    elif launch == "dp" and nnodes:
        ctx["dp_local"] = None
        errors.append(_problem(where, PREFIX + "data_parallel_size", "DP %d does not divide over %d nodes."
                               % (sizes["dp"], nnodes), "use a multiple of the node count."))
    else:
        ctx["dp_local"] = None
    if launch == "single" and sizes["pp"] * sizes["dp"] != 1:
        errors.append(_problem(where, PREFIX + "strategy", "single_node_tp uses tensor parallelism only.",
                               "drop kimi_k3_pipeline_parallel_size / kimi_k3_data_parallel_size."))

    # Load balancing (DP strategies only).
    lb = s["dp_lb_mode"]
    if launch == "dp":
        lb = lb or strategy.get("default_lb_mode")
        if lb not in strategy.get("lb_modes", []):
            errors.append(_problem(where, PREFIX + "dp_lb_mode", "%r is not available for %s." % (lb, strategy_name),
                                   "use one of %s." % ", ".join(strategy.get("lb_modes", []))))
        if lb == "hybrid" and ctx["dp_local"] == 1:
            errors.append(_problem(where, PREFIX + "dp_lb_mode",
                                   "hybrid load balancing with one DP rank per node turns into external LB in vLLM.",
                                   "set kimi_k3_dp_lb_mode: external (one endpoint per node) or internal."))
        if lb == "external" and ctx["dp_local"] not in (None, 1):
            errors.append(_problem(where, PREFIX + "dp_lb_mode",
                                   "external load balancing needs one DP rank per vllm serve, this layout has %s "
                                   "per node." % ctx["dp_local"],
                                   "use hybrid or internal load balancing."))
    elif lb is not None:
        errors.append(_problem(where, PREFIX + "dp_lb_mode", "is set but %s has no data parallelism."
                               % strategy_name, "remove kimi_k3_dp_lb_mode."))
    ctx["lb_mode"] = lb if launch == "dp" else None

    # Interconnect, all2all and MoE backend.
    interconnect = s["interconnect"]
    if nnodes > 1 and interconnect is None:
        errors.append(_problem(where, PREFIX + "interconnect", "is not set for a %d-node cluster." % nnodes,
                               "set nvlink (GB200/GB300 trays in one NVL72 domain) or rdma (IB/RoCE)."))
    elif interconnect is not None and interconnect not in recipe["interconnects"]:
        errors.append(_problem(where, PREFIX + "interconnect", "%r is not known." % (interconnect,),
                               "use one of %s." % ", ".join(recipe["interconnects"])))
        interconnect = None
    if interconnect == "nvlink" and nnodes > 1 and hw and not hw.get("gb_tray"):
        errors.append(_problem(where, PREFIX + "interconnect",
                               "multi-node NVLink needs GB200/GB300 NVL trays, not %s." % ctx["accelerator"],
                               "use rdma between %s nodes." % ctx["accelerator"]))
    ctx["interconnect"] = interconnect
    ep = bool(strategy.get("expert_parallel"))
    ctx["expert_parallel"] = ep
    all2all = s["all2all_backend"]
    if all2all is None and ep and nnodes > 1 and interconnect:
        all2all = recipe["interconnects"][interconnect]["all2all_backend"]
    ctx["all2all_backend"] = all2all
    moe = s["moe_backend"]
    ctx["moe_backend_override"] = moe
    features = _features(s, recipe, errors, where)
    ctx["features"] = features
    for name, enabled in features.items():
        spec = recipe["features"][name]
        if not enabled:
            continue
        if name in strategy.get("forbidden_features", []):
            errors.append(_problem(where, PREFIX + "features", "%s is not allowed with %s." % (name, strategy_name),
                                   "turn %s off or pick another strategy." % name))
        if spec.get("only_strategies") and strategy_name not in spec["only_strategies"]:
            errors.append(_problem(where, PREFIX + "features", "%s is only available with %s."
                                   % (name, ", ".join(spec["only_strategies"])),
                                   "turn %s off for %s." % (name, strategy_name)))
        if spec.get("dcp_size") and sizes["tp"] % spec["dcp_size"] != 0:
            errors.append(_problem(where, PREFIX + "features", "DCP size %d does not divide TP %d."
                                   % (spec["dcp_size"], sizes["tp"]), "use TP 8 on one 8-GPU node or turn dcp off."))
    ctx["warnings"] = warnings
    if nnodes > 1 and not s["socket_ifname"]:
        warnings.append(_problem(where, PREFIX + "socket_ifname",
                                 "is not set; NCCL/Gloo pick an interface themselves (a wrong pick hangs start-up).",
                                 "set the cluster-internal interface name, e.g. bond0."))

    # Ports and addresses.
    ports = {}
    for key in ("api_port", "master_port", "dp_rpc_port"):
        value = s[key] if s[key] is not None else defaults[key]
        try:
            value = _as_int(value)
            if not 0 < value < 65536:
                raise ValueError
        except (TypeError, ValueError):
            errors.append(_problem(where, PREFIX + key, "%r is not a TCP port." % (value,), "use 1-65535."))
            value = defaults[key]
        ports[key] = value
    ctx["ports"] = ports
    used = {}
    for key, value in ports.items():
        relevant = key == "api_port" or (key == "master_port" and launch == "mp") or \
            (key == "dp_rpc_port" and launch == "dp")
        if relevant and value in used:
            errors.append(_problem(where, PREFIX + key, "port %d is also %s." % (value, PREFIX + used[value]),
                                   "give the API, rendezvous and RPC ports distinct numbers."))
        if relevant:
            used[value] = key
    seen_addr = {}
    for node in ordered:
        addr = _address(node)
        if addr in seen_addr:
            errors.append(_problem(node["host"], PREFIX + "internal_address",
                                   "%s is also the address of %s." % (addr, seen_addr[addr]),
                                   "give every node its own cluster-internal address (kimi_k3_internal_address "
                                   "or ansible_host)."))
        seen_addr[addr] = node["host"]
    if hw:
        _check_image(s, vendor, recipe, errors, where)

    # User arguments and environment.
    extra_args = s["extra_args"] or []
    if not isinstance(extra_args, list) or not all(isinstance(a, (str, int, float)) and not isinstance(a, bool)
                                                   for a in extra_args):
        errors.append(_problem(where, PREFIX + "extra_args", "must be a list of strings.",
                               "write each flag and each value as its own list item."))
        extra_args = []
    extra_args = [str(a) for a in extra_args]
    for option, _values in vllm_flags.split_units(extra_args)[1]:
        name = option.split("=", 1)[0]
        snap = ctx["snapshot"]
        canonical = vllm_flags.canonical_flag(name, snap) if snap else name
        for reserved, fix in recipe.get("reserved_args", {}).items():
            if canonical == reserved or name == reserved:
                errors.append(_problem(where, PREFIX + "extra_args", "%s must not be passed by hand." % name, fix + "."))
    ctx["extra_args"] = extra_args
    extra_env = s["extra_env"] or {}
    if not isinstance(extra_env, dict):
        errors.append(_problem(where, PREFIX + "extra_env", "must be a mapping NAME: value.", "fix the YAML."))
        extra_env = {}
    for name in extra_env:
        if name in recipe.get("removed_env", {}):
            errors.append(_problem(where, PREFIX + "extra_env", "%s no longer exists in vLLM." % name,
                                   recipe["removed_env"][name] + "."))
        if name in SECRET_ENV.values():
            errors.append(_problem(where, PREFIX + "extra_env", "%s is a secret and would land in the plan." % name,
                                   "set kimi_k3_api_key / kimi_k3_hf_token (vault) instead."))
    ctx["extra_env"] = {str(k): _env_str(v) for k, v in extra_env.items()}
    return ctx


def _env_str(value):
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def _node_args(ctx, node, recipe):
    """The argv layers for one node, before de-duplication."""
    s = ctx["settings"]
    strategy = ctx["strategy"]
    variant = recipe["variants"].get(s["variant"], recipe["variants"]["default"])
    model = s["model"] or variant["model"]
    args = [model] + list(recipe["base_args"])
    sizes = ctx["sizes"]
    rank = node["rank"]
    head_addr = _address(ctx["head"])
    ports = ctx["ports"]
    defaults = recipe["defaults"]
    layer = []
    if ctx["expert_parallel"]:
        layer.append("--enable-expert-parallel")
    launch = ctx["launch"]
    if launch in ("single", "mp"):
        layer += ["--tensor-parallel-size", str(sizes["tp"])]
        if sizes["pp"] > 1:
            layer += ["--pipeline-parallel-size", str(sizes["pp"])]
    if launch == "mp":
        layer += ["--nnodes", str(ctx["nnodes"]), "--node-rank", str(rank), "--master-addr", head_addr]
        if ports["master_port"] != defaults["master_port"]:
            layer += ["--master-port", str(ports["master_port"])]
        if rank > 0:
            layer.append("--headless")
    if launch == "dp":
        if sizes["tp"] > 1:
            layer += ["--tensor-parallel-size", str(sizes["tp"])]
        if sizes["pp"] > 1:
            layer += ["--pipeline-parallel-size", str(sizes["pp"])]
        lb = ctx["lb_mode"]
        if lb == "hybrid":
            layer.append("--data-parallel-hybrid-lb")
        layer += ["--data-parallel-size", str(sizes["dp"])]
        if lb == "external":
            layer += ["--data-parallel-rank", str(rank)]
        else:
            layer += ["--data-parallel-size-local", str(ctx["dp_local"])]
        layer += ["--data-parallel-address", head_addr]
        if ports["dp_rpc_port"] != defaults["dp_rpc_port"]:
            layer += ["--data-parallel-rpc-port", str(ports["dp_rpc_port"])]
        if rank > 0 and lb != "external":
            layer += ["--data-parallel-start-rank", str(rank * ctx["dp_local"])]
            if lb == "internal":
                layer.append("--headless")
    args += layer
    args += list(strategy.get("args", []))
    override = recipe["hardware_overrides"].get(ctx["hw"].get("override"), {})
    args += list(override.get("args", []))
    args += list(strategy.get("hardware_overrides", {}).get(ctx["accelerator"], {}).get("args", []))
    for name, enabled in ctx["features"].items():
        if enabled:
            spec = recipe["features"][name]
            args += list(spec.get("args", []))
            args += list(spec.get("vendor_args", {}).get(ctx["vendor"], []))
    if ctx["all2all_backend"]:
        args += ["--all2all-backend", ctx["all2all_backend"]]
    if ctx["moe_backend_override"]:
        args += ["--moe-backend", str(ctx["moe_backend_override"])]
    if s["max_model_len"] is not None:
        args += ["--max-model-len", str(s["max_model_len"])]
    if s["kv_cache_dtype"] is not None:
        args += ["--kv-cache-dtype", str(s["kv_cache_dtype"])]
    if s["served_model_name"]:
        names = s["served_model_name"]
        args += ["--served-model-name"] + ([str(n) for n in names] if isinstance(names, list) else [str(names)])
    if serves_http(ctx, node):
        if _api_host(node) not in ("0.0.0.0", "", None):
            args += ["--host", _api_host(node)]
        if ports["api_port"] != defaults["api_port"]:
            args += ["--port", str(ports["api_port"])]
    args += ctx["extra_args"]
    return args


def serves_http(ctx, node):
    """Whether ``node`` runs an API server (head always; followers in hybrid/external DP)."""
    if node["rank"] == 0:
        return True
    return ctx["launch"] == "dp" and ctx["lb_mode"] in ("hybrid", "external")


def start_phase(ctx, node):
    """0 = start first, 1 = start once phase 0 runs. Followers that dial the head start after it; hybrid-LB
    nodes (each with its own API server) start together."""
    if node["rank"] == 0 or (ctx["launch"] == "dp" and ctx["lb_mode"] in ("hybrid", "external")):
        return 0
    return 1


def _node_env(ctx, recipe):
    s = ctx["settings"]
    env = {}
    override = recipe["hardware_overrides"].get(ctx["hw"].get("override"), {})
    if ctx["nnodes"] > 1 and s["socket_ifname"]:
        for key, value in recipe.get("multi_node_env", {}).items():
            env[key] = value.replace("{socket_ifname}", str(s["socket_ifname"]))
    env.update(override.get("env", {}))
    for item in override.get("versioned_env", []):
        name = pick_versioned(item["names"], ctx["vllm_version"])
        value = pick_versioned(item["values"], ctx["vllm_version"])
        if name is not None:
            env[name] = value
    env.update(ctx["strategy"].get("env", {}))
    if ctx["hw"].get("gb_tray") and ctx["nnodes"] > 1 and ctx["interconnect"] == "nvlink":
        env.update(recipe.get("mnnvl_env", {}))
        env["NCCL_NVLS_ENABLE"] = "1" if _as_bool(s["nccl_nvls_enable"]) else "0"
    if s["v2_model_runner"] is not None:
        env["VLLM_USE_V2_MODEL_RUNNER"] = "1" if _as_bool(s["v2_model_runner"]) else "0"
    if s["rust_frontend"] is not None:
        env["VLLM_USE_RUST_FRONTEND"] = "1" if _as_bool(s["rust_frontend"]) else "0"
    env.update(ctx["extra_env"])
    return {str(k): _env_str(v) for k, v in env.items()}


def _container(ctx, recipe, node):
    s = ctx["settings"]
    defaults = recipe["defaults"]
    memlock = s["memlock"] if s["memlock"] is not None else defaults["memlock"]
    cache = s["model_cache_dir"] or defaults["model_cache_dir"]
    c = {
        "name": s["container_name"] or defaults["container_name"],
        "network_mode": "host",
        "ipc_mode": "host",
        "shm_size": str(s["shm_size"] or defaults["shm_size"]),
        "ulimits": ["memlock:%s:%s" % (memlock, memlock), "stack:%d:%d" % (defaults["stack"], defaults["stack"])],
        "device_requests": [],
        "devices": [],
        "groups": [],
        "security_opts": [],
        "capabilities": ["IPC_LOCK"],
        "volumes": ["%s:%s" % (cache, defaults["container_cache_dir"])],
        "restart_policy": str(s["restart_policy"] or "no"),
        "labels": {
            "io.gpufleet.kimi_k3.role": "head" if node["rank"] == 0 else "worker",
            "io.gpufleet.kimi_k3.node_rank": str(node["rank"]),
            "io.gpufleet.kimi_k3.strategy": str(ctx["strategy_name"]),
        },
    }
    if ctx["vendor"] == "nvidia":
        c["device_requests"] = [{"driver": "nvidia", "count": -1, "capabilities": [["gpu"]]}]
        if ctx["hw"].get("gb_tray") and ctx["nnodes"] > 1 and ctx["interconnect"] == "nvlink":
            c["devices"].append("/dev/nvidia-caps-imex-channels/channel0:/dev/nvidia-caps-imex-channels/channel0:rwm")
    elif ctx["vendor"] == "amd":
        c["devices"] += ["/dev/kfd:/dev/kfd:rwm", "/dev/dri:/dev/dri:rwm"]
        c["groups"] = ["video"]
        c["security_opts"] = ["seccomp=unconfined"]
    if ctx["interconnect"] == "rdma" and ctx["nnodes"] > 1:
        c["devices"].append("/dev/infiniband:/dev/infiniband:rwm")
    return c


def docker_run_command(plan):
    """The ``docker run`` equivalent of a node plan, shell-quoted; secrets are named, never valued.

    Secret variables are passed as ``--env NAME`` (docker copies the value from the caller's environment).
    """
    c = plan["container"]
    q = shlex.quote

    def opt(name, value=None):
        return name if value is None else "%s %s" % (name, q(str(value)))

    chunks = ["docker run --detach", opt("--name", c["name"]), opt("--network", c["network_mode"]),
              opt("--ipc", c["ipc_mode"])]
    if c.get("ipc_mode") != "host" and c.get("shm_size"):
        chunks.append(opt("--shm-size", c["shm_size"]))
    for ulimit in c["ulimits"]:
        name, soft, hard = ulimit.split(":")
        chunks.append(opt("--ulimit", "%s=%s:%s" % (name, soft, hard)))
    for req in c["device_requests"]:
        if req.get("driver") == "nvidia":
            chunks.append(opt("--gpus", "all" if req.get("count") == -1 else req.get("count")))
    chunks += [opt("--device", d) for d in c["devices"]]
    chunks += [opt("--group-add", g) for g in c["groups"]]
    chunks += [opt("--security-opt", o) for o in c["security_opts"]]
    chunks += [opt("--cap-add", cap) for cap in c["capabilities"]]
    chunks += [opt("--volume", v) for v in c["volumes"]]
    chunks += [opt("--label", "%s=%s" % (k, c["labels"][k])) for k in sorted(c.get("labels", {}))]
    chunks.append(opt("--restart", c["restart_policy"]))
    chunks += [opt("--env", "%s=%s" % (k, plan["env"][k])) for k in sorted(plan["env"])]
    chunks += [opt("--env", k) for k in plan.get("secret_env", [])]
    chunks.append(q(plan["image"]))
    positional, units = vllm_flags.split_units(plan["vllm_args"])
    chunks.append(" ".join(q(p) for p in positional))
    chunks += [" ".join([q(name)] + [q(v) for v in values]) for name, values in units]
    lines = ["#!/bin/sh", "# %s (%s, node rank %d): equivalent of the planned container." %
             (plan["host"], plan["role"], plan["node_rank"])]
    if plan.get("secret_env"):
        lines.append("# Secrets are not written here: export %s before running." % " ".join(plan["secret_env"]))
    lines.append(" \\\n  ".join(chunks))
    return "\n".join(lines) + "\n"


def build_cluster_plan(nodes, recipe, snapshots):
    """Validate the inventory and render every node's plan. See the module docstring."""
    errors = []
    warnings = []
    if not nodes:
        errors.append(_problem("vllm_cluster", "vllm_cluster", "the group has no hosts.",
                               "list the nodes under vllm_head and vllm_workers."))
        return {"ok": False, "errors": errors, "warnings": warnings, "plans": {}, "cluster": {}}
    ctx = _resolve(nodes, recipe, snapshots, errors, warnings)
    plans = {}
    if not errors:
        env = _node_env(ctx, recipe)
        secret_env = [SECRET_ENV[k] for k in SECRET_VARS if ctx["settings"]["secrets"][k]]
        snapshot = ctx["snapshot"]
        for node in ctx["nodes"]:
            args = vllm_flags.dedupe_args(_node_args(ctx, node, recipe), snapshot)
            for problem in vllm_flags.check_argv(args, snapshot):
                var = PREFIX + "extra_args" if _from_extra(problem, ctx["extra_args"]) else PREFIX + "vllm_version"
                errors.append(_problem(node["host"], var, problem + ".",
                                       "remove or correct that argument, or target a vLLM version that accepts it."))
            _check_engine_rules(node, args, ctx, recipe, snapshot, errors)
            plan = {
                "host": node["host"],
                "role": "head" if node["rank"] == 0 else "worker",
                "node_rank": node["rank"],
                "nnodes": ctx["nnodes"],
                "strategy": ctx["strategy_name"],
                "accelerator": ctx["accelerator"],
                "vendor": ctx["vendor"],
                "interconnect": ctx["interconnect"],
                "vllm_version": ctx["vllm_version"],
                "image": str(ctx["settings"]["image"]),
                "internal_address": _address(node),
                "serves_http": serves_http(ctx, node),
                "start_phase": start_phase(ctx, node),
                "api_url": None,
                "env": dict(env),
                "secret_env": list(secret_env),
                "container": _container(ctx, recipe, node),
                "vllm_args": args,
            }
            if plan["serves_http"]:
                host = _api_host(node)
                host = _address(node) if host in ("0.0.0.0", "::", "") else host
                plan["api_url"] = "http://%s:%d" % (host, ctx["ports"]["api_port"])
            plan["container"]["labels"]["io.gpufleet.kimi_k3.plan_hash"] = plan_hash(plan)
            plans[node["host"]] = plan
    cluster = _cluster_summary(ctx, plans) if not errors else {}
    return {"ok": not errors, "errors": errors, "warnings": warnings,
            "plans": plans if not errors else {}, "cluster": cluster}


def _from_extra(problem, extra_args):
    return any(a.split("=", 1)[0] in problem for a in extra_args if vllm_flags.is_flag(a))


def _check_engine_rules(node, args, ctx, recipe, snapshot, errors):
    """Rules vLLM enforces after parsing (engine config) or that the recipe documents as limits."""
    host = node["host"]
    moe = vllm_flags.flag_value(args, "--moe-backend", snapshot)
    moe = moe[-1] if moe else None
    limits = recipe.get("moe_backends", {}).get(moe or "", {})
    ep = vllm_flags.flag_value(args, "--enable-expert-parallel", snapshot) is not None
    if limits.get("requires_expert_parallel") and not ep:
        errors.append(_problem(host, PREFIX + "moe_backend", "--moe-backend %s requires expert parallelism "
                               "(Kimi K3 MegaMoE requires expert parallel)." % moe,
                               "use multi_node_dep / multi_node_tep, or another --moe-backend."))
    if ctx["interconnect"] in limits.get("forbidden_interconnects", []) and ctx["nnodes"] > 1:
        errors.append(_problem(host, PREFIX + "moe_backend", "--moe-backend %s does not work over cross-node %s."
                               % (moe, ctx["interconnect"]),
                               "keep the MoE backend on auto over RDMA (kimi_k3_moe_backend: auto)."))
    if limits.get("vendors") and ctx["vendor"] not in limits["vendors"]:
        errors.append(_problem(host, PREFIX + "moe_backend", "--moe-backend %s is not available on %s."
                               % (moe, ctx["vendor"]), "use auto or aiter on AMD."))
    headless = vllm_flags.flag_value(args, "--headless", snapshot) is not None
    hybrid = vllm_flags.flag_value(args, "--data-parallel-hybrid-lb", snapshot) is not None
    if headless and hybrid:
        errors.append(_problem(host, PREFIX + "dp_lb_mode", "data_parallel_hybrid_lb is not applicable in headless "
                               "mode.", "use kimi_k3_dp_lb_mode: internal for headless followers, or hybrid "
                               "without --headless."))
    if vllm_flags.flag_value(args, "--enable-auto-tool-choice", snapshot) is not None and \
            vllm_flags.flag_value(args, "--tool-call-parser", snapshot) is None:
        errors.append(_problem(host, PREFIX + "extra_args", "--enable-auto-tool-choice requires --tool-call-parser.",
                               "keep the tool_calling feature on (it adds both) or add --tool-call-parser kimi_k3."))


def _cluster_summary(ctx, plans):
    endpoints = [p["api_url"] for p in sorted(plans.values(), key=lambda p: p["node_rank"]) if p["serves_http"]]
    return {
        "strategy": ctx["strategy_name"],
        "accelerator": ctx["accelerator"],
        "vendor": ctx["vendor"],
        "nnodes": ctx["nnodes"],
        "gpus_per_node": ctx["gpus_per_node"],
        "total_gpus": ctx["total_gpus"],
        "tensor_parallel_size": ctx["sizes"]["tp"],
        "pipeline_parallel_size": ctx["sizes"]["pp"],
        "data_parallel_size": ctx["sizes"]["dp"],
        "dp_lb_mode": ctx["lb_mode"],
        "interconnect": ctx["interconnect"],
        "all2all_backend": ctx["all2all_backend"],
        "vllm_version": ctx["vllm_version"],
        "image": str(ctx["settings"]["image"]),
        "head": ctx["head"]["host"],
        "head_address": _address(ctx["head"]),
        "endpoints": endpoints,
        "order": [n["host"] for n in ctx["nodes"]],
    }


def summary_table(result):
    """A short human table of the plan (or of the problems)."""
    if not result["ok"]:
        lines = ["Plan refused: %d problem(s)" % len(result["errors"])]
        lines += ["  - " + format_problem(p) for p in result["errors"]]
        return "\n".join(lines)
    c = result["cluster"]
    lines = ["Kimi-K3 plan: %s on %d x %s (%d GPUs), TP %d x PP %d x DP %d%s, vLLM %s"
             % (c["strategy"], c["nnodes"], c["accelerator"], c["total_gpus"], c["tensor_parallel_size"],
                c["pipeline_parallel_size"], c["data_parallel_size"],
                (", LB %s" % c["dp_lb_mode"]) if c["dp_lb_mode"] else "", c["vllm_version"]),
             "image %s" % c["image"]]
    header = ("host", "rank", "role", "address", "http", "args")
    rows = [header]
    for host in c["order"]:
        p = result["plans"][host]
        rows.append((host, str(p["node_rank"]), p["role"], p["internal_address"],
                     p["api_url"] or "headless", str(len(p["vllm_args"]) - 1)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for r in rows:
        lines.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(r)).rstrip())
    for w in result["warnings"]:
        lines.append("warning: " + format_problem(w))
    return "\n".join(lines)


def plan_hash(plan):
    """Short hash of what the container runs (image, env, secret names, container settings, argv)."""
    container = dict(plan["container"])
    container["labels"] = dict((k, v) for k, v in container.get("labels", {}).items()
                               if not k.endswith(".plan_hash"))
    material = json.dumps([plan["image"], plan["env"], plan["secret_env"], container, plan["vllm_args"]],
                          sort_keys=True)
    return hashlib.sha256(material.encode("utf-8")).hexdigest()[:16]


def plan_json(plan):
    """Serialise one node plan (stable key order) for ``<host>.json``."""
    return json.dumps(plan, indent=2, sort_keys=True) + "\n"
