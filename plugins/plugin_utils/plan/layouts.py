# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every layout the recipe data offers for one cluster's hardware, judged by the plan itself (pure, no I/O).

A layout is "the plan with ``kimi_k3_strategy`` set to it": a strategy over all the nodes, a fleet of identical
replicas behind vllm-router, or a prefill/decode split of the nodes. Each candidate is rendered by
``topology.build_cluster_plan`` on the inventory's own nodes with only the layout variables changed, so a listed
layout is exactly what the plan renders and a refused one carries the plan's own problems. Nothing here repeats
a fit, sizing or combination rule: the numbers are read from the rendered plan's capacity record.

The renderer comes in as the argument ``build`` (``topology.build_cluster_plan``) rather than an import: the plan
calls back into this module for ``auto``, and an import each way would be a cycle in the import graph.

``kimi_k3_strategy: auto`` resolves in one of two ways. When the inventory leaves the whole layout open (every
node auto, no node named into a deployment) and has a router host, ``choose_layout`` lays the nodes out as the
best-ranked row of the whole table: a strategy over all nodes, a fleet of replicas or a prefill/decode split.
Otherwise ``choose_strategy`` picks the best-ranked strategy over each deployment's own nodes (an inventory that
groups its nodes keeps its grouping); its reason names a better-ranked fleet or split the missing router host rules
out.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import render as plan_render
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import sizing
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import variables as plan_variables
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan.variables import PREFIX

AUTO = "auto"
# The layout variables a candidate sets; the inventory's own values of them are dropped first (a size override
# belongs to the strategy it was written for).
LAYOUT_VARS = tuple(PREFIX + k for k in ("strategy", "tensor_parallel_size", "pipeline_parallel_size",
                                         "data_parallel_size", "dp_lb_mode", "deployment", "deployment_kind"))
COLUMNS = (32768, 131072, 262144, 1048576)  # the 32k / 128k / 256k / 1M columns
OBJECTIVES = ("latency", "throughput")
_IMAGES = {"nvidia": "vllm/vllm-openai@sha256:" + "0" * 64, "amd": "vllm/vllm-openai-rocm@sha256:" + "0" * 64,
           "cpu": "registry.example/vllm-cpu@sha256:" + "0" * 64}
_ROUTER = {"host": "layouts-router", "head": False,
           "vars": {"ansible_host": "10.255.0.1", "kimi_k3_api_host": "127.0.0.1",
                    "kimi_k3_router_image": "registry.example/vllm-router@sha256:" + "0" * 64}}


def _problem(where, variable, message, fix):
    return {"host": where, "variable": variable, "message": message, "fix": fix}


# ----------------------------------------------------------------------------- the target


def read_target(value, recipe, snapshots):
    """``(target, None)`` or ``(None, problem)`` for a kimi_k3_target value (None: no target, throughput)."""
    if value is None:
        return {"max_model_len": None, "concurrency": None, "objective": "throughput"}, None
    decl = plan_variables.declared(PREFIX + "target")
    typed, refusal = plan_variables.check_value(decl, value, recipe, snapshots)
    if refusal:
        return None, _problem("vllm_cluster", decl["name"], refusal[0], refusal[1])
    out = {"max_model_len": None, "concurrency": None, "objective": "throughput"}
    out.update((k, v) for k, v in typed.items() if v is not None)
    return out, None


# ----------------------------------------------------------------------------- candidates


def _offered(recipe, accelerator, name):
    """A strategy the recipe offers on this hardware at all (the plan's refusal says so for the others)."""
    spec, hw = recipe["strategies"][name], recipe["hardware"].get(accelerator, {})
    return accelerator not in spec.get("unsupported_hardware", []) and \
        accelerator in spec.get("only_hardware", [accelerator]) and name in hw.get("strategies", [name])


