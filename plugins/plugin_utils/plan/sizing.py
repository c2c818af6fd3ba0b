# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fit and capacity of one planned deployment, judged on its final argv (pure functions, no I/O).

``assess(ctx, recipe, args, facts)`` returns ``{"capacity", "errors", "warnings", "max_model_len"}``:
the weights against the GPUs that hold one copy (refused with the figures and the fix), the KV budget and the
predicted KV tokens / concurrency at the plan's max-model-len and over the recipe's length table, and the length
``kimi_k3_max_model_len: auto`` resolves to for ``kimi_k3_target_concurrency``. The arithmetic itself is
plugin_utils.plan.capacity; ``facts`` is what the controller found in the model cache (plugin_utils.plan.model_facts),
or None.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math
import re

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import capacity as pc
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import vllm_flags
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan.variables import PREFIX

GPU_UTILISATION_DEFAULT = 0.92  # vLLM 0.27.1 / 0.28.0 / 0.33.0 parsers (reference §12.1)
AUTO_VALUES = ("auto", "-1")
_SUFFIX = {"k": 10 ** 3, "K": 2 ** 10, "m": 10 ** 6, "M": 2 ** 20, "g": 10 ** 9, "G": 2 ** 30}


def _problem(host, variable, message, fix):
    return {"host": host, "variable": variable, "message": message, "fix": fix}


def parse_length(text):
    """vLLM's --max-model-len value: an integer, ``25.6k`` / ``1K`` / ``1m`` style, ``auto``/-1 (None: unreadable)."""
    text = str(text).strip()
    if text.lower() in AUTO_VALUES:
        return "auto"
    match = re.match(r"^([0-9]+(?:\.[0-9]+)?)([kKmMgG]?)$", text)
    if not match:
        return None
    value = float(match.group(1)) * _SUFFIX.get(match.group(2), 1)
    return int(value) if value >= 1 else None


def _value(args, flag, snapshot, default=None):
    values = vllm_flags.flag_value(args, flag, snapshot)
    return values[-1] if values else default


def layout_of(args, snapshot, parallel):
    """The sizing facts of a plan: its ``parallel`` sizes (EP as whether experts are sharded) and, from its argv,
    utilisation, KV dtype, max-model-len and max-num-seqs."""
    def number(flag, default, cast=int):
        try:
            return cast(_value(args, flag, snapshot, default))
        except (TypeError, ValueError):
            return default
    length = _value(args, "--max-model-len", snapshot)
    return {"tp": parallel["tp"], "pp": parallel["pp"], "dp": parallel["dp"], "dcp": parallel["dcp"],
            "ep": parallel["ep"] > 1, "utilisation": number("--gpu-memory-utilization", GPU_UTILISATION_DEFAULT, float),
            "kv_cache_dtype": str(_value(args, "--kv-cache-dtype", snapshot, "auto")),
            "max_model_len": parse_length(length) if length is not None else None,
            "max_num_seqs": number("--max-num-seqs", None)}


def known_model(ctx, recipe):
    """The recipe variant whose model the deployment serves, or None (kimi_k3_model names another model)."""
    s = ctx["settings"]
    variant = recipe["variants"].get(s["variant"]) or recipe["variants"]["default"]
    return variant if not s["model"] or s["model"] == variant["model"] else None


def model_figures(ctx, recipe, facts):
    """(weights bytes, weights source, architecture, architecture source, shard count); None where unknown."""
    variant, cap = known_model(ctx, recipe), recipe.get("capacity", {})
    facts = facts or {}
    weights, wsource = facts.get("weights_bytes"), facts.get("index_path")
    arch = pc.architecture_from_config(facts.get("config"))
    asource = facts.get("config_path") if arch else None
    if variant and weights is None:
        weights, wsource = variant["weights_gb"] * pc.GB, "recipe variant %s (weights_gb)" % ctx["settings"]["variant"]
    if variant and arch is None:
        arch = dict(cap.get("architectures", {}).get(variant.get("architecture"), {})) or None
        asource = "recipe capacity.architectures.%s" % variant.get("architecture") if arch else None
    shards = facts.get("shard_count") or (variant or {}).get("shards")
    return weights, wsource, arch, asource, shards


