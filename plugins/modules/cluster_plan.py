#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: cluster_plan
short_description: Validate a Kimi-K3 cluster inventory and render every node's vLLM launch plan
version_added: 0.1.0
description:
  - Runs on the controller (action plugin) and contacts no host.
  - Reads the C(kimi_k3_*) variables of every host in O(group) as the inventory resolves them, applies the
    Kimi-K3 recipe layers (base, variant, strategy, strategy overrides, hardware overrides, features,
    interconnect) and returns one plan per node (image by digest, environment, container parameters,
    C(vllm serve) arguments).
  - Every problem of the inventory is collected and returned together; each names the host, the variable and
    the fix. Any problem fails the task, so nothing further runs.
  - Every argument is checked against the flag snapshot of the target vLLM version
    (C(data/vllm_flags/vllm-<version>.json)).
  - The weights are weighed against the GPUs that hold one copy and the KV capacity is predicted per deployment
    (C(data/recipes/kimi_k3.yml) C(capacity); the model's own C(config.json) and C(model.safetensors.index.json)
    when the controller holds them under C(kimi_k3_model_cache_dir)); C(kimi_k3_max_model_len=auto) becomes the
    longest length that holds C(kimi_k3_target_concurrency) sequences. Combinations vLLM refuses or ignores are
    judged on each node's final argv (recipe C(combination_rules)).
  - Every C(kimi_k3_*) variable is checked against its declaration (type, allowed values or format, scope) before
    anything is derived; the declarations are listed in the notes below and in C(docs/variables.md).
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.kimi_k3.attributes
  - gpufleet.kimi_k3.attributes.action
  - gpufleet.kimi_k3.plan_variables
  - gpufleet.kimi_k3.recipe
options:
  group:
    description: Inventory group holding every node of the deployment.
    type: str
    default: vllm_cluster
  head_group:
    description: Inventory group holding the head (rank 0) node.
    type: str
    default: vllm_head
  router_group:
    description:
      - Inventory group holding the vllm-router host (at most one), required when O(group) holds several
        deployments (C(kimi_k3_deployment)); its plan has C(role=router). See C(docs/deployments.md).
    type: str
    default: vllm_router
  overrides:
    description:
      - Variables named C(kimi_k3_*) applied to every node on top of the inventory, for example a different
        C(kimi_k3_max_model_len) per capacity step.
    type: dict
    default: {}
  dest:
    description:
      - Controller directory that receives C(<host>.json) and C(<host>.sh) for every node and C(plan.md), the plan
        for people (each node's arguments, the capacity prediction, the timeouts and the warnings as tables; the
        inventory's secret values hidden). Files (mode 0600, scripts 0700) are only rewritten when their content
        changes; nothing is written when the inventory is refused or in check mode.
    type: path
  return_plans:
    description:
      - Return every node's plan as RV(plans) (what the roles after the plan role read).
      - V(false) for a play that only renders, writes and shows the plan (C(playbooks/plan.yml)) - the plans are
        then in the files under O(dest) only. At fleet scale they are most of the result (3 MB at 1,152 nodes) that
        Ansible walks when it registers the result and again for the callbacks and an AWX job's events.
    type: bool
    default: true
author:
  - gpufleet maintainers (@gpufleet)
attributes:
  check_mode:
    details: Validates and renders the plans; no file is written under O(dest) in check mode.
  diff_mode:
    support: full
    details: Shows each file under O(dest) whose text changes (or would), before and after, with the inventory's
      secret values hidden; the copies kept by plan id are the same texts and are not shown again.
"""

EXAMPLES = r"""
- name: Plan the deployment
  gpufleet.kimi_k3.cluster_plan:
    group: vllm_cluster
  register: plan_result

- name: Plan a capacity step with another context length
  gpufleet.kimi_k3.cluster_plan:
    overrides:
      kimi_k3_max_model_len: 262144
"""

RETURN = r"""
ok:
  description: Whether the inventory passed validation.
  returned: always
  type: bool
plans:
  description: Per-host plan, keyed by inventory hostname (empty when refused).
  returned: unless O(return_plans=false)
  type: dict
  sample:
    tray01:
      role: head
      node_rank: 0
      image: vllm/vllm-openai@sha256:0123...
      env: {VLLM_USE_V2_MODEL_RUNNER: "1"}
      secret_env: [VLLM_API_KEY]
      container: {network_mode: host, ipc_mode: host}
      vllm_args: [moonshotai/Kimi-K3, --trust-remote-code]
nodes:
  description: How many nodes were planned (0 when refused), also with O(return_plans=false).
  returned: always
  type: int
  sample: 18
cluster:
  description:
    - Cluster summary (strategy, sizes, head, endpoints, node order).
    - C(capacity) (one deployment; with several, each of C(deployments[]) has its own) - the weights and KV budget
      per GPU, bytes per token (MLA KV) and per sequence (KDA state), and the predicted KV tokens and concurrency
      at the plan's max-model-len (C(at_max_model_len)) and over 32k .. 1M (C(table)); null for a model the
      collection cannot size (see docs/capacity.md).
    - C(timeouts) - engine ready (C(VLLM_ENGINE_READY_TIMEOUT_S)), launch ready and stall window in seconds, derived
      from the slowest node's C(kimi_k3_weight_read_mib_s) (their ceilings without one); each node plan carries its
      deployment's as C(timeouts).
  returned: always
  type: dict
scripts:
  description:
    - Per-host equivalent C(docker run) command, shell-quoted, secrets named but never valued.
    - With O(dest) set they are the files C(<dest>/<host>.sh) and not returned (they would travel with every later
      task's variables).
  returned: when O(dest) is not set or the inventory is refused
  type: dict
errors:
  description: One line per problem in the form C(host), C(variable), message, then C(Fix) and what to do.
  returned: always
  type: list
  elements: str
problems:
  description: The problems as structured records with C(host), C(variable), C(message), C(fix).
  returned: always
  type: list
  elements: dict
warnings_list:
  description: Non-fatal remarks in the same format as RV(errors).
  returned: always
  type: list
  elements: str
written:
  description: Files (re)written under O(dest), or that would be in check mode.
  returned: when O(dest) is set and the inventory is valid
  type: list
  elements: str
summary:
  description: A short human table of the plan, one line per item.
  returned: always
  type: list
  elements: str
"""
