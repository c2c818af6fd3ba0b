# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Weights fit and KV capacity of one deployment, predicted from its final argv (pure functions, no I/O).

The arithmetic works per GPU of one engine (one data-parallel rank), because that is how vLLM sizes its pool:

* usable        = GPU memory x --gpu-memory-utilization (rule ``gpu_fraction``), or a fixed pool such as the
                  CPU engine's ``VLLM_CPU_KVCACHE_SPACE`` (rule ``fixed_kv_bytes``; weights live elsewhere);
* weights/GPU   = replicated part / (TP x PP) + routed experts / (EP x PP) with expert parallelism, else
                  everything / (TP x PP): without EP every data-parallel replica holds a full copy;
* KV budget     = usable - weights/GPU - the hardware's reserve (recipe ``capacity.budget_by_hardware``);
* per token     = MLA layers on the GPU x (kv_lora_rank + qk_rope_head_dim) x KV bytes / DCP (every TP rank
                  holds the whole latent KV; decode context parallelism splits it);
* per sequence  = KDA layers on the GPU x recurrent state (heads x head_dim^2, FP32) and conv state
                  (3 x (kernel - 1) x heads x head_dim, model dtype) / TP (heads split over TP);
* concurrency at L = KV budget / (L x per token + per sequence); vLLM's "KV cache size" = int(concurrency x L).

Recipe knowledge (architectures, reserves, dtype sizes, the length table) is data in ``capacity`` of the recipe
document; the model's own ``config.json`` (read on the controller, plugin_utils.plan.model_facts) wins over it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math

GIB = 1024 ** 3
MIB = 1024 ** 2
GB = 1000 ** 3


def _int(value, default=0):
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return default


# ----------------------------------------------------------------------------- architecture

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4, "float8_e4m3fn": 1}


def architecture_from_config(config):
    """The attention figures of a Hugging Face config.json (mapping), or None when it is not an MLA model.

    Kimi/DeepSeek-style configs: ``kv_lora_rank`` and ``qk_rope_head_dim`` (MLA), ``linear_attn_config``
    (``kda_layers``, ``num_heads``, ``head_dim``, ``short_conv_kernel_size``) for the KDA layers; a vision
    wrapper keeps them under ``text_config``."""
    if not isinstance(config, dict):
        return None
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    if _int(text.get("kv_lora_rank")) <= 0 or _int(text.get("num_hidden_layers")) <= 0:
        return None
    layers = _int(text["num_hidden_layers"])
    linear = text.get("linear_attn_config") if isinstance(text.get("linear_attn_config"), dict) else {}
    kda = linear.get("kda_layers") if isinstance(linear.get("kda_layers"), list) else []
    dtype = str(text.get("torch_dtype") or text.get("dtype") or config.get("torch_dtype") or "bfloat16")
    return {"source": "config.json", "dtype_bytes": DTYPE_BYTES.get(dtype, 2),
            "mla_layers": layers - len(kda), "kda_layers": len(kda),
            "kv_lora_rank": _int(text["kv_lora_rank"]), "qk_rope_head_dim": _int(text.get("qk_rope_head_dim")),
            "kda_num_heads": _int(linear.get("num_heads")), "kda_head_dim": _int(linear.get("head_dim")),
            "kda_conv_kernel": _int(linear.get("short_conv_kernel_size"), 4),
            "max_position_embeddings": _int(text.get("max_position_embeddings")) or None}


def kda_state_bytes(arch):
    """One sequence's state in one KDA layer, all heads: recurrent (FP32) + short-conv states (model dtype)."""
    heads, dim = arch.get("kda_num_heads", 0), arch.get("kda_head_dim", 0)
    recurrent = heads * dim * dim * 4
    conv = 3 * max(arch.get("kda_conv_kernel", 4) - 1, 0) * heads * dim * arch.get("dtype_bytes", 2)
    return recurrent + conv


