# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Inventory validators of the cluster plan, one per concern (pure functions, no I/O).

Every validator takes the plan context ``ctx`` (settings, ordered nodes, recipe, snapshots and what earlier
validators derived), records what it derives in ``ctx`` and returns its problems; each problem names the host,
the variable and the fix. ``resolve`` is the driver that runs them in order (plugin_utils.plan.topology calls it).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import redaction
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import variables as plan_variables
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import vllm_flags
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.common.coerce import to_bool, version_key
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan.variables import PREFIX

DIGEST_RE = re.compile(r"^(?P<repo>[^@\s]+)@sha256:(?P<hex>[0-9a-f]{64})\Z")
SECRET_ENV = {"api_key": "VLLM_API_KEY", "hf_token": "HF_TOKEN"}

SECRET_VARS = plan_variables.SECRET_KEYS
SIZE_VARS = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "gpus_per_node")


def problem(host, variable, message, fix):
    return {"host": host, "variable": variable, "message": message, "fix": fix}


def internal_address(host, host_vars):
    """A node's cluster-internal address: kimi_k3_internal_address, else ansible_host, else the inventory name."""
    return host_vars.get(PREFIX + "internal_address") or host_vars.get("ansible_host") or host


def node_address(node):
    """internal_address() of a node whose variables the table checked."""
    checked = node.get("settings", {}).get("internal_address")
    return checked or node["vars"].get("ansible_host") or node["host"]


def api_host(node):
    """Where the node's API binds (kimi_k3_api_host, default all addresses)."""
    return node.get("settings", {}).get("api_host") or "0.0.0.0"


def env_str(value):
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def eval_size(expr, gpus_per_node, nnodes):
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


# ----------------------------------------------------------------------------- settings and node order


def _default_order(nodes, heads):
    head = heads[0] if heads else None
    rest = [n for n in nodes if n is not head]
    return [dict(n, rank=i) for i, n in enumerate(([head] if head else []) + rest)]


def _explicit_order(nodes, heads, errors):
    """Nodes by kimi_k3_node_rank. A rank mistake is reported once; the nodes then keep the default order, so
    no GPU-count or node-count problem follows from it."""
    by_rank = {}
    for node in nodes:
        rank = node["settings"]["node_rank"]
        if rank in by_rank:
            errors.append(problem(node["host"], PREFIX + "node_rank",
                                  "rank %d is also given to %s." % (rank, by_rank[rank]["host"]),
                                  "give every node a distinct rank 0..%d." % (len(nodes) - 1)))
            return _default_order(nodes, heads)
        by_rank[rank] = node
    ordered = sorted((dict(n, rank=n["settings"]["node_rank"]) for n in nodes), key=lambda n: n["rank"])
    ranks = [n["rank"] for n in ordered]
    if ranks != list(range(len(ranks))):
        errors.append(problem(", ".join(n["host"] for n in ordered), PREFIX + "node_rank",
                              "ranks %s are not 0..%d." % (ranks, len(nodes) - 1),
                              "number the nodes 0..N-1 without gaps."))
        return _default_order(nodes, heads)
    if heads and ordered[0]["host"] != heads[0]["host"]:
        errors.append(problem(heads[0]["host"], PREFIX + "node_rank",
                              "the head (vllm_head) must be rank 0, but rank 0 is %s." % ordered[0]["host"],
                              "give the vllm_head host kimi_k3_node_rank: 0."))
        return _default_order(nodes, heads)
    return ordered


def _head_count_problem(nodes, heads, deployment):
    """Not one head: the hosts in vllm_head, and the kimi_k3_deployment mistake that often causes it."""
    names = ", ".join(n["host"] for n in heads) or "none"
    if len(heads) > 1:
        why = ("if %s head different deployments, kimi_k3_deployment gives them one name%s: give each deployment's "
               "group its own kimi_k3_deployment" % (names, " (%s)" % deployment if deployment else ""))
        return problem(nodes[0]["host"] if deployment else "vllm_head", "vllm_head",
                       "%s has %d hosts in vllm_head (%s); a deployment has exactly one head."
                       % ("deployment %s" % deployment if deployment else "the deployment", len(heads), names),
                       "%s; otherwise keep only the rank-0 node of %s in vllm_head."
                       % (why, "deployment %s" % deployment if deployment else "the deployment"))
    if deployment:
        hosts = ", ".join(n["host"] for n in nodes)
        return problem(nodes[0]["host"] if nodes else "vllm_head", "vllm_head",
                       "deployment %s (kimi_k3_deployment of %s) has no host in vllm_head." % (deployment, hosts),
                       "if %s belong to another deployment, list them under that deployment's group (it sets "
                       "kimi_k3_deployment); otherwise put the rank-0 node of deployment %s in vllm_head."
                       % (hosts, deployment))
    return problem("vllm_head", "vllm_head", "the head group holds no host.",
                   "put the rank-0 node (alone) in the vllm_head group.")


def order_nodes(nodes, errors, invalid=(), deployment=None):
    """Return nodes sorted by rank with ``rank`` set; exactly one head, head is rank 0, ranks unique.
    ``deployment``: the deployment's name when the inventory holds several (each has its own head)."""
    heads = [n for n in nodes if n.get("head")]
    if len(heads) != 1:
        errors.append(_head_count_problem(nodes, heads, deployment))
    if "node_rank" in invalid:
        return _default_order(nodes, heads)
    explicit = [n for n in nodes if n["settings"]["node_rank"] is not None]
    if explicit and len(explicit) != len(nodes):
        missing = [n["host"] for n in nodes if n not in explicit]
        errors.append(problem(", ".join(missing), PREFIX + "node_rank",
                              "is set on some nodes but not on %s." % ", ".join(missing),
                              "set kimi_k3_node_rank on every node or on none (then the head is 0 and workers "
                              "follow in inventory order)."))
    if explicit and len(explicit) == len(nodes):
        return _explicit_order(nodes, heads, errors)
    return _default_order(nodes, heads)


