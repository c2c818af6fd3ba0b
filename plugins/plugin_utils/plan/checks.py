# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The checks of one resolved deployment (pure functions, no I/O), registered in ``CHECKS``.

Every check reads the Deployment plugin_utils.plan.resolve derived and returns its problems, each naming the host,
the variable and the fix; a check writes nothing. ``validate`` reads the inventory's variables, resolves the
deployment and runs the table: a check whose ``needs`` failed is not run, so the root cause is the one reported.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
from collections import namedtuple

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import addresses
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import extras
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import ranks
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import resolve as plan_resolve
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import variables as plan_variables
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import vllm_flags
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.common.coerce import to_bool, version_key
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan.variables import PREFIX, problem

DIGEST_RE = re.compile(r"^(?P<repo>[^@\s]+)@sha256:(?P<hex>[0-9a-f]{64})\Z")
SIZE_VARS = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "gpus_per_node")

# ``warning``: the check's problems are warnings (the plan is still written).
Check = namedtuple("Check", "name needs run warning")


# ----------------------------------------------------------------------------- nodes


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


def check_head(d):
    """Exactly one head per deployment (``deployment`` is named when the inventory holds several)."""
    heads = ranks.heads_of(d.given_nodes)
    if len(heads) == 1:
        return []
    return [_head_count_problem(d.given_nodes, heads, d.deployment if d.several else None)]


def check_node_rank(d):
    """kimi_k3_node_rank: on every node or none, distinct, 0..N-1, the head 0."""
    mistake = ranks.node_order(d.given_nodes, d.invalid)[1]
    return [mistake] if mistake else []


def check_host_names(d):
    """Inventory host names become plan file names (<host>.json, <host>.sh); addresses are addresses."""
    errors, given = [], dict((n["host"], n) for n in d.given_nodes)
    for node in d.nodes:
        host = node["host"]
        refusal = addresses.fallback_refusal(given[host])
        if refusal:
            errors.append(problem(host, "ansible_host", "%s (it is the node's internal address while "
                                  "kimi_k3_internal_address is unset)" % refusal[0].rstrip("."),
                                  "set kimi_k3_internal_address on %s to its cluster-internal IP or host name." % host))
        if not re.match(r"^[A-Za-z0-9_][A-Za-z0-9_.@-]*\Z", host):  # no leading dot: "." and ".." too
            errors.append(problem(plan_variables.show(host), "inventory_hostname",
                                  "the host name is used as a file name (<host>.json) and holds a path separator, "
                                  "a control character or a leading dot/dash.",
                                  "rename the host in the inventory (letters, digits, . _ @ -) and keep the "
                                  "address in ansible_host."))
    return errors


# ----------------------------------------------------------------------------- hardware and image


def check_hardware(d):
    """Accelerator and GPUs per node."""
    recipe, where, hw, gpn, errors = d.recipe, d.where, d.hw, d.gpus_per_node, []
    if d.settings["accelerator"] is None and "accelerator" not in d.invalid:
        errors.append(problem(where, PREFIX + "accelerator", "is not set.",
                              "set it to one of %s." % ", ".join(sorted(recipe["hardware"]))))
    if hw and gpn is not None and gpn > hw["gpus_per_node"]:
        errors.append(problem(where, PREFIX + "gpus_per_node",
                              "%d GPUs per node, but a %s node has %d." % (
                                  gpn, d.accelerator, hw["gpus_per_node"]),
                              "use at most %d (a %s node%s)." % (hw["gpus_per_node"], d.accelerator,
                                                                 " is one 4-GPU tray" if hw.get("gb_tray") else "")))
    return errors


def check_image(d):
    """The image: pinned by digest (unless allowed) and built for the nodes' vendor."""
    s, recipe, where, vendor, errors = d.settings, d.recipe, d.where, d.vendor, []
    if not d.hw:
        return errors
    image = s["image"]
    if not image and "image" in d.invalid:
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
    errors.extend(_cpu_image_problems(d, image, repo))
    return errors