def candidates(recipe, accelerator, nnodes):
    """Every layout to judge: ``{"name", "kind", "groups": [(deployment, kind, strategy, nodes)]}``.

    Strategies over all nodes (every recipe strategy: a refusal is an answer too); fleets of k >= 2 replicas of
    the strategies offered on the hardware, when k divides the nodes; prefill/decode splits of the nodes for
    every prefill strategy of the recipe (the decode instance takes the rest)."""
    out = [{"name": s, "kind": "single", "groups": [(None, None, s, nnodes)]} for s in recipe["strategies"]]
    offered = [s for s in recipe["strategies"] if _offered(recipe, accelerator, s)]
    for k in range(2, nnodes + 1):
        if nnodes % k == 0:
            size = nnodes // k
            out += [{"name": "%d x %s" % (k, s), "kind": "fleet",
                     "groups": [("replica-%d" % (i + 1), "replica", s, size) for i in range(k)]} for s in offered]
    kinds = recipe.get("deployment_kinds", {})
    decode = kinds.get("decode", {}).get("strategies", [None])[0]
    for prefill in kinds.get("prefill", {}).get("strategies", []) if decode else []:
        for p in range(1, nnodes):
            out.append({"name": "PD %s x%d + %s x%d" % (prefill, p, decode, nnodes - p), "kind": "pd",
                        "groups": [("prefill-1", "prefill", prefill, p), ("decode-1", "decode", decode, nnodes - p)]})
    return out


def base_nodes(nodes):
    """The inventory's nodes without their layout: layout variables, deployment groups and head marks go."""
    out = []
    for node in nodes:
        clean = dict((k, v) for k, v in node.items() if k not in ("deployment_groups",))
        clean["vars"] = dict((k, v) for k, v in node["vars"].items() if k not in LAYOUT_VARS)
        out.append(clean)
    return out


def apply(base, candidate, length=None):
    """The nodes of ``base`` laid out as ``candidate``. One group keeps the inventory's head and node ranks; a
    split makes the first node of each group its head (ranks set for the whole cluster would not fit a part)."""
    out, i = [], 0
    whole = len(candidate["groups"]) == 1 and any(n.get("head") for n in base)
    for deployment, kind, strategy, count in candidate["groups"]:
        for j in range(count):
            node = dict(base[i], head=base[i].get("head") if whole else j == 0)
            node["vars"] = dict((k, v) for k, v in base[i]["vars"].items() if whole or k != PREFIX + "node_rank")
            node["vars"][PREFIX + "strategy"] = strategy
            if deployment:
                node["vars"].update({PREFIX + "deployment": deployment, PREFIX + "deployment_kind": kind})
            if length:
                node["vars"][PREFIX + "max_model_len"] = length
            out.append(node)
            i += 1
    return out


# ----------------------------------------------------------------------------- one layout, judged by the plan


def _serving(result):
    """(deployment summary, head plan) of every deployment that holds the sessions (the prefill side does not)."""
    cluster, plans = result["cluster"], result["plans"]
    return [(d, plans[d["head"]]) for d in cluster["deployments"] if d["kind"] != "prefill"]


def _flag(plan, flag, snapshots):
    values = sizing.vllm_flags.flag_value(plan["vllm_args"], flag, snapshots[plan["vllm_version"]])
    return values[-1] if values else None


def _held(cap, length):
    """(deployment concurrency, admitted by --max-num-seqs) at ``length`` from the plan's capacity record."""
    rows = [r for r in cap["table"] if r["max_model_len"] == length]
    at = cap.get("at_max_model_len")
    row = at if at and at["max_model_len"] == length else (rows[0] if rows else None)
    if row is None:
        return None, None
    admitted = row["deployment_concurrency"]
    if cap.get("max_num_seqs"):
        admitted = min(admitted, cap["max_num_seqs"] * cap["engines"])
    return row["deployment_concurrency"], admitted


def _sizes(plan, dep):
    """The layout's sizes as its head plan publishes them (``parallel``), with the deployment's node count."""
    p = plan["parallel"]
    return {"tp": p["tp"], "pp": p["pp"], "dp": p["dp"], "dcp": p["dcp"], "ep": p["ep"], "nodes": dep["nnodes"]}


