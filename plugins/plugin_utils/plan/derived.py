# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the plan derives from a deployment's rendered argv before its node plans are written (pure functions).

``apply`` runs between rendering every node's argv and writing the plans: the weights fit and KV capacity
(plugin_utils.plan.sizing), the length ``kimi_k3_max_model_len: auto`` resolves to (written into every node's
argv), and the launch timeouts from the slowest node's measured weight-read throughput (plugin_utils.plan.timeouts;
``VLLM_ENGINE_READY_TIMEOUT_S`` in the environment of every vendor). Results land in ``ctx["capacity"]`` and
``ctx["timeouts"]`` for the cluster summary and the node plans.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import sizing as plan_sizing
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import timeouts as plan_timeouts

ENGINE_READY_ENV = "VLLM_ENGINE_READY_TIMEOUT_S"


def _facts(ctx, recipe, model_facts):
    if not callable(model_facts):
        return None
    s = ctx["settings"]
    variant = recipe["variants"].get(s["variant"]) or recipe["variants"]["default"]
    cache = s["model_cache_dir"] or recipe["defaults"]["model_cache_dir"]
    return model_facts(s["model"] or variant["model"], s["model_revision"], cache)


def _timeouts(ctx, recipe, sizing, facts):
    policy = recipe.get("timeouts")
    if not policy:
        return None
    rates = [n.get("settings", {}).get("weight_read_mib_s") for n in ctx["nodes"]]
    rate = plan_timeouts.slowest(rates)
    weights = sizing.get("weights_bytes")
    shard = (facts or {}).get("largest_shard_bytes")
    if shard is None and weights and sizing.get("shards"):
        shard = weights / float(sizing["shards"])
    out = plan_timeouts.derive(weights, shard, rate * plan_timeouts.MIB if rate else None, policy)
    out["weight_read_mib_s"] = rate
    return out


def apply(ctx, recipe, rendered, model_facts, errors, warnings):
    """``rendered`` ([(node, argv, sources)], head first) with the derived length; fills ctx and ``ctx["env"]``."""
    facts = _facts(ctx, recipe, model_facts)
    sizing = plan_sizing.assess(ctx, recipe, rendered[0][1], facts) if rendered else {}
    errors.extend(sizing.get("errors", []))
    warnings.extend(sizing.get("warnings", []))
    length = sizing.get("max_model_len")
    if isinstance(length, int):
        rendered = [(node, plan_sizing.with_length(args, length, ctx["snapshot"]), sources)
                    for node, args, sources in rendered]
    ctx["capacity"] = sizing.get("capacity")
    ctx["timeouts"] = _timeouts(ctx, recipe, sizing, facts)
    if ctx["timeouts"] and ENGINE_READY_ENV not in ctx.get("extra_env", {}):
        ctx["env"][ENGINE_READY_ENV] = str(ctx["timeouts"]["engine_ready_timeout_s"])
    return rendered