def _cpu_image_problems(d, image, repo):
    """vLLM's CPU build and the GPU builds are not interchangeable: the CPU image serves on CPU nodes only."""
    markers = d.recipe.get("image_vendor_markers", {}).get("cpu", [])
    is_cpu_image = any(marker in repo for marker in markers)
    if d.vendor == "cpu" and not is_cpu_image:
        return [problem(d.where, PREFIX + "image", "%r is not an image of vLLM's CPU build but the nodes are "
                        "cpu nodes." % (image,), "use the rehearsal engine image (a repository named *cpu*, e.g. "
                        "vllm/vllm-openai-cpu) by digest.")]
    if d.vendor in ("nvidia", "amd") and is_cpu_image:
        return [problem(d.where, PREFIX + "image", "%r is an image of vLLM's CPU build but the nodes are %s "
                        "(%s)." % (image, d.vendor.upper(), d.settings["accelerator"]),
                        "use a %s image digest." % ("vllm/vllm-openai-rocm" if d.vendor == "amd"
                                                    else "vllm/vllm-openai (CUDA 13)"))]
    return []


# ----------------------------------------------------------------------------- version


def check_version(d):
    """The target vLLM release can run Kimi-K3 (its flag snapshot exists: the variable table checks that)."""
    recipe, where, version, errors = d.recipe, d.where, d.vllm_version, []
    too_old = version_key(version) < version_key(recipe["min_vllm_version"])
    if d.snapshot is None and "vllm_version" not in d.invalid and not too_old:
        errors.append(problem(where, PREFIX + "vllm_version",
                              "no flag snapshot for vLLM %s, so its arguments cannot be checked." % version,
                              "use one of %s, or add data/vllm_flags/vllm-%s.json with scripts/dump_vllm_flags.py."
                              % (", ".join(sorted(d.snapshots, key=version_key)), version)))
    if too_old:
        errors.append(problem(where, PREFIX + "vllm_version", "vLLM %s cannot run Kimi-K3 (needs >= %s)."
                              % (version, recipe["min_vllm_version"]),
                              "use an image with vLLM >= %s." % recipe["min_vllm_version"]))
    hw_min = d.hw.get("min_vllm_version")
    if hw_min and not too_old and version_key(version) < version_key(hw_min):
        errors.append(problem(where, PREFIX + "vllm_version", "vLLM %s has no build for %s nodes (needs >= %s)."
                              % (version, d.accelerator, hw_min),
                              "set kimi_k3_vllm_version to %s or newer, the release of the image." % hw_min))
    return errors


def check_image_version(d):
    """kimi_k3_vllm_version: image - the plan cannot know the image's version: it says which release's rules it
    rendered by and who judges the argv (a warning, never silent)."""
    if not d.version_from_image:
        return []
    if d.image_build:
        said = ("image: the recipe records %s as vLLM %s, a development build that follows vLLM %s's rules (%s); the "
                "plan renders flags and env by vLLM %s's rules and judges kimi_k3_extra_args' flags only as far as "
                "that release knows them." % (d.settings["image"], d.image_build["version"], d.image_build["rules"],
                                              " ".join(str(d.image_build.get("why") or "").split()), d.vllm_version))
    else:
        said = ("image: the plan cannot know the vLLM version of %s; it renders flags and env by vLLM %s's rules (the "
                "recipe's development_builds.plan_release) and judges kimi_k3_extra_args' flags only as far as that "
                "release knows them." % (d.settings["image"], d.vllm_version))
    return [problem(d.where, PREFIX + "vllm_version", said,
                    "nothing to do if the image is a development build: the fabric step (fabric.yml, part of "
                    "deploy.yml) reads the image's version, parses every node's argv with the image's own vllm serve "
                    "parser and checks the env names against its vllm/envs.py before any vLLM container starts. "
                    "Set kimi_k3_vllm_version to the image's release to check at plan time instead.")]


def check_flag_values(d):
    """Variables rendered as a flag with a fixed value set: the value is one the target vLLM accepts."""
    return [problem(d.where, decl["name"], "%s is not a %s value vLLM %s accepts." % (value, decl["flag"], d.vllm_version),
                    "use one of %s (vLLM %s)." % (", ".join(str(c) for c in choices), d.vllm_version))
            for decl, value, choices in plan_resolve.refused_choices(d.settings, d.snapshot)]


# ----------------------------------------------------------------------------- strategy and sizes


def _more_gpus_fix(d):
    """The fix of a GPU shortfall; a node's GPU count is named only when the accelerator is a known one."""
    if not d.accelerator:
        return "add nodes or choose a smaller strategy."
    return "add nodes (a %s node has %d GPUs) or choose a smaller strategy." % (
        d.accelerator, d.hw.get("gpus_per_node", 0))