def _deployment_row(dep, head, snapshots, length):
    """What one serving deployment holds: sizes, per-GPU figures, concurrency at ``length`` and the columns."""
    cap = dep.get("capacity")
    row = {"deployment": dep["name"], "kind": dep["kind"], "strategy": dep["strategy"],
           "sizes": _sizes(head, dep), "all2all_backend": _flag(head, "--all2all-backend", snapshots),
           "moe_backend": _flag(head, "--moe-backend", snapshots) or "auto (vLLM picks)", "capacity": None}
    if cap:
        length = length or cap["max_model_len"]
        held, admitted = _held(cap, length)
        row["capacity"] = {
            "weights_per_gpu_gib": cap["per_gpu"]["weights_gib"], "kv_budget_gib": cap["per_gpu"]["kv_budget_gib"],
            "kv_tokens_per_engine": cap["kv_tokens"], "engines": cap["engines"], "max_num_seqs": cap["max_num_seqs"],
            "max_model_len": length, "concurrency": held, "admitted": admitted,
            "columns": dict((n, _held(cap, n)[1]) for n in COLUMNS)}
    return row


def _sum(values):
    values = [v for v in values if v is not None]
    return round(sum(values), 2) if values else None


def _ok_row(candidate, result, snapshots, length, target):
    gpn = result["cluster"]["gpus_per_node"]
    parts = [_deployment_row(d, h, snapshots, length) for d, h in _serving(result)]
    caps = [p["capacity"] for p in parts if p["capacity"]]
    held = _sum(c["admitted"] for c in caps) if len(caps) == len(parts) else None
    row = {"layout": candidate["name"], "kind": candidate["kind"], "status": "ok", "groups": candidate["groups"],
           "gpus": sum(d["nnodes"] for d in result["cluster"]["deployments"]) * gpn, "deployments": parts,
           "concurrency_at_target": _sum(c["concurrency"] for c in caps) if caps else None,
           "admitted_at_target": held, "max_model_len": caps[0]["max_model_len"] if caps else length,
           "columns": dict((n, _sum(c["columns"][n] for c in caps)) for n in COLUMNS) if caps else {},
           "warnings": [plan_render.format_problem(w) for w in result["warnings"]]}
    want = (target or {}).get("concurrency")
    row["short_by"] = round(max(0.0, want - held), 2) if want and held is not None else None
    return row


def judge(candidate, base, routers, recipe, snapshots, target=None, model_facts=None, build=None):
    """One candidate rendered by the plan (``build``: topology.build_cluster_plan): its row (status ok with figures,
    or refused with the plan's problems)."""
    if build is None:
        raise TypeError("judge needs build, the plan renderer (topology.build_cluster_plan)")
    length = (target or {}).get("max_model_len")
    nodes = apply(base, candidate, length)
    several = candidate["kind"] != "single"
    # Without a router host in the inventory a fleet or split is judged with a placeholder one; the row says so.
    result = build(nodes, recipe, snapshots, (routers or [_router(base)]) if several else [], model_facts=model_facts)
    if result["ok"]:
        row = _ok_row(candidate, result, snapshots, length, target)
        if several and not routers:
            row["needs"] = ("a vllm_router host (the inventory has none: judged with a placeholder bound to 127.0.0.1 "
                            "behind a proxy, as in inventories/gb300-pd)")
        return row
    return {"layout": candidate["name"], "kind": candidate["kind"], "status": "refused", "groups": candidate["groups"],
            "refusal": [plan_render.format_problem(e) for e in result["errors"]], "problems": result["errors"],
            "gpus": sum(g[3] for g in candidate["groups"]) * _gpus_per_node(base, recipe)}


def _router(base):
    """The placeholder router: the cluster-wide variables a router host shares with the nodes (API key, CA) as
    the cluster's group_vars would give it; bound to loopback, because a PD router checks no client key."""
    shared = [d["name"] for d in plan_variables.VARIABLES if d["on_router"] and d["scope"] == plan_variables.CLUSTER]
    head = next((n for n in base if n.get("head")), base[0])
    v = dict(_ROUTER["vars"], **dict((k, head["vars"][k]) for k in shared if k in head["vars"]))
    return dict(_ROUTER, vars=v)


def _gpus_per_node(base, recipe):
    v = base[0]["vars"] if base else {}
    hw = recipe["hardware"].get(str(v.get(PREFIX + "accelerator", "")).lower(), {})
    try:
        return int(v.get(PREFIX + "gpus_per_node", hw.get("gpus_per_node", 0)))
    except (TypeError, ValueError):
        return 0