# ----------------------------------------------------------------------------- hardware


def validate_hardware(ctx):
    """Accelerator and GPUs per node."""
    s, recipe, where, errors = ctx["settings"], ctx["recipe"], ctx["where"], []
    hw_name = s["accelerator"]
    hw = recipe["hardware"].get(str(hw_name).lower()) if hw_name else None
    if hw_name is None and "accelerator" not in ctx["invalid"]:
        errors.append(problem(where, PREFIX + "accelerator", "is not set.",
                              "set it to one of %s." % ", ".join(sorted(recipe["hardware"]))))
    ctx["hw"] = hw or {}
    ctx["accelerator"] = str(hw_name).lower() if hw else None
    ctx["vendor"] = ctx["hw"].get("vendor")
    gpn = s["gpus_per_node"]
    if gpn is None and "gpus_per_node" not in ctx["invalid"]:
        gpn = ctx["hw"].get("gpus_per_node")
    if hw and gpn is not None and gpn > hw["gpus_per_node"]:
        errors.append(problem(where, PREFIX + "gpus_per_node",
                              "%d GPUs per node, but a %s node has %d." % (
                                  gpn, ctx["accelerator"], hw["gpus_per_node"]),
                              "use at most %d (a %s node%s)." % (hw["gpus_per_node"], ctx["accelerator"],
                                                                 " is one 4-GPU tray" if hw.get("gb_tray") else "")))
    ctx["gpus_per_node"] = gpn
    ctx["total_gpus"] = (gpn or 0) * ctx["nnodes"]
    return errors


def validate_image(ctx):
    """The image: pinned by digest (unless allowed) and built for the nodes' vendor."""
    s, recipe, where, vendor, errors = ctx["settings"], ctx["recipe"], ctx["where"], ctx["vendor"], []
    if not ctx["hw"]:
        return errors
    image = s["image"]
    if not image and "image" in ctx["invalid"]:
        return errors
    if not image:
        return [problem(where, PREFIX + "image", "is not set.",
                        "set the vLLM image by digest, e.g. vllm/vllm-openai@sha256:<64 hex>.")]
    unpinned_ok = s["allow_unpinned_image"]
    if not DIGEST_RE.match(str(image)):
        if "@sha256:" in str(image):
            errors.append(problem(where, PREFIX + "image", "%r has a malformed digest." % (image,),
                                  "use repo@sha256:<64 lowercase hex> as printed by `docker buildx imagetools "
                                  "inspect` or the registry."))
        elif not unpinned_ok:
            errors.append(problem(where, PREFIX + "image", "%r is not pinned by digest." % (image,),
                                  "use repo@sha256:<digest> (a tag can move under a running cluster), or set "
                                  "kimi_k3_allow_unpinned_image: true to accept the risk."))
    repo = str(image).split("@", 1)[0].lower()
    amd_markers = recipe.get("image_vendor_markers", {}).get("amd", [])
    is_amd_image = any(marker in repo for marker in amd_markers)
    if vendor == "nvidia" and is_amd_image:
        errors.append(problem(where, PREFIX + "image", "%r is a ROCm image but the nodes are NVIDIA (%s)."
                              % (image, s["accelerator"]), "use a vllm/vllm-openai (CUDA 13) image digest."))
    if vendor == "amd" and not is_amd_image:
        errors.append(problem(where, PREFIX + "image", "%r is not a ROCm image but the nodes are AMD (%s)."
                              % (image, s["accelerator"]), "use a vllm/vllm-openai-rocm image digest."))
    errors.extend(_cpu_image_problems(ctx, image, repo))
    return errors


def _cpu_image_problems(ctx, image, repo):
    """vLLM's CPU build and the GPU builds are not interchangeable: the CPU image serves on CPU nodes only."""
    markers = ctx["recipe"].get("image_vendor_markers", {}).get("cpu", [])
    is_cpu_image = any(marker in repo for marker in markers)
    if ctx["vendor"] == "cpu" and not is_cpu_image:
        return [problem(ctx["where"], PREFIX + "image", "%r is not an image of vLLM's CPU build but the nodes are "
                        "cpu nodes." % (image,), "use the rehearsal engine image (a repository named *cpu*, e.g. "
                        "vllm/vllm-openai-cpu) by digest.")]
    if ctx["vendor"] in ("nvidia", "amd") and is_cpu_image:
        return [problem(ctx["where"], PREFIX + "image", "%r is an image of vLLM's CPU build but the nodes are %s "
                        "(%s)." % (image, ctx["vendor"].upper(), ctx["settings"]["accelerator"]),
                        "use a %s image digest." % ("vllm/vllm-openai-rocm" if ctx["vendor"] == "amd"
                                                    else "vllm/vllm-openai (CUDA 13)"))]
    return []


# ----------------------------------------------------------------------------- version