def _strategy_fits(d, name, strategy):
    where, nnodes, gpn, total, errors = d.where, d.nnodes, d.gpus_per_node, d.total_gpus, []
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
    offered = d.hw.get("strategies")
    if offered and name not in offered:
        why = (d.hw.get("withdrawn") or {}).get(name)
        return [problem(where, PREFIX + "strategy", "%s is not offered on %s%s." % (
            name, d.accelerator, (": " + why) if why else ""), "use one of %s." % ", ".join(offered))]
    min_gpus = d.role_spec.get("min_gpus", d.hw.get("min_gpus", strategy.get("min_gpus", 0)))
    if gpn and total < min_gpus:
        errors.append(problem(where, PREFIX + "strategy", "%s needs at least %d GPUs, the cluster has %d (%d nodes "
                              "x %d)." % (name, min_gpus, total, nnodes, gpn),
                              _more_gpus_fix(d)))
    if d.accelerator in strategy.get("unsupported_hardware", []):
        errors.append(problem(where, PREFIX + "strategy", "%s is not supported on %s by the recipe."
                              % (name, d.accelerator),
                              "use multi_node_tp, multi_node_tep or multi_node_tp_dp on this hardware."))
    only = strategy.get("only_hardware")
    if only and d.accelerator and d.accelerator not in only:
        errors.append(problem(where, PREFIX + "strategy", "%s is only offered for %s, not %s."
                              % (name, ", ".join(only), d.accelerator),
                              "use multi_node_dep or multi_node_tp_pp on this hardware."))
    return errors


def check_strategy(d):
    """The parallel strategy exists and fits the node count, GPU count and hardware."""
    name, strategy = d.strategy_name, d.strategy
    if name is None and "strategy" not in d.invalid:
        return [problem(d.where, PREFIX + "strategy", "is not set.", "set one of %s." % ", ".join(d.recipe["strategies"]))]
    return _strategy_fits(d, name, strategy) if strategy and d.nnodes else []


def check_sizes(d):
    """TP x PP x DP equals the cluster's GPU count (run when the strategy fits: otherwise that is the mistake)."""
    sizes, gpn, total = d.sizes, d.gpus_per_node, d.total_gpus
    product = sizes["tp"] * sizes["pp"] * sizes["dp"]
    if not d.strategy or not gpn or product == total or d.invalid & set(SIZE_VARS):
        return []
    return [problem(d.where, "%stensor_parallel_size/%spipeline_parallel_size/%sdata_parallel_size" % (PREFIX, PREFIX, PREFIX),
                    "TP %d x PP %d x DP %d = %d, but the cluster has %d GPUs (%d nodes x %d)."
                    % (sizes["tp"], sizes["pp"], sizes["dp"], product, total, d.nnodes, gpn),
                    "make the product equal nodes x GPUs per node, or drop the overrides to use the strategy's sizes.")]


def check_dp_split(d):
    """DP divides over the nodes (each node runs the same number of DP ranks)."""
    if d.launch != "dp" or not d.nnodes or d.sizes["dp"] % d.nnodes == 0:
        return []
    return [problem(d.where, PREFIX + "data_parallel_size", "DP %d does not divide over %d nodes."
                    % (d.sizes["dp"], d.nnodes), "use a multiple of the node count.")]


def check_single_tp(d):
    """single_node_tp runs tensor parallel only."""
    if d.launch != "single" or d.sizes["pp"] * d.sizes["dp"] == 1:
        return []
    return [problem(d.where, PREFIX + "strategy", "single_node_tp uses tensor parallelism only.",
                    "drop kimi_k3_pipeline_parallel_size / kimi_k3_data_parallel_size.")]


# ----------------------------------------------------------------------------- load balancing