def kv_element_bytes(layout, arch, recipe, warnings, where):
    table = recipe.get("capacity", {}).get("kv_dtype_bytes", {})
    size = table.get(layout["kv_cache_dtype"])
    if size == "model" or (size is None and layout["kv_cache_dtype"] not in table):
        if size is None:
            warnings.append(_problem(where, PREFIX + "kv_cache_dtype", "--kv-cache-dtype %s has no size in the "
                                     "recipe's capacity.kv_dtype_bytes; KV capacity is predicted with the model "
                                     "dtype (%d bytes)." % (layout["kv_cache_dtype"], arch.get("dtype_bytes", 2)),
                                     "add the dtype's bytes per element to capacity.kv_dtype_bytes."))
        return arch.get("dtype_bytes", 2)
    return size


def _unchecked(ctx, what, weights):
    model = ctx["settings"]["model"]
    cache = ctx["settings"]["model_cache_dir"] or "the model cache"
    return _problem(ctx["where"], PREFIX + "model", "%s is not a model the collection knows and the controller "
                    "found no %s for it under %s: %s not checked before launch." % (
                        model, "config.json" if weights else "model.safetensors.index.json or config.json", cache,
                        what), "stage the model into kimi_k3_model_cache_dir on the controller too (its "
                    "config.json and model.safetensors.index.json), or watch the engine's KV cache line.")


def copy_strategies(recipe, accelerator):
    """Strategies that spread one copy of the weights over every node of a deployment on this hardware."""
    out = []
    for name, spec in recipe["strategies"].items():
        spread = spec.get("launch") != "single" and (str(spec["sizes"]["dp"]) == "1" or spec.get("expert_parallel"))
        allowed = accelerator not in spec.get("unsupported_hardware", []) and \
            accelerator in spec.get("only_hardware", [accelerator])
        if spread and allowed:
            out.append(name)
    return out


def _fit_problem(ctx, recipe, figures, layout):
    """The refusal when one copy of the weights does not fit its GPUs (None when it does)."""
    hw, gpus = ctx["hw"], layout["tp"] * layout["pp"] * (layout["dp"] if layout["ep"] else 1)
    mem, util, reserve = figures["memory_bytes"], layout["utilisation"], figures["reserve_bytes"]
    if figures["weights_gpu"] + reserve <= mem * util:
        return None
    copy = ("each data-parallel replica (TP %d x PP %d) holds a full copy" % (layout["tp"], layout["pp"])
            if layout["dp"] > 1 and not layout["ep"] else "one copy spans TP %d x PP %d%s" % (
                layout["tp"], layout["pp"], " x DP %d (expert parallel)" % layout["dp"] if layout["ep"] else ""))
    nodes = pc.nodes_needed(figures["weights_bytes"], mem, util, reserve, hw.get("gpus_per_node", 0))
    return _problem(ctx["where"], PREFIX + "strategy", "the weights do not fit: {:,.0f} GB ({}) against {:d} x "
                    "{:.0f} GB x {:.2f} = {:,.0f} GB usable, because {}; that is {:.1f} GB of weights + {:.0f} GiB "
                    "reserve per GPU, above its {:.1f} GB usable.".format(
                        figures["weights_bytes"] / pc.GB, figures["weights_source"], gpus, mem / pc.GB, util,
                        gpus * mem * util / pc.GB, copy, figures["weights_gpu"] / pc.GB, reserve / pc.GIB,
                        mem * util / pc.GB),
                    "spread one copy over at least %s %s nodes with %s, or serve kimi_k3_variant nvfp4 if it fits."
                    % (nodes or "more", ctx["accelerator"],
                       " / ".join(copy_strategies(recipe, ctx["accelerator"])) or "a multi-node strategy"))