def validate_version(ctx):
    """The target vLLM release can run Kimi-K3 (its flag snapshot exists: the variable table checks that)."""
    s, recipe, where, errors = ctx["settings"], ctx["recipe"], ctx["where"], []
    version = str(s["vllm_version"] or recipe["defaults"]["vllm_version"])
    ctx["vllm_version"] = version
    ctx["snapshot"] = ctx["snapshots"].get(version)
    too_old = version_key(version) < version_key(recipe["min_vllm_version"])
    if ctx["snapshot"] is None and "vllm_version" not in ctx["invalid"] and not too_old:
        errors.append(problem(where, PREFIX + "vllm_version",
                              "no flag snapshot for vLLM %s, so its arguments cannot be checked." % version,
                              "use one of %s, or add data/vllm_flags/vllm-%s.json with scripts/dump_vllm_flags.py."
                              % (", ".join(sorted(ctx["snapshots"], key=version_key)), version)))
    if too_old:
        errors.append(problem(where, PREFIX + "vllm_version", "vLLM %s cannot run Kimi-K3 (needs >= %s)."
                              % (version, recipe["min_vllm_version"]),
                              "use an image with vLLM >= %s." % recipe["min_vllm_version"]))
    hw_min = ctx["hw"].get("min_vllm_version")
    if hw_min and not too_old and version_key(version) < version_key(hw_min):
        errors.append(problem(where, PREFIX + "vllm_version", "vLLM %s has no build for %s nodes (needs >= %s)."
                              % (version, ctx["accelerator"], hw_min),
                              "set kimi_k3_vllm_version to %s or newer, the release of the image." % hw_min))
    return errors


def validate_flag_values(ctx):
    """Variables rendered as a flag with a fixed value set: the value is one the target vLLM accepts."""
    errors, snapshot = [], ctx["snapshot"]
    if snapshot is None:
        return errors
    for decl in plan_variables.VARIABLES:
        value = ctx["settings"].get(decl["key"])
        if decl["choices"] != "snapshot" or value is None:
            continue
        choices = (snapshot["flags"].get(decl["flag"]) or {}).get("choices")
        if choices and not vllm_flags.choice_ok(str(value), choices, decl["flag"]):
            errors.append(problem(ctx["where"], decl["name"], "%s is not a %s value vLLM %s accepts."
                                  % (value, decl["flag"], ctx["vllm_version"]),
                                  "use one of %s (vLLM %s)." % (", ".join(str(c) for c in choices),
                                                                ctx["vllm_version"])))
            ctx["invalid"].add(decl["key"])
    return errors


# ----------------------------------------------------------------------------- strategy and sizes


def _more_gpus_fix(ctx):
    """The fix of a GPU shortfall; a node's GPU count is named only when the accelerator is a known one."""
    if not ctx["accelerator"]:
        return "add nodes or choose a smaller strategy."
    return "add nodes (a %s node has %d GPUs) or choose a smaller strategy." % (
        ctx["accelerator"], ctx["hw"].get("gpus_per_node", 0))


def _strategy_fits(ctx, name, strategy):
    where, nnodes, gpn, total, errors = ctx["where"], ctx["nnodes"], ctx["gpus_per_node"], ctx["total_gpus"], []
    if strategy.get("max_nodes") and nnodes > strategy["max_nodes"]:
        errors.append(problem(where, PREFIX + "strategy",
                              "%s runs on one node, but vllm_cluster has %d nodes." % (name, nnodes),
                              "use a multi_node_* strategy, or keep one host in vllm_cluster."))
    if strategy.get("min_nodes") and nnodes < strategy["min_nodes"]:
        errors.append(problem(where, PREFIX + "strategy", "%s needs at least %d nodes, vllm_cluster has %d."
                              % (name, strategy["min_nodes"], nnodes),
                              "add nodes to vllm_workers or use single_node_tp."))
    if errors:
        return errors  # the node count is the mistake; a GPU count problem would only repeat it
    offered = ctx["hw"].get("strategies")
    if offered and name not in offered:
        return [problem(where, PREFIX + "strategy", "%s is not offered on %s." % (name, ctx["accelerator"]),
                        "use one of %s." % ", ".join(offered))]
    min_gpus = ctx["role_spec"].get("min_gpus", ctx["hw"].get("min_gpus", strategy.get("min_gpus", 0)))
    if gpn and total < min_gpus:
        errors.append(problem(where, PREFIX + "strategy", "%s needs at least %d GPUs, the cluster has %d (%d nodes "
                              "x %d)." % (name, min_gpus, total, nnodes, gpn),
                              _more_gpus_fix(ctx)))
    if ctx["accelerator"] in strategy.get("unsupported_hardware", []):
        errors.append(problem(where, PREFIX + "strategy", "%s is not supported on %s by the recipe."
                              % (name, ctx["accelerator"]),
                              "use multi_node_tp, multi_node_tep or multi_node_tp_dp on this hardware."))
    only = strategy.get("only_hardware")
    if only and ctx["accelerator"] and ctx["accelerator"] not in only:
        errors.append(problem(where, PREFIX + "strategy", "%s is only offered for %s, not %s."
                              % (name, ", ".join(only), ctx["accelerator"]),
                              "use multi_node_dep or multi_node_tp_pp on this hardware."))
    return errors


def validate_strategy(ctx):
    """The parallel strategy exists and fits the node count, GPU count and hardware."""
    s, recipe, where, errors = ctx["settings"], ctx["recipe"], ctx["where"], []
    name = s["strategy"]
    strategy = recipe["strategies"].get(name) if name else None
    if name is None and "strategy" not in ctx["invalid"]:
        errors.append(problem(where, PREFIX + "strategy", "is not set.",
                              "set one of %s." % ", ".join(recipe["strategies"])))
    strategy = strategy or {}
    ctx["strategy_name"] = name
    ctx["strategy"] = strategy
    ctx["launch"] = strategy.get("launch")
    ctx["expert_parallel"] = bool(strategy.get("expert_parallel") or ctx["role_spec"].get("expert_parallel"))
    if strategy and ctx["nnodes"]:
        errors += _strategy_fits(ctx, name, strategy)
    ctx["strategy_fits"] = not errors
    return errors


