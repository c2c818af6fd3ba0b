# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The order of a deployment's nodes: the head first, then by kimi_k3_node_rank or in inventory order (pure).

``node_order`` returns the order and the rank mistake that made it fall back to the default order: the plan's
resolution (plugin_utils.plan.resolve) uses the order, its checks (plugin_utils.plan.checks) report the mistake.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan.variables import PREFIX, problem


def heads_of(nodes):
    return [n for n in nodes if n.get("head")]


def _default_order(nodes, heads):
    head = heads[0] if heads else None
    rest = [n for n in nodes if n is not head]
    return [dict(n, rank=i) for i, n in enumerate(([head] if head else []) + rest)]


def _explicit_order(nodes, heads):
    """Nodes by kimi_k3_node_rank and None, or None and the rank mistake (reported once; the nodes then keep the
    default order, so no GPU-count or node-count problem follows from it)."""
    by_rank = {}
    for node in nodes:
        rank = node["settings"]["node_rank"]
        if rank in by_rank:
            return None, problem(node["host"], PREFIX + "node_rank",
                                 "rank %d is also given to %s." % (rank, by_rank[rank]["host"]),
                                 "give every node a distinct rank 0..%d." % (len(nodes) - 1))
        by_rank[rank] = node
    ordered = sorted((dict(n, rank=n["settings"]["node_rank"]) for n in nodes), key=lambda n: n["rank"])
    ranks = [n["rank"] for n in ordered]
    if ranks != list(range(len(ranks))):
        return None, problem(", ".join(n["host"] for n in ordered), PREFIX + "node_rank",
                             "ranks %s are not 0..%d." % (ranks, len(nodes) - 1),
                             "number the nodes 0..N-1 without gaps.")
    if heads and ordered[0]["host"] != heads[0]["host"]:
        return None, problem(heads[0]["host"], PREFIX + "node_rank",
                             "the head (vllm_head) must be rank 0, but rank 0 is %s." % ordered[0]["host"],
                             "give the vllm_head host kimi_k3_node_rank: 0.")
    return ordered, None


def node_order(nodes, invalid=()):
    """``(nodes sorted by rank with "rank" set, the rank mistake or None)``; the head is rank 0."""
    heads = heads_of(nodes)
    if "node_rank" in invalid:
        return _default_order(nodes, heads), None
    explicit = [n for n in nodes if n["settings"]["node_rank"] is not None]
    mistake = None
    if explicit and len(explicit) != len(nodes):
        missing = [n["host"] for n in nodes if n not in explicit]
        mistake = problem(", ".join(missing), PREFIX + "node_rank",
                          "is set on some nodes but not on %s." % ", ".join(missing),
                          "set kimi_k3_node_rank on every node or on none (then the head is 0 and workers "
                          "follow in inventory order).")
    if explicit and len(explicit) == len(nodes):
        ordered, mistake = _explicit_order(nodes, heads)
        if ordered:
            return ordered, None
    return _default_order(nodes, heads), mistake