def check_load_balancing(d):
    """The data-parallel load-balancing mode (DP strategies only)."""
    where, strategy, name, lb, errors = d.where, d.strategy, d.strategy_name, d.lb_mode, []
    if not strategy:
        return errors
    if d.launch == "dp":
        if lb not in strategy.get("lb_modes", []):
            errors.append(problem(where, PREFIX + "dp_lb_mode", "%r is not available for %s." % (lb, name),
                                  "use one of %s." % ", ".join(strategy.get("lb_modes", []))))
        elif lb == "hybrid" and d.dp_local == 1:
            errors.append(problem(where, PREFIX + "dp_lb_mode",
                                  "hybrid load balancing with one DP rank per node turns into external LB in vLLM.",
                                  "set kimi_k3_dp_lb_mode: external (one endpoint per node) or internal."))
        elif lb == "external" and d.dp_local not in (None, 1):
            errors.append(problem(where, PREFIX + "dp_lb_mode",
                                  "external load balancing needs one DP rank per vllm serve, this layout has %s "
                                  "per node." % d.dp_local, "use hybrid or internal load balancing."))
    elif d.settings["dp_lb_mode"] is not None:
        errors.append(problem(where, PREFIX + "dp_lb_mode", "is set but %s has no data parallelism." % name,
                              "remove kimi_k3_dp_lb_mode."))
    return errors


# ----------------------------------------------------------------------------- interconnect and features


def check_interconnect(d):
    """The interconnect between nodes, and the all2all / MoE backends it implies."""
    recipe, where, nnodes, hw, interconnect, errors = d.recipe, d.where, d.nnodes, d.hw, d.interconnect, []
    offered = [name for name, spec in recipe["interconnects"].items()
               if not d.vendor or d.vendor in spec.get("vendors", [d.vendor])]
    if nnodes > 1 and interconnect is None and "interconnect" not in d.invalid:
        errors.append(problem(where, PREFIX + "interconnect", "is not set for a %d-node cluster." % nnodes,
                              "set nvlink (GB200/GB300 trays in one NVL72 domain) or rdma (IB/RoCE)."
                              if "rdma" in offered else "set %s." % " or ".join(offered)))
    if interconnect and interconnect not in offered and interconnect in recipe["interconnects"]:
        errors.append(problem(where, PREFIX + "interconnect", "%s is not an interconnect of %s nodes."
                              % (interconnect, d.accelerator), "set %s." % " or ".join(offered)))
    elif interconnect == "nvlink" and nnodes > 1 and hw and not hw.get("gb_tray"):
        errors.append(problem(where, PREFIX + "interconnect",
                              "multi-node NVLink needs GB200/GB300 NVL trays, not %s." % d.accelerator,
                              "use rdma between %s nodes." % d.accelerator))
    return errors


def check_socket_ifname(d):
    """A warning: without kimi_k3_socket_ifname NCCL and Gloo choose the interface between nodes."""
    if d.nnodes < 2 or d.settings["socket_ifname"]:
        return []
    return [problem(d.where, PREFIX + "socket_ifname", "is not set; NCCL/Gloo pick an interface themselves (a wrong "
                    "pick hangs start-up).", "set the cluster-internal interface name, e.g. bond0.")]


def _feature_entry_problems(d):
    """kimi_k3_features names recipe features with boolean values (a mapping: the variable table checked the type)."""
    errors = []
    for name, value in (d.settings["features"] or {}).items():
        if name not in d.recipe["features"]:
            errors.append(problem(d.where, PREFIX + "features", "unknown feature %r." % (name,),
                                  "use one of %s." % ", ".join(sorted(d.recipe["features"]))))
            continue
        try:
            to_bool(value)
        except (TypeError, ValueError):
            errors.append(problem(d.where, PREFIX + "features", "%s: %s is not a boolean." % (name, plan_variables.show(value)),
                                  "use true or false."))
    return errors


def check_features(d):
    """Optional recipe features and the strategies they are allowed with."""
    recipe, where, strategy, name, errors = d.recipe, d.where, d.strategy, d.strategy_name, []
    errors = _feature_entry_problems(d)
    for feature, enabled in d.features.items():
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
        if spec.get("dcp_size") and d.sizes["tp"] % spec["dcp_size"] != 0:
            errors.append(problem(where, PREFIX + "features", "DCP size %d does not divide TP %d."
                                  % (spec["dcp_size"], d.sizes["tp"]),
                                  "use TP 8 on one 8-GPU node or turn dcp off."))
    return errors


# ----------------------------------------------------------------------------- ports and addresses


