# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the plan derives from a deployment's rendered argv before its node plans are written (pure functions).

``apply`` runs between rendering every node's argv and writing the plans: the weights fit and KV capacity
(plugin_utils.plan.sizing), the length ``kimi_k3_max_model_len: auto`` resolves to (written into every node's
argv), and the launch timeouts from the slowest node's measured weight-read throughput (plugin_utils.plan.timeouts;
``VLLM_ENGINE_READY_TIMEOUT_S`` in the environment of every vendor). ``apply`` returns them (``capacity``,
``timeouts``, ``env``) for the cluster summary and the node plans.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import sizing as plan_sizing
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import timeouts as plan_timeouts

ENGINE_READY_ENV = "VLLM_ENGINE_READY_TIMEOUT_S"

# Where an operator raises each timeout past the recipe's ceiling: the container environment for the engine's own
# limit, the launch role's variables for its readiness wait and its stall window.
RAISE_WITH = {
    "engine_ready_timeout_s": ("kimi_k3_extra_env", "the engine's start-up limit (%s)" % ENGINE_READY_ENV,
                               "kimi_k3_extra_env: {%s: \"%%d\"}" % ENGINE_READY_ENV),
    "launch_ready_timeout_s": ("launch_ready_timeout_s", "the launch role's readiness wait",
                               "launch_ready_timeout_s: %d"),
    "stall_timeout_s": ("launch_stall_timeout_s", "the launch role's stall window", "launch_stall_timeout_s: %d"),
}


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
    short = plan_timeouts.over_ceiling(weights, shard, rate * plan_timeouts.MIB if rate else None, policy)
    return out, short


def _seconds(value):
    try:
        return int(value) if value not in (None, "") and int(value) > 0 else None
    except (TypeError, ValueError):
        return None


def _operator_value(ctx, key):
    """The value the operator already set for a timeout, the lowest over the nodes (None: not set, 0 = the plan's,
    or not a number: the role's own argument check names that)."""
    if key == "engine_ready_timeout_s":
        values = [ctx.get("extra_env", {}).get(ENGINE_READY_ENV)]
    else:
        values = [n.get("vars", {}).get(RAISE_WITH[key][0]) for n in ctx["nodes"]]
    found = [v for v in (_seconds(v) for v in values) if v is not None]
    return min(found) if found else None


def short_timeout_problems(ctx, timeouts, short):
    """A warning per timeout the recipe's ceiling cut short and the operator did not raise far enough."""
    out = []
    for item in short:
        variable, what, setting = RAISE_WITH[item["timeout"]]
        operator = _operator_value(ctx, item["timeout"])
        if operator is not None and operator >= item["derived_s"]:
            continue
        out.append({"host": ctx["where"], "variable": variable, "message": (
            "deployment %s: %s is derived as %d s (%s) but its ceiling is %d s%s; the limit in force is %d s, so "
            "a load that takes as long as derived is cut off before the engine is ready." % (
                ctx.get("deployment", "main"), what, item["derived_s"], timeouts["basis"], item["ceiling_s"],
                "" if operator is None else " and %s is %d s" % (variable, operator),
                operator or timeouts[item["timeout"]])),
            "fix": "set %s (or put the model cache on faster storage and measure again)." % (
                setting % item["derived_s"])})
    return out


def apply(ctx, recipe, rendered, model_facts, errors, warnings):
    """``(rendered, derived)``: ``rendered`` ([(node, argv, sources)], head first) with the derived length, and
    ``{"capacity", "timeouts", "env"}``: the deployment's environment ``ctx["env"]`` with the engine's timeout."""
    facts = _facts(ctx, recipe, model_facts)
    sizing = plan_sizing.assess(ctx, recipe, rendered[0][1], facts) if rendered else {}
    errors.extend(sizing.get("errors", []))
    warnings.extend(sizing.get("warnings", []))
    length = sizing.get("max_model_len")
    if isinstance(length, int):
        rendered = [(node, plan_sizing.with_length(args, length, ctx["snapshot"]), sources)
                    for node, args, sources in rendered]
    timeouts, short = _timeouts(ctx, recipe, sizing, facts) or (None, [])
    problems = short_timeout_problems(ctx, timeouts, short)
    (errors if ctx["settings"].get("strict") else warnings).extend(problems)
    env = dict(ctx["env"])
    if timeouts and ENGINE_READY_ENV not in ctx.get("extra_env", {}):
        env[ENGINE_READY_ENV] = str(timeouts["engine_ready_timeout_s"])
    return rendered, {"capacity": sizing.get("capacity"), "timeouts": timeouts, "env": env}