def _budget_figures(ctx, recipe, layout, weights_bytes):
    """Per-GPU memory figures under the hardware's budget rule (None: no rule for this hardware)."""
    rule = recipe.get("capacity", {}).get("budget_by_hardware", {}).get(ctx["accelerator"] or "")
    if not rule:
        return None
    replicated = 0
    arch_name = (known_model(ctx, recipe) or {}).get("architecture")
    if arch_name:
        replicated = recipe["capacity"]["architectures"].get(arch_name, {}).get("replicated_gb", 0) * pc.GB
    memory = ctx["hw"].get("memory_mib", 0) * pc.MIB
    fixed = rule.get("rule") == "fixed_kv_bytes"
    weights_gpu = 0 if fixed else pc.weights_per_gpu(weights_bytes, replicated, layout)
    reserve = 0 if fixed else rule.get("reserve_gib", 0) * pc.GIB
    budget = pc.kv_budget(rule, memory, layout["utilisation"], weights_gpu, ctx.get("env") or {})
    return {"rule": rule, "memory_bytes": memory, "weights_gpu": weights_gpu, "reserve_bytes": reserve,
            "weights_bytes": weights_bytes, "budget": budget, "fixed": fixed}


def _length_problem(ctx, length, cap, budget_gib, best):
    return _problem(ctx["where"], PREFIX + "max_model_len", "one sequence of --max-model-len %d needs %.2f GiB of KV "
                    "per GPU, the predicted KV budget is %.2f GiB per GPU: vLLM refuses to start." % (
                        length, cap["sequence_gib"], budget_gib),
                    "set kimi_k3_max_model_len to at most %s, or auto with kimi_k3_target_concurrency, or add GPUs."
                    % (best if best else "a length that fits (none does: add GPUs)"))


def _resolve_auto(ctx, recipe, figures, engines, errors):
    """The length ``auto`` resolves to for kimi_k3_target_concurrency (None: refused, the problem is in errors)."""
    target = ctx["settings"].get("target_concurrency")
    if target is None:
        errors.append(_problem(ctx["where"], PREFIX + "target_concurrency", "is not set, but kimi_k3_max_model_len "
                               "is auto: the plan picks the longest length that holds this many sequences.",
                               "set kimi_k3_target_concurrency (concurrent full-length sequences the deployment must "
                               "hold), or give kimi_k3_max_model_len a number."))
        return None
    cap = recipe.get("capacity", {})
    per_engine = int(math.ceil(target / float(engines)))
    length = pc.auto_length(figures["pool"], figures["token"], figures["state"], per_engine,
                            cap.get("auto_len_multiple", 1024), figures["ceiling"])
    if length is None:
        errors.append(_problem(ctx["where"], PREFIX + "target_concurrency", "%d concurrent sequences (%d per engine) "
                               "do not fit at any length: the KV budget is %.2f GiB per GPU and each sequence needs "
                               "%.2f GiB of KDA state alone." % (target, per_engine, figures["pool"] / pc.GIB,
                                                                 figures["state"] / pc.GIB),
                               "lower kimi_k3_target_concurrency or add nodes (more data-parallel engines)."))
    return length


def _table(recipe, figures, engines, ceiling):
    lengths = [n for n in recipe.get("capacity", {}).get("lengths", []) if not ceiling or n <= ceiling]
    return [pc.capacity_at(figures["pool"], figures["token"], figures["state"], n, engines) for n in lengths]


def _record(figures, layout, sources, engines):
    return {"weights_gb": round(figures["weights_bytes"] / pc.GB, 1) if figures["weights_bytes"] else None,
            "weights_source": sources[0], "architecture_source": sources[1], "budget_rule": figures["rule"]["rule"],
            "engines": engines, "gpu_memory_utilization": layout["utilisation"],
            "kv_cache_dtype": layout["kv_cache_dtype"], "max_num_seqs": layout["max_num_seqs"],
            "per_gpu": {"memory_gib": round(figures["memory_bytes"] / pc.GIB, 2),
                        "weights_gib": round(figures["weights_gpu"] / pc.GIB, 2),
                        "reserve_gib": round(figures["reserve_bytes"] / pc.GIB, 2),
                        "kv_budget_gib": round(figures["pool"] / pc.GIB, 2),
                        "kv_bytes_per_token": round(figures["token"], 1),
                        "state_bytes_per_sequence": int(figures["state"])},
            "kv_tokens": int(figures["pool"] / figures["token"]) if figures["token"] else 0,
            "max_model_len_limit": figures["limit"]}


