# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Flag combinations vLLM refuses or silently ignores, judged on one node's final argv (pure functions).

The rules are data (recipe ``combination_rules``): a rule fires when every condition of its ``when`` list holds
for the argv (extra args included: they are part of it), the deployment's sizes, interconnect, kind and the
node's container. The condition language is documented next to the rules in data/recipes/kimi_k3.yml.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import vllm_flags
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan.variables import PREFIX


def flag_map(args, snapshot):
    """{canonical flag: values of its last occurrence} of an argv, read once for every rule."""
    out = {}
    for name, values in vllm_flags.split_units(args)[1]:
        out[vllm_flags.canonical_flag(name, snapshot) if snapshot else name] = values
    return out


def _values(flags, flag, snapshot):
    return flags.get(vllm_flags.canonical_flag(flag, snapshot) if snapshot else flag)


def eplb_communicator(args):
    """The EPLB communicator an argv asks for (--eplb-config JSON or --eplb-config.communicator), or None."""
    found = None
    for i, token in enumerate(args):
        name, _sep, inline = token.partition("=")
        value = inline if _sep else (args[i + 1] if i + 1 < len(args) else "")
        if name == "--eplb-config.communicator":
            found = value
        elif name == "--eplb-config":
            try:
                parsed = json.loads(value)
            except ValueError:
                continue
            if isinstance(parsed, dict) and isinstance(parsed.get("communicator"), str):
                found = parsed["communicator"]
    return found


def ucx_missing(env, container, recipe, _hw=None):
    """UCX transports named in UCX_TLS whose device the container lacks (the recipe's ucx_transport_devices)."""
    devices = [d.split(":", 1)[0] for d in container.get("devices", [])]
    missing = []
    for transport in [t.strip() for t in str(env.get("UCX_TLS", "")).split(",") if t.strip()]:
        need = recipe.get("ucx_transport_devices", {}).get(transport)
        if need and need["device"] not in devices:
            missing.append("%s (%s)" % (transport, need["device"]))
    return missing


def _holds(cond, view):
    """Whether one condition of a rule holds for ``view`` (the node's argv and deployment facts)."""
    args, snap = view["flags"], view["snapshot"]
    if "flag" in cond:
        values = _values(args, cond["flag"], snap)
        value = values[-1] if values else None
        return values is not None and ("in" not in cond or value in cond["in"]) and \
            ("not_in" not in cond or value not in cond["not_in"])
    if "absent" in cond:
        values = _values(args, cond["absent"], snap)
        return values is None or ("in" in cond and (values[-1] if values else None) not in cond["in"])
    if "size" in cond:
        size = view["parallel"][cond["size"]]
        return size <= cond.get("max", size) and size >= cond.get("min", size)
    checks = {"interconnect": lambda: view["interconnect"] == cond["interconnect"],
              "min_nodes": lambda: view["nnodes"] >= cond["min_nodes"],
              "kind": lambda: view["kind"] in cond["kind"],
              "lb_mode": lambda: view["lb_mode"] in cond["lb_mode"],
              "dcp_not_dividing_tp": lambda: view["parallel"]["tp"] % view["parallel"]["dcp"] != 0,
              "expert_parallel": lambda: view["expert_parallel"] == cond["expert_parallel"],
              "eplb_communicator": lambda: eplb_communicator(view["args"]) in cond["eplb_communicator"],
              "ucx_without_device": lambda: bool(view["ucx_missing"])}
    return all(check() for key, check in checks.items() if key in cond)


def _shown_value(rule, view):
    if any("ucx_without_device" in c for c in rule["when"]):
        return ", ".join(view["ucx_missing"])
    first = rule["when"][0].get("flag")
    values = _values(view["flags"], first, view["snapshot"]) if first else None
    return values[-1] if values else ""


def _variable(rule, sources, snapshot):
    """The inventory variable behind a rule's first flag (the plan's sources map), else the strategy."""
    if any("ucx_without_device" in c for c in rule["when"]):
        return PREFIX + "extra_env"
    flag = rule["when"][0].get("flag")
    canonical = vllm_flags.canonical_flag(flag, snapshot) if flag and snapshot else flag
    return sources.get(canonical) or sources.get(flag) or PREFIX + "strategy"


def check(node, args, sources, ctx, recipe, container):
    """Problems of one node's final argv under the recipe's combination rules."""
    view = {"args": args, "flags": flag_map(args, ctx["snapshot"]), "snapshot": ctx["snapshot"], "interconnect": ctx["interconnect"], "nnodes": ctx["nnodes"],
            "kind": ctx["kind"], "lb_mode": ctx["lb_mode"], "parallel": ctx["parallel"], "expert_parallel": ctx["expert_parallel"],
            "ucx_missing": ucx_missing(ctx.get("env") or {}, container, recipe, ctx["hw"])}
    problems = []
    for rule in recipe.get("combination_rules", []):
        if all(_holds(cond, view) for cond in rule["when"]):
            value = str(_shown_value(rule, view))
            problems.append({"host": node["host"], "variable": _variable(rule, sources, ctx["snapshot"]),
                             "message": "%s; source: %s." % (rule["message"].replace("{value}", value), rule["source"]),
                             "fix": rule["fix"].replace("{value}", value) + "."})
    return problems


def container_devices(ctx, recipe):
    """Devices a prefill/decode role's UCX transports need (recipe ucx_transport_devices, provided ones)."""
    if not ctx["role_spec"].get("pd"):
        return []
    out = []
    for transport in [t.strip() for t in str((ctx.get("env") or {}).get("UCX_TLS", "")).split(",") if t.strip()]:
        need = recipe.get("ucx_transport_devices", {}).get(transport)
        if not need or not need.get("provided") or (need.get("gb_tray_only") and not ctx["hw"].get("gb_tray")):
            continue
        entry = "%s:%s:rwm" % (need["device"], need["device"])
        if entry not in out:
            out.append(entry)
    return out