# ----------------------------------------------------------------------------- ranking


def _figure(row, recipe, accelerator, metric):
    """A published figure of the recipe data for this layout on this hardware and node count, or None."""
    for fig in recipe.get("layouts", {}).get("figures", []) or []:
        if fig.get("hardware") == accelerator and fig.get("layout") == row["layout"] and \
                fig.get("metric") == metric and fig.get("gpus") in (None, row["gpus"]):
            return fig
    return None


def _preference(recipe, row):
    order = list(recipe.get("layouts", {}).get("preference", []))
    strategy = row["deployments"][-1]["strategy"] if row.get("deployments") else None
    return order.index(strategy) if strategy in order else len(order)


def _key(row, recipe, accelerator, objective):
    """Sort key: rendered first, then holding the target, then published figures, then capacity / preference."""
    if row["status"] != "ok":
        return (1,)
    metric = "latency" if objective == "latency" else "throughput"
    fig = _figure(row, recipe, accelerator, metric)
    figure = (0, fig["value"] if metric == "latency" else -fig["value"]) if fig else (1, 0)
    held = -(row.get("admitted_at_target") or 0)
    kind = ("single", "fleet", "pd").index(row["kind"])
    order = (_preference(recipe, row), kind, held) if objective == "latency" else (held, _preference(recipe, row), kind)
    return (0, 1 if row.get("short_by") else 0) + figure + order


def _reason(row, recipe, accelerator, objective, target):
    if row["status"] != "ok":
        return "refused by the plan: " + row["problems"][0]["message"]
    metric = "latency" if objective == "latency" else "throughput"
    fig = _figure(row, recipe, accelerator, metric)
    held = "holds %s sequences of %s tokens" % (_num(row.get("admitted_at_target")), _num(row["max_model_len"]))
    words = []
    if row.get("short_by"):
        words.append("short of the target %d by %s" % (target["concurrency"], _num(row["short_by"])))
    if fig:
        words.append("published %s %s %s (%s)" % (metric, fig["value"], fig.get("unit", ""), fig.get("source", "?")))
    else:
        words.append("no published %s figure for %s in the recipe data (layouts.figures)" % (metric, accelerator))
    place = _preference(recipe, row) + 1
    pref = "%s is #%d in the recipe's strategy order" % (row["deployments"][-1]["strategy"], place)
    if objective == "latency":
        words.append("ranked by the recipe's strategy order, then capacity: %s; %s" % (pref, held))
    else:
        words.append("ranked by capacity, then the recipe's strategy order: %s; %s" % (held, pref))
    if row.get("needs"):
        words.append("needs " + row["needs"])
    return "; ".join(words)


def _num(value):
    if value is None:
        return "?"
    return "{:,}".format(value) if isinstance(value, int) else "{:,.2f}".format(value)


def rank(rows, recipe, accelerator, target):
    """``rows`` best first, each with its ``rank`` (1 = best; refused rows get none) and ``reason``."""
    objective = target["objective"]
    ordered = sorted(rows, key=lambda r: _key(r, recipe, accelerator, objective))
    for i, row in enumerate(ordered):
        row["rank"] = i + 1 if row["status"] == "ok" else None
        row["reason"] = _reason(row, recipe, accelerator, objective, target)
    return ordered


# ----------------------------------------------------------------------------- the whole table


def _hardware_of(base, recipe):
    v = base[0]["vars"]
    return {"accelerator": str(v.get(PREFIX + "accelerator")), "nodes": len(base),
            "gpus_per_node": _gpus_per_node(base, recipe), "interconnect": v.get(PREFIX + "interconnect")}