def _predict(ctx, recipe, layout, figures, out):
    """Capacity at the plan's length, the table and the auto length, into ``out``."""
    engines = layout["dp"]
    length = layout["max_model_len"] or figures["ceiling"]  # vLLM's default: the model's own context length
    if length == "auto":
        length = _resolve_auto(ctx, recipe, figures, engines, out["errors"])
        out["max_model_len"] = length
    cap = out["capacity"]
    cap["table"] = _table(recipe, figures, engines, figures["ceiling"])
    cap["target_concurrency"] = ctx["settings"].get("target_concurrency")
    cap["max_model_len"] = length
    if isinstance(length, int):
        at = pc.capacity_at(figures["pool"], figures["token"], figures["state"], length, engines)
        cap["at_max_model_len"] = at
        if figures["limit"] is not None and length > figures["limit"] and not out["errors"]:
            best = pc.auto_length(figures["pool"], figures["token"], figures["state"], 1,
                                  recipe.get("capacity", {}).get("auto_len_multiple", 1024), figures["ceiling"])
            issue = _length_problem(ctx, length, at, figures["pool"] / pc.GIB, best)
            if figures["trusted"] and ctx["settings"].get("max_model_len_fit") != "warn":
                out["errors"].append(issue)
            elif figures["trusted"]:
                issue["message"] += (" (kimi_k3_max_model_len_fit: warn - launched anyway, so that the engine's own "
                                     "refusal can be observed)")
                out["warnings"].append(issue)
            else:
                issue["message"] += (" (predicted from estimates - %s: refused only once the hardware's reserve is "
                                     "calibrated and the model's config.json is read)" % figures["estimates"])
                out["warnings"].append(issue)
        elif layout["max_model_len"] != "auto":
            _target_warning(ctx, recipe, figures, (at, engines), out["warnings"])


def _target_warning(ctx, recipe, figures, predicted, warnings):
    """A fixed max-model-len at which the deployment is predicted to hold fewer than kimi_k3_target_concurrency."""
    target, (at, engines) = ctx["settings"].get("target_concurrency"), predicted
    if not target or at["deployment_concurrency"] >= target:
        return
    longest = pc.auto_length(figures["pool"], figures["token"], figures["state"], int(math.ceil(target / float(engines))),
                             recipe.get("capacity", {}).get("auto_len_multiple", 1024), figures["ceiling"])
    held = (target, at["max_model_len"], at["deployment_concurrency"])
    warnings.append(_problem(ctx["where"], PREFIX + "target_concurrency", "%d concurrent sequences of %d tokens are "
                             "wanted, the deployment is predicted to hold %.2f." % held,
                             "set kimi_k3_max_model_len to %s (or auto), or add nodes." % (
                                 longest if longest else "a shorter length")))


