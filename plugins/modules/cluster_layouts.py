#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: cluster_layouts
short_description: List every Kimi-K3 layout the inventory's hardware allows, each rendered by the plan, ranked
version_added: 0.1.0
description:
  - Runs on the controller (action plugin) and contacts no host.
  - Reads the nodes of O(group) exactly as M(gpufleet.kimi_k3.cluster_plan) does and renders the plan once per
    layout the recipe data offers for their hardware and node count - every strategy over all the nodes, fleets of
    identical replicas behind vllm-router, prefill/decode splits of the nodes - with only the layout variables
    (C(kimi_k3_strategy), C(kimi_k3_deployment), C(kimi_k3_deployment_kind), the parallel sizes) changed, and
    C(kimi_k3_max_model_len) set to the target's length when the target has one.
  - A layout that renders has the plan's own figures (weights and KV budget per GPU, KV tokens, concurrency at the
    target's length and at 32k / 128k / 256k / 1M, the all2all kernel and MoE backend it renders); a refused one has
    the plan's own problems.
  - Layouts are ranked for the target (C(kimi_k3_target)) from published figures of the recipe data
    (C(layouts.figures)) when it has them, else by capacity and the recipe's strategy order, with the reason in
    each row. C(kimi_k3_strategy=auto) renders the best-ranked strategy (see C(docs/variables.md)).
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.kimi_k3.attributes
  - gpufleet.kimi_k3.attributes.action
options:
  group:
    description: Inventory group holding every node.
    type: str
    default: vllm_cluster
  head_group:
    description: Inventory group holding the head (rank 0) node of a layout over all the nodes.
    type: str
    default: vllm_head
  router_group:
    description:
      - Inventory group holding the vllm-router host; replica and prefill/decode layouts are rendered with it (with a
        placeholder router when the inventory has none - the layout then needs one added).
    type: str
    default: vllm_router
  target:
    description:
      - The target, as C(kimi_k3_target) - C({max_model_len, concurrency, objective}) with objective C(latency) or
        C(throughput); omitted, the head's C(kimi_k3_target).
    type: raw
  recipe:
    description: Recipe document under C(data/recipes/).
    type: str
    default: kimi_k3
  dest:
    description: Controller directory that receives C(layouts.json) and C(layouts.md) (not written in check mode).
    type: path
author:
  - gpufleet maintainers (@gpufleet)
attributes:
  check_mode:
    details: Lists the layouts; no file is written under O(dest) in check mode.
"""

EXAMPLES = r"""
- name: Every layout of the inventory, for 64 sessions of 128k tokens
  gpufleet.kimi_k3.cluster_layouts:
    target: {max_model_len: 131072, concurrency: 64, objective: throughput}
    dest: /tmp/layouts
"""

RETURN = r"""
best:
  description: The best-ranked layout that renders (null when none does).
  returned: success
  type: str
  sample: multi_node_dep
reason:
  description: Why it ranks first.
  returned: success
  type: str
layouts:
  description: How many layouts were judged.
  returned: success
  type: int
summary:
  description: The first lines of C(layouts.md).
  returned: success
  type: list
  elements: str
written:
  description: The files under O(dest) that changed (or would).
  returned: when O(dest) is set
  type: list
  elements: str
errors:
  description: Why the layouts could not be listed (a malformed target, no hosts).
  returned: failure
  type: list
  elements: str
"""