def _sizes(ctx, errors):
    s, strategy, gpn = ctx["settings"], ctx["strategy"], ctx["gpus_per_node"]
    sizes = {}
    for key, var in (("tp", "tensor_parallel_size"), ("pp", "pipeline_parallel_size"), ("dp", "data_parallel_size")):
        given = s[var]
        if given is not None:
            sizes[key] = given
        elif strategy and gpn:
            sizes[key] = eval_size(strategy["sizes"][key], gpn, ctx["nnodes"])
        else:
            sizes[key] = 1
    return sizes


def validate_sizes(ctx):
    """TP x PP x DP equals the cluster's GPU count; DP divides over the nodes."""
    where, nnodes, gpn, total, launch, errors = (ctx["where"], ctx["nnodes"], ctx["gpus_per_node"],
                                                 ctx["total_gpus"], ctx["launch"], [])
    sizes = _sizes(ctx, errors)
    ctx["sizes"] = sizes
    product = sizes["tp"] * sizes["pp"] * sizes["dp"]
    if ctx["strategy"] and gpn and product != total and not ctx["invalid"] & set(SIZE_VARS) and ctx["strategy_fits"]:
        errors.append(problem(where, "%stensor_parallel_size/%spipeline_parallel_size/%sdata_parallel_size"
                              % (PREFIX, PREFIX, PREFIX),
                              "TP %d x PP %d x DP %d = %d, but the cluster has %d GPUs (%d nodes x %d)."
                              % (sizes["tp"], sizes["pp"], sizes["dp"], product, total, nnodes, gpn),
                              "make the product equal nodes x GPUs per node, or drop the overrides to use the "
                              "strategy's sizes."))
    ctx["dp_local"] = None
    if launch == "dp" and nnodes and sizes["dp"] % nnodes == 0:
        ctx["dp_local"] = sizes["dp"] // nnodes
    elif launch == "dp" and nnodes:
        errors.append(problem(where, PREFIX + "data_parallel_size", "DP %d does not divide over %d nodes."
                              % (sizes["dp"], nnodes), "use a multiple of the node count."))
    if launch == "single" and sizes["pp"] * sizes["dp"] != 1:
        errors.append(problem(where, PREFIX + "strategy", "single_node_tp uses tensor parallelism only.",
                              "drop kimi_k3_pipeline_parallel_size / kimi_k3_data_parallel_size."))
    return errors


# ----------------------------------------------------------------------------- load balancing


def validate_load_balancing(ctx):
    """The data-parallel load-balancing mode (DP strategies only)."""
    where, strategy, name, errors = ctx["where"], ctx["strategy"], ctx["strategy_name"], []
    lb = ctx["settings"]["dp_lb_mode"]
    if not strategy or not ctx["strategy_fits"]:
        ctx["lb_mode"] = None  # the strategy is the mistake; its load-balancing modes are moot
        return errors
    if ctx["launch"] == "dp":
        lb = lb or strategy.get("default_lb_mode")
        if lb not in strategy.get("lb_modes", []):
            errors.append(problem(where, PREFIX + "dp_lb_mode", "%r is not available for %s." % (lb, name),
                                  "use one of %s." % ", ".join(strategy.get("lb_modes", []))))
        elif lb == "hybrid" and ctx["dp_local"] == 1:
            errors.append(problem(where, PREFIX + "dp_lb_mode",
                                  "hybrid load balancing with one DP rank per node turns into external LB in vLLM.",
                                  "set kimi_k3_dp_lb_mode: external (one endpoint per node) or internal."))
        elif lb == "external" and ctx["dp_local"] not in (None, 1):
            errors.append(problem(where, PREFIX + "dp_lb_mode",
                                  "external load balancing needs one DP rank per vllm serve, this layout has %s "
                                  "per node." % ctx["dp_local"], "use hybrid or internal load balancing."))
    elif lb is not None:
        errors.append(problem(where, PREFIX + "dp_lb_mode", "is set but %s has no data parallelism." % name,
                              "remove kimi_k3_dp_lb_mode."))
    ctx["lb_mode"] = lb if ctx["launch"] == "dp" else None
    return errors


# ----------------------------------------------------------------------------- interconnect and features


def all2all_kernel(recipe, vendor, interconnect):
    """The recipe's cross-node expert-parallel kernel for a vendor over an interconnect (None: there is none)."""
    return ((recipe.get("all2all_by_vendor", {}).get(vendor) or {}).get(interconnect) or {}).get("backend")


def uses_all2all(sizes, moe_backend):
    """Whether vLLM dispatches an expert-parallel layout's tokens with the all2all kernels: with more than one
    data-parallel rank, or sequence parallel (TP > 1 with MegaMoE). vllm/model_executor/layers/fused_moe/config.py
    FusedMoEParallelConfig.use_all2all_kernels; reference §9.2."""
    return sizes["dp"] > 1 or (sizes["tp"] > 1 and moe_backend == "deep_gemm_mega_moe")


def exclusive_vendor(recipe, setting, value):
    """(vendor, source) when ``value`` of ``setting`` exists for one vendor only (recipe vendor_exclusive)."""
    for entry in recipe.get("vendor_exclusive", {}).get(setting, []):
        if value in entry.get("values", []) or any(str(value).startswith(p) for p in entry.get("prefixes", [])):
            return entry["vendor"], entry["source"]
    return None, None


def vendor_choices(recipe, vendor, interconnect):
    """The all2all kernels a vendor offers over an interconnect (rendered one first)."""
    spec = (recipe.get("all2all_by_vendor", {}).get(vendor) or {}).get(interconnect) or {}
    return ([spec["backend"]] if spec.get("backend") else []) + list(spec.get("options", []))