def enumerate_layouts(nodes, recipe, snapshots, routers=None, target=None, model_facts=None, only_single=False,
                      build=None):
    """``{"ok", "errors", "hardware", "target", "layouts", "best"}`` for the inventory's nodes, each candidate
    rendered by ``build`` (topology.build_cluster_plan).

    ``target``: the kimi_k3_target value (None: the plan's own length, objective throughput). ``only_single``:
    strategies over all the nodes only (what ``auto`` may choose)."""
    goal, problem = read_target(target, recipe, snapshots)
    if problem:
        return {"ok": False, "errors": [problem], "layouts": [], "best": None}
    if not nodes:
        return {"ok": False, "errors": [_problem("vllm_cluster", "vllm_cluster", "the group has no hosts.",
                                                 "list the nodes under vllm_head and vllm_workers.")],
                "layouts": [], "best": None}
    base = base_nodes(nodes)
    hardware = _hardware_of(base, recipe)
    found = [c for c in candidates(recipe, hardware["accelerator"].lower(), len(base))
             if not only_single or c["kind"] == "single"]
    rows = [judge(c, base, routers, recipe, snapshots, goal, model_facts, build) for c in found]
    rows = rank(rows, recipe, hardware["accelerator"].lower(), goal)
    best = next((r for r in rows if r["status"] == "ok"), None)
    return {"ok": True, "errors": [], "hardware": hardware, "target": goal, "layouts": rows, "best": best}