def check_ports(d):
    """The API, rendezvous and RPC ports a layout uses are distinct (the variable table checked their range)."""
    where, ports, launch, errors = d.where, d.ports, d.launch, []
    side_channel = d.role_spec.get("kv_side_channel_port")
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
    return errors


def check_addresses(d):
    """Every node has its own internal address."""
    errors, seen_addr = [], {}
    for node in d.nodes:
        addr = addresses.node_address(node)
        if addr in seen_addr:
            errors.append(problem(node["host"], PREFIX + "internal_address",
                                  "%s is also the address of %s." % (addr, seen_addr[addr]),
                                  "give every node its own cluster-internal address (kimi_k3_internal_address "
                                  "or ansible_host)."))
        seen_addr[addr] = node["host"]
    return errors


# ----------------------------------------------------------------------------- user arguments and environment


def check_extra_args(d):
    """kimi_k3_extra_args passes no secret, no --config file and no flag the collection derives (the table checked
    it is a string list). Items are named by position: a refused item may hold a secret."""
    errors, recipe, snapshot = [], d.recipe, d.snapshot
    extra_args = d.settings["extra_args"] or []
    for index, token in enumerate(extra_args):
        issue = extras.item_problem(recipe, snapshot, index, token)
        if issue:
            errors.append(problem(d.where, PREFIX + "extra_args", issue[0], issue[1]))
    for option, _values in vllm_flags.split_units(extra_args)[1]:
        issue = None if re.search(r"\s", option) else extras.arg_problem(recipe, snapshot, option)
        if issue:
            errors.append(problem(d.where, PREFIX + "extra_args", issue[0], issue[1]))
    return errors


def check_extra_env(d):
    """kimi_k3_extra_env: NAME: scalar entries, without derived, secret or removed variables."""
    not_secret = d.settings["extra_env_not_secret"] or []
    issues = (extras.env_problem(d.recipe, name, value, not_secret) for name, value in (d.settings["extra_env"] or {}).items())
    return [problem(d.where, PREFIX + "extra_env", issue[0], issue[1]) for issue in issues if issue]


# ----------------------------------------------------------------------------- API exposure and remote code


def check_api_exposure(d):
    """An API on a non-loopback address needs kimi_k3_api_key unless the operator opts out explicitly."""
    if d.api_access != "unauthenticated" or d.settings["allow_unauthenticated_api"] \
            or "api_key" in d.invalid:  # a refused key is the one mistake
        return []
    exposed = ["%s (%s)" % (n["host"], addresses.api_host(n)) for n in d.nodes
               if addresses.serves_http(d, n) and not addresses.is_loopback(addresses.api_host(n))]
    return [problem(d.where, PREFIX + "api_key",
                    "is not set (or empty), but %s would serve the API without authentication on %s."
                    % ("these nodes" if len(exposed) > 1 else "this node", ", ".join(exposed)),
                    "set kimi_k3_api_key from a vault (e.g. \"{{ vault_kimi_k3_api_key }}\"; the example inventories "
                    "read it from the environment: export KIMI_K3_API_KEY before ansible-playbook), or bind "
                    "kimi_k3_api_host to a loopback address, or set "
                    "kimi_k3_allow_unauthenticated_api: true if an authenticating proxy guards the port.")]


def check_model(d):
    """Remote code runs pinned: --trust-remote-code needs kimi_k3_model_revision (or an explicit opt-in)."""
    s, recipe = d.settings, d.recipe
    remote_code = "--trust-remote-code" in list(recipe["base_args"]) + list(s["extra_args"] or [])
    if not remote_code or s["model_revision"] or s["allow_unpinned_remote_code"] or "model_revision" in d.invalid:
        return []
    variant = recipe["variants"][s["variant"]]  # a refused variant reads as the default (plan_variables)
    model = s["model"] or variant["model"]
    return [problem(d.where, PREFIX + "model_revision",
                    "is not set, so --trust-remote-code would run whatever code %s holds at start-up." % model,
                    "set kimi_k3_model_revision to the 40-hex commit you reviewed (huggingface.co/%s/commits), or "
                    "kimi_k3_allow_unpinned_remote_code: true to accept unreviewed code." % model)]


# ----------------------------------------------------------------------------- deployment kind (PD roles)


