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
  - Succeeds when the container runs and every O(health_urls) answers 200; fails at once when the container stops
    (with its last log lines), or after O(timeout) seconds.
options:
  container:
    description: Container name.
    type: str
    default: vllm-kimi-k3
  docker_host:
    description: Engine socket on the node.
    type: str
    default: unix:///var/run/docker.sock
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
    description: Seconds per round.
    type: float
    default: 10
  progress_every:
    description: Print the phase at least this often (seconds).
    type: float
    default: 30
  tail:
    description: Log lines kept.
    type: int
    default: 200
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
    details: Only reads the container state and the health URLs, so it waits in check mode too.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: none
  action:
    description: Indicates this has a corresponding action plugin so some parts can be executed on the controller.
    support: full
author:
  - gpufleet maintainers (@gpufleet)
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
log_tail:
  description: Last log lines.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(argument_spec=dict(
        container=dict(type="str", default="vllm-kimi-k3"),
        docker_host=dict(type="str", default="unix:///var/run/docker.sock"),
        health_urls=dict(type="list", elements="str", default=[]),
        timeout=dict(type="float", default=3600),
        interval=dict(type="float", default=10),
        progress_every=dict(type="float", default=30),
        tail=dict(type="int", default=200),
    ), supports_check_mode=True)
    module.fail_json(msg="gpufleet.kimi_k3.vllm_wait runs as an action plugin")


if __name__ == "__main__":
    main()