def validate_interconnect(ctx):
    """The interconnect between nodes, and the all2all / MoE backends it implies."""
    s, recipe, where, nnodes, hw, errors = (ctx["settings"], ctx["recipe"], ctx["where"], ctx["nnodes"],
                                            ctx["hw"], [])
    interconnect = s["interconnect"]
    offered = [name for name, spec in recipe["interconnects"].items()
               if not ctx["vendor"] or ctx["vendor"] in spec.get("vendors", [ctx["vendor"]])]
    if nnodes > 1 and interconnect is None and "interconnect" not in ctx["invalid"]:
        errors.append(problem(where, PREFIX + "interconnect", "is not set for a %d-node cluster." % nnodes,
                              "set nvlink (GB200/GB300 trays in one NVL72 domain) or rdma (IB/RoCE)."
                              if "rdma" in offered else "set %s." % " or ".join(offered)))
    if interconnect and interconnect not in offered and interconnect in recipe["interconnects"]:
        errors.append(problem(where, PREFIX + "interconnect", "%s is not an interconnect of %s nodes."
                              % (interconnect, ctx["accelerator"]), "set %s." % " or ".join(offered)))
    elif interconnect == "nvlink" and nnodes > 1 and hw and not hw.get("gb_tray"):
        errors.append(problem(where, PREFIX + "interconnect",
                              "multi-node NVLink needs GB200/GB300 NVL trays, not %s." % ctx["accelerator"],
                              "use rdma between %s nodes." % ctx["accelerator"]))
    ctx["interconnect"] = interconnect
    ctx["all2all_backend"] = s["all2all_backend"]
    if s["all2all_backend"] is None and ctx["expert_parallel"] and nnodes > 1 and interconnect and \
            uses_all2all(ctx["sizes"], s["moe_backend"]):
        ctx["all2all_backend"] = all2all_kernel(recipe, ctx["vendor"], interconnect)
    ctx["moe_backend_override"] = s["moe_backend"]
    if nnodes > 1 and not s["socket_ifname"]:
        ctx["warnings"].append(problem(where, PREFIX + "socket_ifname",
                                       "is not set; NCCL/Gloo pick an interface themselves (a wrong pick hangs "
                                       "start-up).", "set the cluster-internal interface name, e.g. bond0."))
    return errors


def _wanted_features(ctx, errors):
    recipe, where = ctx["recipe"], ctx["where"]
    wanted = {name: spec.get("default", False) for name, spec in recipe["features"].items()}
    given = ctx["settings"]["features"] or {}  # a mapping: the variable table checked the type
    for name, value in given.items():
        if name not in wanted:
            errors.append(problem(where, PREFIX + "features", "unknown feature %r." % (name,),
                                  "use one of %s." % ", ".join(sorted(wanted))))
            continue
        try:
            wanted[name] = to_bool(value)
        except (TypeError, ValueError):
            errors.append(problem(where, PREFIX + "features", "%s: %s is not a boolean." % (name, plan_variables.show(value)),
                                  "use true or false."))
    return wanted


def validate_features(ctx):
    """Optional recipe features and the strategies they are allowed with."""
    recipe, where, strategy, name, errors = ctx["recipe"], ctx["where"], ctx["strategy"], ctx["strategy_name"], []
    features = _wanted_features(ctx, errors)
    ctx["features"] = features
    for feature, enabled in features.items():
        spec = recipe["features"][feature]
        if not enabled:
            continue
        if feature in strategy.get("forbidden_features", []):
            errors.append(problem(where, PREFIX + "features", "%s is not allowed with %s." % (feature, name),
                                  "turn %s off or pick another strategy." % feature))
        if spec.get("only_strategies") and name not in spec["only_strategies"]:
            errors.append(problem(where, PREFIX + "features", "%s is only available with %s."
                                  % (feature, ", ".join(spec["only_strategies"])),
                                  "turn %s off for %s." % (feature, name)))
        if spec.get("dcp_size") and ctx["sizes"]["tp"] % spec["dcp_size"] != 0:
            errors.append(problem(where, PREFIX + "features", "DCP size %d does not divide TP %d."
                                  % (spec["dcp_size"], ctx["sizes"]["tp"]),
                                  "use TP 8 on one 8-GPU node or turn dcp off."))
    return errors


# ----------------------------------------------------------------------------- ports and addresses


def validate_ports_addresses(ctx):
    """TCP ports in range and distinct; every node has its own internal address."""
    s, where, defaults, launch, errors = ctx["settings"], ctx["where"], ctx["recipe"]["defaults"], ctx["launch"], []
    ports = {}
    for key in ("api_port", "master_port", "dp_rpc_port"):
        ports[key] = s[key] if s[key] is not None else ctx["role_spec"].get(key, defaults[key])
    ctx["ports"] = ports
    side_channel = ctx["role_spec"].get("kv_side_channel_port")
    used = {side_channel: "VLLM_NIXL_SIDE_CHANNEL_PORT (the NIXL side channel)"} if side_channel else {}
    for key, value in ports.items():
        relevant = key == "api_port" or (key == "master_port" and launch == "mp") or \
            (key == "dp_rpc_port" and launch == "dp")
        if relevant and value in used:
            other = used[value] if used[value].isupper() or " " in used[value] else PREFIX + used[value]
            errors.append(problem(where, PREFIX + key, "port %d is also %s." % (value, other),
                                  "give the API, rendezvous and RPC ports distinct numbers."))
        if relevant:
            used[value] = key
    seen_addr = {}
    for node in ctx["nodes"]:
        addr = node_address(node)
        if addr in seen_addr:
            errors.append(problem(node["host"], PREFIX + "internal_address",
                                  "%s is also the address of %s." % (addr, seen_addr[addr]),
                                  "give every node its own cluster-internal address (kimi_k3_internal_address "
                                  "or ansible_host)."))
        seen_addr[addr] = node["host"]
    return errors