def assess(ctx, recipe, args, facts=None):
    """Fit, capacity and the resolved max-model-len of one deployment from the head's final argv."""
    out = {"capacity": None, "errors": [], "warnings": [], "max_model_len": None}
    layout = layout_of(args, ctx["snapshot"], ctx["parallel"])
    weights, wsource, arch, asource, shards = model_figures(ctx, recipe, facts)
    out["shards"] = shards
    out["weights_bytes"] = weights
    if weights is None or arch is None:
        out["warnings"].append(_unchecked(ctx, "the weights fit and the KV capacity were" if weights is None
                                          else "the KV capacity was", weights))
    if weights is None:
        return out
    figures = _budget_figures(ctx, recipe, layout, weights)
    if figures is None:
        out["warnings"].append(_problem(ctx["where"], PREFIX + "accelerator", "%s has no KV budget rule in the "
                                        "recipe (capacity.budget_by_hardware): fit and KV capacity were not checked."
                                        % ctx["accelerator"], "add the hardware's rule to the recipe data."))
        return out
    figures["weights_source"] = wsource
    problem = None if figures["fixed"] else _fit_problem(ctx, recipe, figures, layout)
    if problem or arch is None or figures["budget"] is None:
        out["errors"] += [problem] if problem else []
        return out
    kv_bytes = kv_element_bytes(layout, arch, recipe, out["warnings"], ctx["where"])
    figures["token"], figures["state"] = pc.per_gpu_kv(arch, layout, kv_bytes)
    figures["pool"] = pc.pool_bytes(figures["budget"], figures["token"], figures["rule"].get("block_size"))
    figures["ceiling"] = arch.get("max_position_embeddings")
    figures["limit"] = pc.max_accepted_length(figures["budget"], figures["token"], figures["state"],
                                              figures["rule"].get("block_size"))
    estimates = [what for what, ok in (("uncalibrated %s reserve" % ctx["accelerator"],
                                        figures["rule"].get("calibrated") or figures["fixed"]),
                                       ("architecture from recipe data", asource and asource.endswith("config.json")))
                 if not ok]
    figures["trusted"], figures["estimates"] = not estimates, ", ".join(estimates)
    out["capacity"] = _record(figures, layout, (wsource, asource), layout["dp"])
    _predict(ctx, recipe, layout, figures, out)
    return out


def with_length(args, length, snapshot):
    """``args`` with --max-model-len auto (or -1) replaced by ``length``."""
    out, skip = [], False
    for i, token in enumerate(args):
        if skip:
            skip = False
            continue
        name = token.split("=", 1)[0]
        canonical = vllm_flags.canonical_flag(name, snapshot) if snapshot else name
        is_len = vllm_flags.is_flag(name) and canonical == "--max-model-len"
        if is_len and "=" in token:
            out.append("%s=%d" % (name, length) if parse_length(token.split("=", 1)[1]) == "auto" else token)
        elif is_len and i + 1 < len(args) and parse_length(args[i + 1]) == "auto":
            out += [token, str(length)]
            skip = True
        else:
            out.append(token)
    return out


def capacity_lines(name, cap, timeouts=None):
    """The plan summary's lines for one deployment's capacity record and timeouts."""
    lines = []
    if cap:
        g = cap["per_gpu"]
        lines.append("capacity %s: weights %s GB (%s); per GPU %.1f GiB x %.2f - %.1f GiB weights - %.1f GiB reserve "
                     "= %.1f GiB KV; %s B/token (%s) + %.1f MiB KDA state/sequence; %d engine(s)" % (
                         name, "{:,.0f}".format(cap["weights_gb"]), cap["weights_source"], g["memory_gib"],
                         cap["gpu_memory_utilization"], g["weights_gib"], g["reserve_gib"], g["kv_budget_gib"],
                         "{:,.0f}".format(g["kv_bytes_per_token"]), cap["kv_cache_dtype"],
                         g["state_bytes_per_sequence"] / float(pc.MIB), cap["engines"]))
        at = cap.get("at_max_model_len")
        if at:
            lines.append("  at max-model-len {:,}: {:,} KV tokens, {:.2f}x per engine, {:.2f} per deployment{}".format(
                at["max_model_len"], at["kv_cache_size_tokens"], at["max_concurrency"], at["deployment_concurrency"],
                "; --max-num-seqs {:d} admits at most {:d} per engine".format(cap["max_num_seqs"], cap["max_num_seqs"])
                if cap.get("max_num_seqs") else ""))
        lines.append("  max-model-len   KV tokens/engine  concurrency/engine  deployment")
        for row in cap["table"]:
            lines.append("  {:>13,}  {:>16,}  {:>18.2f}  {:>10.2f}".format(
                row["max_model_len"], row["kv_cache_size_tokens"], row["max_concurrency"],
                row["deployment_concurrency"]))
    if timeouts:
        lines.append("timeouts %s: engine ready %d s, launch ready %d s, stall %d s (%s)" % (
            name, timeouts["engine_ready_timeout_s"], timeouts["launch_ready_timeout_s"],
            timeouts["stall_timeout_s"], timeouts["basis"]))
    return lines
