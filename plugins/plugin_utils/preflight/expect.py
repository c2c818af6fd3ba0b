# -*- coding: utf-8 -*-
# Copyright: gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What preflight expects of each node, from the host's plan and the recipe's ``node_requirements`` (pure).

The plan says what will run (accelerator, GPUs per node, interconnect, ports, addresses, the model and its cache,
/dev/shm, memlock, devices, the all2all kernel); the recipe says what a node must provide for it (driver/CUDA/ROCm
floors, per-GPU memory floor, the fabric prerequisites of the all2all kernel). Nothing here reads inventory variables.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import vllm_flags

IMEX_CHANNEL = "/dev/nvidia-caps-imex-channels/channel0"
RDMA_DEVICES = "/dev/infiniband"


def probe_ports(plan):
    """node_probe ``ports``: the API on its bind address, rendezvous and DP RPC on the internal address."""
    internal = plan["internal_address"]
    return [{"name": "api", "port": int(plan["api_port"]), "bind": [plan["api_host"]]},
            {"name": "master", "port": int(plan["master_port"]), "bind": [internal]},
            {"name": "dp_rpc", "port": int(plan["dp_rpc_port"]), "bind": [internal]}]


def socket_ifnames(plan):
    """Interface names NCCL/Gloo are pinned to by the plan (GLOO_SOCKET_IFNAME, else NCCL_SOCKET_IFNAME): exact names
    of a comma list; NCCL's ``=name`` is exact too, ``^name`` (exclusions) name nothing to check."""
    env = plan.get("env") or {}
    value = env.get("GLOO_SOCKET_IFNAME") or env.get("NCCL_SOCKET_IFNAME") or ""
    names = [n.strip().lstrip("=") for n in str(value).split(",")]
    return [n for n in names if n and not n.startswith("^")]


# Addresses that mean "every address of the node" to a listener.
WILDCARDS = ("", "0.0.0.0", "::", "*")


def exposed_listeners(plan):
    """The inter-node ports the node's vLLM will listen on at every address (not only the internal one):
    ``[{"port", "variable", "what"}]``, from the plan's ``parallel`` layout and env.

    On the head of a multi-node deployment: the TP/PP rendezvous of one engine spanning the nodes (``--master-addr``:
    rank 0's torch TCPStore on ``--master-port``, all addresses), or the DP ports of a data-parallel launch
    (``--data-parallel-address``: the RPC port and the torch.distributed ports vLLM picks among free ones). On any node: the NIXL side channel when
    VLLM_NIXL_SIDE_CHANNEL_HOST is unset or a wildcard. NCCL/Gloo bootstrap sockets bind the pinned interface's
    address (socket_ifname checks that interface), so they are not listed."""
    env = plan.get("env") or {}
    out = []
    head = plan.get("role") == "head" and (plan.get("nnodes") or 1) > 1
    data_parallel = (plan.get("parallel") or {}).get("dp_local") is not None  # a data-parallel launch
    if head and not data_parallel and plan.get("master_port"):
        out.append({"port": int(plan["master_port"]), "variable": "kimi_k3_master_port",
                    "what": "TP/PP rendezvous (torch TCPStore)"})
    if head and data_parallel and plan.get("dp_rpc_port"):
        out.append({"port": int(plan["dp_rpc_port"]), "variable": "kimi_k3_dp_rpc_port",
                    "what": "DP RPC (and the torch.distributed ports vLLM picks among free ones)"})
    side = env.get("VLLM_NIXL_SIDE_CHANNEL_PORT")
    if str(side or "").strip().isdigit() and str(env.get("VLLM_NIXL_SIDE_CHANNEL_HOST") or "").strip() in WILDCARDS:
        out.append({"port": int(side), "variable": "kimi_k3_extra_env",
                    "what": "NIXL side channel (VLLM_NIXL_SIDE_CHANNEL_HOST %s)" % (
                        env.get("VLLM_NIXL_SIDE_CHANNEL_HOST") or "unset")})
    return out