def _pd_vendor_problem(d):
    pd = d.recipe.get("pd_cluster", {})
    if not d.role_spec.get("pd") or not d.vendor or d.vendor in pd.get("vendors", []):
        return None
    return problem(d.where, PREFIX + "deployment_kind", "prefill/decode deployments are not offered on %s "
                   "nodes (%s): %s." % (d.vendor, d.accelerator, pd.get("refused_vendor_reason", "")),
                   "run %s as replicas (kimi_k3_deployment_kind: replica) or as one single deployment."
                   % d.accelerator)


def _pd_flags_problem(d):
    snapshot, pd = d.snapshot, d.recipe.get("pd_cluster", {})
    if not d.role_spec.get("pd") or snapshot is None:
        return None
    missing = [f for f in pd.get("required_flags", []) if f not in snapshot["flags"]]
    if not missing:
        return None
    return problem(d.where, PREFIX + "vllm_version", "vLLM %s has no %s, which prefill/decode deployments "
                   "need." % (d.vllm_version, ", ".join(missing)),
                   "set kimi_k3_vllm_version to a release whose flag snapshot has %s." % ", ".join(missing))


def check_deployment_kind(d):
    """The kind's strategies (decode runs DEP: expert parallel), vendor and vLLM flags (recipe deployment_kinds)."""
    role, name, errors = d.role_spec, d.strategy_name, []
    allowed = role.get("strategies")
    if allowed and name and d.strategy and name not in allowed:
        wanted = d.recipe["strategies"].get(allowed[0], {})
        what = "expert parallel" if wanted.get("expert_parallel") or role.get("expert_parallel") else allowed[0]
        errors.append(problem(d.where, PREFIX + "strategy", "a %s deployment runs %s (%s), not %s."
                              % (d.kind, " or ".join(allowed), what, name),
                              "set kimi_k3_strategy: %s for deployment %s (or drop it: that is the default)."
                              % (allowed[0], d.deployment)))
    for issue in (_pd_vendor_problem(d), _pd_flags_problem(d)):
        if issue:
            errors.append(issue)
    return errors


# ----------------------------------------------------------------------------- the table and its driver


def _check(name, needs=(), warning=False):
    """A row of CHECKS: the function ``check_<name>`` of this module, run when none of ``needs`` failed or was
    skipped."""
    return Check(name, needs, globals()["check_" + name], warning)


# Order = report order; ``needs`` = checks whose problem is the root cause of this one's (it is then not run).
CHECKS = (
    _check("head"),
    _check("node_rank"),
    _check("host_names"),
    _check("hardware"),
    _check("version"),
    _check("image_version", warning=True),
    _check("flag_values"),
    _check("strategy"),
    _check("deployment_kind"),
    _check("sizes", ("strategy",)),
    _check("dp_split"),
    _check("single_tp"),
    _check("load_balancing", ("strategy",)),
    _check("interconnect"),
    _check("socket_ifname", warning=True),
    _check("features"),
    _check("ports"),
    _check("addresses"),
    _check("api_exposure"),
    _check("image"),
    _check("model"),
    _check("extra_args"),
    _check("extra_env"),
)


def run(deployment, checks=None):
    """``(errors, warnings)`` of the CHECKS (or ``checks``) on a resolved deployment."""
    errors, warnings, blocked = [], [], set()
    for chk in CHECKS if checks is None else checks:
        if blocked.intersection(chk.needs):
            blocked.add(chk.name)
            continue
        found = chk.run(deployment)
        if found and not chk.warning:
            blocked.add(chk.name)
        (warnings if chk.warning else errors).extend(found)
    return errors, warnings


def validate(nodes, recipe, snapshots, deployment=None):
    """Read, resolve and check one deployment: ``(Deployment, errors, warnings)``.

    ``deployment``: ``{"name", "several"}`` (default: the inventory's only deployment, "main")."""
    deployment = deployment or {"name": recipe["defaults"].get("deployment", "main"), "several": False}
    nodes = [dict(node) for node in nodes]  # read_settings adds "settings"; the caller's nodes stay as given
    settings, invalid, problems = plan_variables.read_settings(nodes, recipe, snapshots,
                                                               deployment["name"] if deployment["several"] else None)
    resolved = plan_resolve.resolve(settings, {"nodes": nodes, "invalid": invalid, "snapshots": snapshots,
                                               "deployment": deployment}, recipe)
    errors, warnings = run(resolved)
    return resolved, problems + errors, warnings