# ----------------------------------------------------------------------------- user arguments


def _reserved_fix(recipe, canonical, name):
    """The fix for a flag the plan derives, or None when ``kimi_k3_extra_args`` may pass it."""
    reserved = recipe.get("reserved_args", {})
    for flag in (canonical, name):
        if flag in reserved:
            return reserved[flag]
    for prefix, fix in recipe.get("reserved_arg_prefixes", {}).items():
        if str(canonical).startswith(prefix) or name.startswith(prefix):
            return fix
    return None


def _refused_arg(recipe, canonical, name):
    """``(why, fix)`` for a flag kimi_k3_extra_args never carries (a secret, --config), else None."""
    refused = recipe.get("refused_args", {})
    for flag in (canonical, name):
        if flag in refused:
            return refused[flag]["why"], refused[flag]["fix"]
    return None


def _extra_arg_problem(recipe, snap, option):
    """``(message, fix)`` for one option of kimi_k3_extra_args that must not be there, else None."""
    name = option.split("=", 1)[0]
    spelled = "--" + name[2:].replace("_", "-") if name.startswith("--") else name
    canonical = (vllm_flags.canonical_flag(name, snap) if snap else None) or spelled
    refused = _refused_arg(recipe, canonical, spelled)
    if refused:
        return "%s %s." % (name, refused[0]), refused[1] + "."
    fix = _reserved_fix(recipe, canonical, name)
    if fix:
        return "%s must not be passed by hand: the plan derives it." % name, fix + "."
    return None


# The fix of a credential found inside a value: the plan writes the value where anyone with the plan, the node or
# docker inspect reads it.
CREDENTIAL_FIX = ("remove the credential from the value: give it to the server outside the plan (docs/secrets.md, "
                  "\"Credentials the plan refuses\"), from a vault")


def _extra_item_problem(recipe, snap, index, token):
    """``(message, fix)`` for one item of kimi_k3_extra_args as a string, else None. The item is named by its
    position, never quoted: it may hold a secret."""
    where = "item %d" % (index + 1)
    if re.search(r"[\x00-\x1f\x7f]", token):
        return "%s contains a control character." % where, "remove the newline/tab from the item."
    name = token.split("=", 1)[0]
    if vllm_flags.is_flag(token) and re.search(r"\s", name):
        option = name.split()[0]
        return _extra_arg_problem(recipe, snap, option) or (
            "%s holds the option %s and its value in one string." % (where, option),
            "write %s and its value as two items of kimi_k3_extra_args." % option)
    if vllm_flags.is_flag(token) and any(redaction.is_secret_name(recipe, k) for k in name.split(".")[1:]):
        return ("%s sets %s, a key that names a secret: it would be in the launch script, the plan file and the "
                "container's argv." % (where, name), CREDENTIAL_FIX + ".")
    value = token.split("=", 1)[1] if vllm_flags.is_flag(token) and "=" in token else token
    why = redaction.value_secret_problem(recipe, value)
    if why:
        return ("%s %s: it would be in the launch script, the plan file and the container's argv." % (where, why),
                CREDENTIAL_FIX + ".")
    return None


def validate_extra_args(ctx):
    """kimi_k3_extra_args passes no secret, no --config file and no flag the collection derives (the table checked
    it is a string list). Items are named by position: a refused item may hold a secret."""
    errors, recipe, snapshot = [], ctx["recipe"], ctx["snapshot"]
    extra_args = ctx["settings"]["extra_args"] or []
    for index, token in enumerate(extra_args):
        issue = _extra_item_problem(recipe, snapshot, index, token)
        if issue:
            errors.append(problem(ctx["where"], PREFIX + "extra_args", issue[0], issue[1]))
    for option, _values in vllm_flags.split_units(extra_args)[1]:
        issue = None if re.search(r"\s", option) else _extra_arg_problem(recipe, snapshot, option)
        if issue:
            errors.append(problem(ctx["where"], PREFIX + "extra_args", issue[0], issue[1]))
    ctx["extra_args"] = list(extra_args)
    return errors


def _env_entry_problem(name, value):
    if not isinstance(name, str) or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*\Z", name):
        return ("key %s is not an environment variable name." % plan_variables.show(name),
                "use NAME: value with NAME matching [A-Za-z_][A-Za-z0-9_]*.")
    if not plan_variables.is_scalar(value) and not isinstance(value, bool):
        return ("%s must be a string or number, got %s." % (name, plan_variables.kind(value)),
                "write %s: \"<value>\" (a list or mapping cannot be an environment value)." % name)
    if re.search(r"[\x00-\x1f\x7f]", str(value)):
        return ("%s contains a control character (it would break the env file)." % name,
                "put the value on one line.")
    return None


def is_secret_env(recipe, name):
    """Whether an environment name looks like a secret's (recipe ``secret_env``; plugin_utils.plan.redaction)."""
    return redaction.is_secret_name(recipe, name)