def _ulimit_soft(container, name):
    for item in container.get("ulimits") or []:
        parts = str(item).split(":")
        if parts[0] == name and len(parts) >= 2:
            return int(parts[1])
    return None


def _needs_device(container, path):
    return any(str(d).split(":", maxsplit=1)[0] == path for d in container.get("devices") or [])


def requirements(recipe, vendor, accelerator):
    """Floors of one node from the recipe: min_driver/min_cuda (NVIDIA) or min_rocm (AMD), min_gpu_memory_mib."""
    req = recipe.get("node_requirements") or {}
    out = dict((req.get("vendors") or {}).get(vendor) or {})
    out["min_gpu_memory_mib"] = (req.get("min_gpu_memory_mib") or {}).get(accelerator)
    return out


def all2all_backend(plan, cluster):
    """The --all2all-backend the host's vLLM argv carries (``--flag value`` or ``--flag=value``), else the cluster's."""
    values = vllm_flags.flag_value([str(a) for a in plan.get("vllm_args") or []], "--all2all-backend")
    return values[-1] if values else cluster.get("all2all_backend")


def fabric_prerequisites(recipe, backend, vendor):
    """The recipe's ``node_requirements.all2all_prerequisites`` entry for ``backend`` on ``vendor`` (None: none)."""
    for entry in (recipe.get("node_requirements") or {}).get("all2all_prerequisites") or []:
        if backend in (entry.get("backends") or []) and entry.get("vendor") == vendor:
            return entry
    return None


def peer_memory_only(prereq, env):
    """True when the plan's env switches DMA-BUF off (NCCL_DMABUF_ENABLE=0): only a peer-memory module will do."""
    off = ((prereq or {}).get("gpudirect") or {}).get("dmabuf_off_env") or {}
    return bool(off) and all(str((env or {}).get(k)) == str(v) for k, v in off.items())


def _fabric_expectations(plan, cluster, recipe):
    backend = all2all_backend(plan, cluster)
    prereq = fabric_prerequisites(recipe, backend, plan["vendor"])
    return {"all2all_backend": backend, "fabric_prerequisites": prereq,
            "gpudirect_peer_only": peer_memory_only(prereq, plan.get("env"))}


def weight_read_basis(plan, recipe):
    """The read rate this node's launch timeouts were derived from (the plan's ``timeouts``: its deployment's, set
    by the slowest node as declared in kimi_k3_weight_read_mib_s) with the recipe's load factor; None when the
    timeouts are their ceilings."""
    timeouts = plan.get("timeouts") or {}
    if not timeouts.get("weight_read_mib_s"):
        return None
    return {"mib_s": timeouts["weight_read_mib_s"], "engine_ready_timeout_s": timeouts.get("engine_ready_timeout_s"),
            "load_factor": (recipe.get("timeouts") or {}).get("load_factor", 1.0)}


def expected_from_plan(plan, cluster, recipe):
    """The ``expected`` dict of preflight_checks for one host."""
    container = plan.get("container") or {}
    exp = {
        "accelerator": plan["accelerator"],
        "vendor": plan["vendor"],
        "gpus_per_node": cluster.get("gpus_per_node"),
        "interconnect": plan.get("interconnect"),
        "nnodes": plan.get("nnodes") or cluster.get("nnodes") or 1,
        "role": plan["role"],
        "internal_address": plan["internal_address"],
        "docker_host": plan["docker_host"],
        "model": plan["model"],
        "model_revision": plan.get("model_revision"),
        "model_cache_dir": plan["model_cache_dir"],
        "shm_size": container.get("shm_size"),
        "memlock": _ulimit_soft(container, "memlock"),
        "imex_channel": _needs_device(container, IMEX_CHANNEL),
        "rdma_devices": _needs_device(container, RDMA_DEVICES),
        "socket_ifnames": socket_ifnames(plan),
        "exposed_listeners": exposed_listeners(plan),
        "weight_read": weight_read_basis(plan, recipe),
    }
    exp.update(requirements(recipe, plan["vendor"], plan["accelerator"]))
    exp.update(_fabric_expectations(plan, cluster, recipe))
    return exp
