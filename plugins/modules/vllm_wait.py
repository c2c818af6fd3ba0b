#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: vllm_wait
short_description: Wait until the vLLM container on a node is ready, showing its start-up phase
version_added: 0.1.0
description:
  - Action plugin. Runs M(gpufleet.kimi_k3.vllm_node_status) on the node in rounds and prints a progress line
    (elapsed time and phase read from the container log) whenever the phase changes, and every O(progress_every)
    seconds.
  - Watches the whole group, not only its node. Run it on every host of the group in one task (the hosts wait in
    parallel; keep C(forks) at least the number of nodes); each host's watcher publishes its verdict on a board
    on the controller and reads its O(peers)' verdicts. When any node fails, every watcher of the group stops
    within one round and names the node that failed first (RV(first_failure)).
  - The boards live in C(kimi-k3-wait-<uid>/) of the controller's temporary directory (C(TMPDIR)), mode 0700; one
    that is a symlink, belongs to another user or is open to others is refused, not used.
  - A node fails when its container stops (C(exited)); when a health URL that had answered 200 stops answering
    (C(peer_lost), for example the head of a headless follower went away); when its start-up phase and phase
    line do not change for O(stall_timeout) seconds (C(stalled), naming the phase); when its status cannot be read
    three rounds in a row, or its watcher published nothing for max(60, 3 x O(interval) + 30) seconds
    (C(unreachable)); or after O(timeout) seconds (C(timeout), the budget for slow weight loads).
  - Succeeds (C(ready)) when the container runs and every O(health_urls) answers 200.
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.kimi_k3.attributes
  - gpufleet.kimi_k3.attributes.action
  - gpufleet.kimi_k3.container_engine
options:
  health_urls:
    description: URLs that must answer 200 (checked from the node).
    type: list
    elements: str
    default: []
  timeout:
    description: Seconds to wait; match C(VLLM_ENGINE_READY_TIMEOUT_S) (3600 for Kimi-K3).
    type: float
    default: 3600
  interval:
    description: Seconds per round (a dead peer is noticed within one round).
    type: float
    default: 5
  stall_timeout:
    description: Fail a node whose start-up phase and phase line did not change for this many seconds. Weight
      loading reports shard progress, so this bounds silent phases (joining, profiling, graph capture).
    type: float
    default: 900
  peers:
    description: Every host of the group (the play's hosts); their watchers' verdicts are read each round.
    type: list
    elements: str
    default: []
  board:
    description: Name of the board shared by the watchers of one group start (same value on every host, for
      example a timestamp set with C(run_once)); default one per task and ansible-playbook process.
    type: str
  validate_certs:
    description: Verify the TLS certificate of C(https://) health URLs.
    type: bool
    default: true
  ca_path:
    description: CA bundle (PEM file on the node) for C(https://) health URLs.
    type: path
  progress_every:
    description: Print the phase at least this often (seconds).
    type: float
    default: 30
  tail:
    description: Log lines kept.
    type: int
    default: 200
author:
  - gpufleet maintainers (@gpufleet)
attributes:
  check_mode:
    details: Only reads the container state and the health URLs, so it waits in check mode too.
"""

EXAMPLES = r"""
- name: Wait for the head
  gpufleet.kimi_k3.vllm_wait:
    health_urls: ["http://10.20.0.11:8000/health"]
    timeout: 3600
"""

RETURN = r"""
elapsed_s:
  description: Seconds waited.
  returned: always
  type: float
phase:
  description: Last phase seen.
  returned: always
  type: str
phases:
  description: Phase changes with the time they were seen.
  returned: always
  type: list
  elements: dict
healthy:
  description: Whether the node became ready.
  returned: always
  type: bool
ready:
  description: Whether the node became ready (same as RV(verdict) == C(ready)).
  returned: always
  type: bool
verdict:
  description: C(ready), C(exited), C(peer_lost), C(stalled), C(timeout), C(unreachable), or C(group) (another node
    failed first).
  returned: always
  type: str
detail:
  description: Why, in one line.
  returned: always
  type: str
first_failure:
  description: Board record (host, verdict, t, detail, phase) of the node of the group that failed first, or null.
  returned: always
  type: dict
log_tail:
  description: Last log lines.
  returned: always
  type: list
  elements: str
"""