def _env_name_problem(recipe, name, not_secret=()):
    """``(message, fix)`` for a name kimi_k3_extra_env must not set (derived, secret, removed), else None.
    ``not_secret``: names the operator declared non-secret (kimi_k3_extra_env_not_secret)."""
    upper = name.upper()
    if upper in recipe.get("reserved_env", {}):
        return ("%s is derived by the plan (per node or from a variable); kimi_k3_extra_env would override it."
                % name, recipe["reserved_env"][upper] + " instead.")
    variable = recipe.get("secret_env", {}).get("variables", {}).get(upper)
    if is_secret_env(recipe, name) and (variable or name not in not_secret):
        if variable:
            return ("%s is a secret and would land in the plan file and the container's configuration." % name,
                    "remove it and set %s from a vault; the launch passes it through a mode-0400 file." % variable)
        return ("%s looks like a secret (data/recipes/kimi_k3.yml secret_env) and would land in the plan file and "
                "the container's configuration." % name,
                "remove it: kimi_k3_extra_env is not secret. If %s holds no secret, list it in "
                "kimi_k3_extra_env_not_secret (docs/secrets.md)." % name)
    if name in recipe.get("removed_env", {}):
        return "%s no longer exists in vLLM." % name, recipe["removed_env"][name] + "."
    return None


def _env_value_problem(recipe, name, value, not_secret=()):
    """``(message, fix)`` for a value that carries a credential by its structure (URL userinfo, JSON key)."""
    why = None if name in not_secret else redaction.value_secret_problem(recipe, value)
    if why is None:
        return None
    return ("%s %s and would land in the plan file and the container's configuration." % (name, why),
            "%s. If %s holds no secret, list it in kimi_k3_extra_env_not_secret (docs/secrets.md)." % (CREDENTIAL_FIX,
                                                                                                       name))


def validate_extra_env(ctx):
    """kimi_k3_extra_env: NAME: scalar entries, without derived, secret or removed variables."""
    recipe, where, errors = ctx["recipe"], ctx["where"], []
    extra_env = ctx["settings"]["extra_env"] or {}
    not_secret = ctx["settings"]["extra_env_not_secret"] or []
    clean = {}
    for name, value in extra_env.items():
        issue = _env_entry_problem(name, value) or _env_name_problem(recipe, name, not_secret) or \
            _env_value_problem(recipe, name, value, not_secret)
        if issue:
            errors.append(problem(where, PREFIX + "extra_env", issue[0], issue[1]))
            continue
        clean[name] = env_str(value)
    ctx["extra_env"] = clean
    return errors


LOOPBACK_NAMES = ("localhost", "ip6-localhost", "ip6-loopback")


def is_loopback(address):
    """True for 127.0.0.0/8, ::1 and the loopback host names."""
    text = str(address).lower()
    return text in LOOPBACK_NAMES or text == "::1" or re.match(r"^127\.\d+\.\d+\.\d+\Z", text) is not None


def serves_http(ctx, node):
    """Whether ``node`` runs an API server (head always; followers in hybrid/external DP)."""
    if node["rank"] == 0:
        return True
    return ctx["launch"] == "dp" and ctx["lb_mode"] in ("hybrid", "external")


def api_access(ctx):
    """How the API is protected: 'api_key', 'loopback' (no key, loopback only) or 'unauthenticated'."""
    if ctx["settings"]["secrets"]["api_key"]:
        return "api_key"
    exposed = [n for n in ctx["nodes"] if serves_http(ctx, n) and not is_loopback(api_host(n))]
    return "unauthenticated" if exposed else "loopback"


def validate_api_exposure(ctx):
    """An API on a non-loopback address needs kimi_k3_api_key unless the operator opts out explicitly."""
    ctx["api_access"] = api_access(ctx)
    if ctx["api_access"] != "unauthenticated" or ctx["settings"]["allow_unauthenticated_api"] \
            or "api_key" in ctx["invalid"]:  # a refused key is the one mistake
        return []
    exposed = ["%s (%s)" % (n["host"], api_host(n)) for n in ctx["nodes"]
               if serves_http(ctx, n) and not is_loopback(api_host(n))]
    return [problem(ctx["where"], PREFIX + "api_key",
                    "is not set (or empty), but %s would serve the API without authentication on %s."
                    % ("these nodes" if len(exposed) > 1 else "this node", ", ".join(exposed)),
                    "set kimi_k3_api_key from a vault (e.g. \"{{ vault_kimi_k3_api_key }}\"; the example inventories "
                    "read it from the environment: export KIMI_K3_API_KEY before ansible-playbook), or bind "
                    "kimi_k3_api_host to a loopback address, or set "
                    "kimi_k3_allow_unauthenticated_api: true if an authenticating proxy guards the port.")]


def validate_model(ctx):
    """Remote code runs pinned: --trust-remote-code needs kimi_k3_model_revision (or an explicit opt-in)."""
    s, recipe = ctx["settings"], ctx["recipe"]
    remote_code = "--trust-remote-code" in list(recipe["base_args"]) + list(s["extra_args"] or [])
    if not remote_code or s["model_revision"] or s["allow_unpinned_remote_code"] or "model_revision" in ctx["invalid"]:
        return []
    variant = recipe["variants"][s["variant"]]  # a refused variant reads as the default (plan_variables)
    model = s["model"] or variant["model"]
    return [problem(ctx["where"], PREFIX + "model_revision",
                    "is not set, so --trust-remote-code would run whatever code %s holds at start-up." % model,
                    "set kimi_k3_model_revision to the 40-hex commit you reviewed (huggingface.co/%s/commits), or "
                    "kimi_k3_allow_unpinned_remote_code: true to accept unreviewed code." % model)]