def per_gpu_kv(arch, layout, kv_bytes):
    """(bytes per token, bytes per sequence) on one GPU of an engine with ``layout`` (tp, pp, dcp)."""
    pp, tp, dcp = layout["pp"], layout["tp"], max(layout.get("dcp", 1), 1)
    mla_layers = int(math.ceil(arch["mla_layers"] / float(pp)))
    kda_layers = int(math.ceil(arch["kda_layers"] / float(pp)))
    token = mla_layers * (arch["kv_lora_rank"] + arch["qk_rope_head_dim"]) * kv_bytes / float(dcp)
    return token, kda_layers * kda_state_bytes(arch) / float(tp)


# ----------------------------------------------------------------------------- memory


def weights_per_gpu(weights_bytes, replicated_bytes, layout):
    """Weight bytes on one GPU: the routed experts split over EP (TP x DP) with expert parallelism."""
    tp, pp, dp = layout["tp"], layout["pp"], layout["dp"]
    if not layout.get("ep"):
        return weights_bytes / float(tp * pp)
    replicated = min(replicated_bytes, weights_bytes)
    return replicated / float(tp * pp) + (weights_bytes - replicated) / float(tp * dp * pp)


def kv_budget(rule, memory_bytes, utilisation, weights_gpu, env):
    """The KV pool of one GPU (bytes; negative when the weights do not fit) under a hardware's budget rule."""
    if rule.get("rule") == "fixed_kv_bytes":
        value = env.get(rule.get("env", ""))
        try:
            return float(value) * rule.get("unit_bytes", GIB)
        except (TypeError, ValueError):
            return None
    return memory_bytes * utilisation - weights_gpu - rule.get("reserve_gib", 0) * GIB


def pool_bytes(budget, token_bytes, block_size):
    """The budget in whole blocks of ``block_size`` tokens (the pool vLLM allocates); unchanged without one."""
    if not block_size or token_bytes <= 0:
        return budget
    return math.floor(budget / (block_size * token_bytes)) * block_size * token_bytes


def max_accepted_length(budget, token_bytes, state_bytes, block_size=None):
    """The longest max-model-len the engine starts with: one sequence of it (its tokens in whole blocks of
    ``block_size``, plus its state) fits the budget - vLLM's own test (``_check_enough_kv_cache_memory``: needed
    ``cdiv(L, block) x page`` per layer above the available memory is refused). 0 when not one block fits,
    None when unknown."""
    if budget is None or token_bytes <= 0:
        return None
    step = int(block_size) if block_size else 1
    room = budget - state_bytes
    if room < step * token_bytes:
        return 0
    return int(math.floor(room / (step * token_bytes))) * step


def capacity_at(budget, token_bytes, state_bytes, length, engines=1):
    """Predicted figures at max-model-len ``length``: vLLM's per-engine line and the deployment's total."""
    need = length * token_bytes + state_bytes
    concurrency = budget / need if need > 0 and budget > 0 else 0.0
    return {"max_model_len": length, "kv_cache_size_tokens": int(concurrency * length),
            "max_concurrency": round(concurrency, 2), "deployment_concurrency": round(concurrency * engines, 2),
            "sequence_gib": round(need / GIB, 3)}


def auto_length(budget, token_bytes, state_bytes, per_engine, multiple, ceiling):
    """The largest length (a multiple of ``multiple``, at most ``ceiling``) at which one engine holds
    ``per_engine`` sequences; None when not even ``multiple`` tokens fit."""
    if budget <= 0 or token_bytes <= 0 or per_engine <= 0:
        return None
    tokens = (budget / float(per_engine) - state_bytes) / token_bytes
    length = int(tokens // multiple) * multiple
    if ceiling:
        length = min(length, int(ceiling))
    return length if length >= multiple else None


def nodes_needed(weights_bytes, memory_bytes, utilisation, reserve_bytes, gpus_per_node):
    """The fewest nodes whose GPUs hold ``weights_bytes`` (split evenly) with the reserve left on each."""
    per_gpu = memory_bytes * utilisation - reserve_bytes
    if per_gpu <= 0 or gpus_per_node <= 0:
        return None
    gpus = int(math.ceil(weights_bytes / per_gpu))
    return int(math.ceil(gpus / float(gpus_per_node)))