def hardware_nodes(hardware, recipe):
    """``(nodes, None)``: a synthetic inventory for ``hardware`` ({accelerator, nodes, gpus_per_node?,
    interconnect?, vllm_version?, variant?}); ``(None, problem)`` when the hardware cannot be read."""
    hardware = hardware if isinstance(hardware, dict) else {}
    acc = str(hardware.get("accelerator", "")).lower()
    spec = recipe["hardware"].get(acc)
    count = hardware.get("nodes")
    if spec is None:
        return None, _problem("hardware", PREFIX + "accelerator", "%r is not a recipe hardware key."
                              % hardware.get("accelerator"), "use one of %s." % ", ".join(recipe["hardware"]))
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 1152:
        return None, _problem("hardware", "nodes", "%r is not a node count (1-1152)." % (count,),
                              "give the number of nodes as an integer.")
    interconnect = hardware.get("interconnect") or ("tcp" if spec["vendor"] == "cpu" else
                                                    "nvlink" if spec.get("gb_tray") else "rdma")
    gpus = hardware.get("gpus_per_node", spec["gpus_per_node"])
    common = {PREFIX + "accelerator": acc, PREFIX + "gpus_per_node": gpus,
              PREFIX + "interconnect": interconnect, PREFIX + "image": _IMAGES.get(spec["vendor"], _IMAGES["nvidia"]),
              PREFIX + "socket_ifname": "eth0", PREFIX + "allow_unpinned_remote_code": True,
              PREFIX + "allow_unauthenticated_api": True}
    for key in ("vllm_version", "variant"):
        if hardware.get(key) is not None:
            common[PREFIX + key] = hardware[key]
    if spec.get("min_vllm_version") and PREFIX + "vllm_version" not in common:
        common[PREFIX + "vllm_version"] = max(recipe["defaults"]["vllm_version"], spec["min_vllm_version"])
    return [{"host": "node-%02d" % i, "head": i == 0,
             "vars": dict(common, ansible_host="10.0.%d.%d" % (i // 250, i % 250 + 1))} for i in range(count)], None


def enumerate_for_hardware(hardware, recipe, snapshots, target=None, build=None):
    """enumerate_layouts over a synthetic inventory of ``hardware`` (see hardware_nodes)."""
    nodes, problem = hardware_nodes(hardware, recipe)
    if problem:
        return {"ok": False, "errors": [problem], "layouts": [], "best": None}
    return enumerate_layouts(nodes, recipe, snapshots, target=target, build=build)


# ----------------------------------------------------------------------------- kimi_k3_strategy: auto


def _record(table, best, deployment):
    """The plan's record of an auto choice: what was chosen, why, and every candidate with its rank and reason."""
    strategy = best["deployments"][-1]["strategy"] if best.get("deployments") else best["layout"]
    return {"deployment": deployment, "layout": best["layout"], "kind": best["kind"], "strategy": strategy,
            "objective": table["target"]["objective"], "reason": best["reason"], "target": table["target"],
            "candidates": [{"layout": r["layout"], "rank": r["rank"], "reason": r["reason"]} for r in table["layouts"]]}


def _none_renders(where, table, count):
    why = "; ".join("%s: %s" % (r["layout"], r["problems"][0]["message"]) for r in table["layouts"])
    return _problem(where, PREFIX + "strategy", "auto: no strategy renders on these %d node(s): %s" % (count, why),
                    "add nodes, or name a strategy and follow its refusal.")


def _outranked_by(part, recipe, snapshots, model_facts, build, best):
    """The reason's note on the best layout of all when it is a fleet or split, which needs a router host."""
    table = enumerate_layouts(part, recipe, snapshots, target=part[0]["vars"].get(PREFIX + "target"),
                              model_facts=model_facts, build=build)
    top = table.get("best")
    if not top or top["kind"] == "single":  # the best of all is a strategy over all nodes: the one chosen
        return ""
    return ("; the table ranks %s higher (holds %s sequences of %s tokens), which auto lays out when the inventory "
            "has a vllm_router host and names no deployments" % (
                top["layout"], _num(top.get("admitted_at_target")), _num(top["max_model_len"])))


def choose_strategy(part, recipe, snapshots, model_facts=None, build=None):
    """``(strategy, choice, None)`` for a deployment whose kimi_k3_strategy is auto, or ``(None, None, problem)``.

    The candidates are the recipe's strategies over the deployment's own nodes, each rendered by the plan; the
    best-ranked one is chosen (kimi_k3_target: objective and length; none: capacity at the plan's length)."""
    head = next((n for n in part if n.get("head")), part[0])
    v, where = head["vars"], head["host"]
    if str(v.get(PREFIX + "deployment_kind")) in ("prefill", "decode"):
        return None, None, _problem(where, PREFIX + "strategy", "auto chooses the strategy of a single or replica "
                                    "deployment; a %s deployment takes the recipe's." % v[PREFIX + "deployment_kind"],
                                    "name it: %s." % " / ".join(recipe["deployment_kinds"][
                                        v[PREFIX + "deployment_kind"]].get("strategies", [])))
    table = enumerate_layouts(part, recipe, snapshots, target=v.get(PREFIX + "target"), model_facts=model_facts,
                              only_single=True, build=build)
    if not table["ok"]:
        return None, None, table["errors"][0]
    best = table["best"]
    if best is None:
        return None, None, _none_renders(where, table, len(part))
    choice = _record(table, best, None)
    if open_layout(part):
        choice["reason"] += _outranked_by(part, recipe, snapshots, model_facts, build, best)
    return best["layout"], choice, None


def open_layout(nodes):
    """True when the inventory leaves the whole layout to auto: every node's strategy is auto and no node is named
    into a deployment (by kimi_k3_deployment, kimi_k3_deployment_kind or a deployment group)."""
    return bool(nodes) and all(
        n["vars"].get(PREFIX + "strategy") == AUTO and not n.get("deployment_groups") and
        n["vars"].get(PREFIX + "deployment") is None and n["vars"].get(PREFIX + "deployment_kind") is None
        for n in nodes)


def choose_layout(nodes, routers, recipe, snapshots, model_facts=None, build=None):
    """``(nodes, choice, None)``: the nodes laid out as the best-ranked layout of the whole table when the layout is
    open to auto (open_layout) and the inventory has a router host (a fleet or split needs one); the nodes as they
    are and no choice otherwise (auto then chooses each deployment's strategy); ``(None, None, problem)`` for a bad
    target.

    A strategy over all nodes keeps the nodes' own variables; a fleet or split is the row's own layout (apply over
    base_nodes): deployments replica-N / prefill-1 + decode-1, the first node of each its head."""
    if not routers or not open_layout(nodes):
        return nodes, None, None
    head = next((n for n in nodes if n.get("head")), nodes[0])
    table = enumerate_layouts(nodes, recipe, snapshots, routers=routers, target=head["vars"].get(PREFIX + "target"),
                              model_facts=model_facts, build=build)
    if not table["ok"]:
        return None, None, table["errors"][0]
    best = table["best"]
    if best is None:
        return None, None, _none_renders(head["host"], table, len(nodes))
    choice = _record(table, best, recipe["defaults"].get("deployment", "main") if best["kind"] == "single" else None)
    if best["kind"] == "single":
        return [dict(n, vars=dict(n["vars"], **{PREFIX + "strategy": best["layout"]})) for n in nodes], choice, None
    laid = apply(base_nodes(nodes), {"name": best["layout"], "kind": best["kind"], "groups": best["groups"]})
    return laid, choice, None


# ----------------------------------------------------------------------------- the report


def _cell(value):
    return "-" if value is None else _num(value)


def _sizes_text(row):
    parts = []
    for d in row["deployments"]:
        s = d["sizes"]
        dcp = " DCP%d" % s["dcp"] if s["dcp"] > 1 else ""
        text = "TP%d PP%d DP%d EP%d%s x%d nodes" % (s["tp"], s["pp"], s["dp"], s["ep"], dcp, s["nodes"])
        parts.append(("%s: " % d["kind"] if d["kind"] not in ("single",) else "") + text)
    return "; ".join(sorted(set(parts), key=parts.index))


def row_cells(row):
    """One row of the table as text cells (the columns of ``HEADER``)."""
    if row["status"] != "ok":
        return ["-", row["layout"], "refused", str(row["gpus"])] + ["-"] * 11 + [" | ".join(row["refusal"])]
    d = row["deployments"][-1]  # the deployment that holds the sessions (decode of a PD split)
    c = d["capacity"] or {}
    cols = [_cell(row["columns"].get(n)) for n in COLUMNS]
    short = "short by %s" % _num(row["short_by"]) if row.get("short_by") else "-"
    return [str(row["rank"]), row["layout"], _sizes_text(row), str(row["gpus"]), _cell(c.get("weights_per_gpu_gib")),
            _cell(c.get("kv_budget_gib")), _cell(c.get("kv_tokens_per_engine")),
            "%s @ %s" % (_cell(row["admitted_at_target"]), _cell(row["max_model_len"]))] + cols + \
        [d["all2all_backend"] or "-", d["moe_backend"], short, row["reason"]]


HEADER = ("rank", "layout", "sizes", "GPUs", "weights/GPU GiB", "KV budget/GPU GiB", "KV tokens/engine",
          "sessions @ target len", "32k", "128k", "256k", "1M", "all2all", "MoE backend", "target", "why")


def markdown(report):
    """The table as Markdown (layouts.md): hardware, target, every layout best first, then the refused ones."""
    hw, goal = report["hardware"], report["target"]
    length = _cell(goal["max_model_len"]) if goal["max_model_len"] else "the plan's"
    lines = ["# Kimi-K3 layouts: %d x %s (%d GPUs per node, %s)" % (
        hw["nodes"], hw["accelerator"], hw["gpus_per_node"], hw["interconnect"] or "no interconnect"), "",
        "Target: max_model_len %s, concurrency %s, objective %s. Every row is the plan rendered with its layout "
        "(refusals are the plan's own); sessions (at the target length and in the 32k .. 1M columns) are what the "
        "serving deployments admit: the predicted KV capacity, capped by --max-num-seqs x engines."
        % (length, _cell(goal["concurrency"]), goal["objective"]), ""]
    best = report.get("best")
    lines += ["Best: **%s** - %s" % (best["layout"], best["reason"]) if best else "No layout renders.", ""]
    lines += ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    for row in report["layouts"]:
        lines.append("| " + " | ".join(c.replace("|", "/") for c in row_cells(row)) + " |")
    return "\n".join(lines) + "\n"


def _keyed(columns):
    return dict((str(n), v) for n, v in columns.items())


def plain(report):
    """The report without the plan's problem records (layouts.json): JSON-ready."""
    out = dict(report)
    out["layouts"] = [dict((k, v) for k, v in r.items() if k != "problems") for r in report["layouts"]]
    out["best"] = out["layouts"][0] if report.get("best") else None
    # JSON keys are strings: the length columns are keyed by their token count as text
    for row in out["layouts"]:
        if "columns" in row:
            row["columns"] = _keyed(row["columns"])
        row["deployments"] = [dict(d, capacity=dict(d["capacity"], columns=_keyed(d["capacity"]["columns"])))
                              if d.get("capacity") else d for d in row.get("deployments", [])]
    return out