def _fallback_address_problem(node):
    """ansible_host stands in for kimi_k3_internal_address when that is unset: it must be an address too."""
    if node["settings"].get("internal_address") or node["vars"].get("ansible_host") is None:
        return None
    value = node["vars"]["ansible_host"]
    decl = plan_variables.declared(PREFIX + "internal_address")
    _checked, refusal = plan_variables.check_value(decl, value, {}, {})
    if refusal is None:
        return None
    node["vars"] = dict(node["vars"], ansible_host=None)
    return problem(node["host"], "ansible_host", "%s (it is the node's internal address while "
                   "kimi_k3_internal_address is unset)" % refusal[0].rstrip("."),
                   "set kimi_k3_internal_address on %s to its cluster-internal IP or host name." % node["host"])


def validate_host_names(ctx):
    """Inventory host names become plan file names (<host>.json, <host>.sh); addresses are addresses."""
    errors = []
    for node in ctx["nodes"]:
        issue = _fallback_address_problem(node)
        if issue:
            errors.append(issue)
        host = node["host"]
        if not re.match(r"^[A-Za-z0-9_][A-Za-z0-9_.@-]*\Z", host):  # no leading dot: "." and ".." too
            errors.append(problem(plan_variables.show(host), "inventory_hostname",
                                  "the host name is used as a file name (<host>.json) and holds a path separator, "
                                  "a control character or a leading dot/dash.",
                                  "rename the host in the inventory (letters, digits, . _ @ -) and keep the "
                                  "address in ansible_host."))
    return errors


# ----------------------------------------------------------------------------- deployment kind (PD roles)


def _pd_vendor_problem(ctx):
    pd = ctx["recipe"].get("pd_cluster", {})
    if not ctx["role_spec"].get("pd") or not ctx["vendor"] or ctx["vendor"] in pd.get("vendors", []):
        return None
    return problem(ctx["where"], PREFIX + "deployment_kind", "prefill/decode deployments are not offered on %s "
                   "nodes (%s): %s." % (ctx["vendor"], ctx["accelerator"], pd.get("refused_vendor_reason", "")),
                   "run %s as replicas (kimi_k3_deployment_kind: replica) or as one single deployment."
                   % ctx["accelerator"])


def _pd_flags_problem(ctx):
    snapshot, pd = ctx["snapshot"], ctx["recipe"].get("pd_cluster", {})
    if not ctx["role_spec"].get("pd") or snapshot is None:
        return None
    missing = [f for f in pd.get("required_flags", []) if f not in snapshot["flags"]]
    if not missing:
        return None
    return problem(ctx["where"], PREFIX + "vllm_version", "vLLM %s has no %s, which prefill/decode deployments "
                   "need." % (ctx["vllm_version"], ", ".join(missing)),
                   "set kimi_k3_vllm_version to a release whose flag snapshot has %s." % ", ".join(missing))


def validate_deployment_kind(ctx):
    """The kind's strategies (decode runs DEP: expert parallel), vendor and vLLM flags (recipe deployment_kinds)."""
    role, name, errors = ctx["role_spec"], ctx["strategy_name"], []
    allowed = role.get("strategies")
    if allowed and name and ctx["strategy"] and name not in allowed:
        wanted = ctx["recipe"]["strategies"].get(allowed[0], {})
        what = "expert parallel" if wanted.get("expert_parallel") or role.get("expert_parallel") else allowed[0]
        errors.append(problem(ctx["where"], PREFIX + "strategy", "a %s deployment runs %s (%s), not %s."
                              % (ctx["kind"], " or ".join(allowed), what, name),
                              "set kimi_k3_strategy: %s for deployment %s (or drop it: that is the default)."
                              % (allowed[0], ctx["deployment"])))
    for issue in (_pd_vendor_problem(ctx), _pd_flags_problem(ctx)):
        if issue:
            errors.append(issue)
    return errors


# ----------------------------------------------------------------------------- driver

VALIDATORS = (validate_host_names, validate_hardware, validate_version, validate_flag_values, validate_strategy,
              validate_deployment_kind, validate_sizes, validate_load_balancing, validate_interconnect, validate_features,
              validate_ports_addresses, validate_api_exposure, validate_image, validate_model, validate_extra_args,
              validate_extra_env)


def _deployment_kind(settings, recipe, deployment):
    """(kind, its recipe layer): kimi_k3_deployment_kind, else single (one deployment) or replica (several)."""
    kind = settings["deployment_kind"] or ("replica" if deployment.get("several") else "single")
    role = recipe.get("deployment_kinds", {}).get(kind, {})
    if settings["strategy"] is None and role.get("strategies"):
        settings["strategy"] = role["strategies"][0]
    return kind, role


def resolve(nodes, recipe, snapshots, errors, warnings, deployment=None):
    """Validate one deployment and compute every derived setting; returns the context.

    ``deployment``: ``{"name", "several"}`` (default: the inventory's only deployment, "main")."""
    deployment = deployment or {"name": recipe["defaults"].get("deployment", "main"), "several": False}
    nodes = [dict(node) for node in nodes]  # read_settings adds "settings"; the caller's nodes stay as given
    settings, invalid, problems = plan_variables.read_settings(nodes, recipe, snapshots,
                                                               deployment["name"] if deployment["several"] else None)
    errors.extend(problems)
    kind, role = _deployment_kind(settings, recipe, deployment)
    ordered = order_nodes(nodes, errors, invalid, deployment["name"] if deployment["several"] else None)
    head = ordered[0] if ordered else None
    ctx = {"settings": settings, "invalid": invalid, "nodes": ordered, "nnodes": len(ordered), "head": head,
           "recipe": recipe, "snapshots": snapshots, "where": head["host"] if head else "vllm_cluster",
           "warnings": warnings, "deployment": deployment["name"], "kind": kind, "role_spec": role}
    for validator in VALIDATORS:
        errors.extend(validator(ctx))
    return ctx
