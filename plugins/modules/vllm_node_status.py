#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: vllm_node_status
short_description: Read-only status of the vLLM container on a node (state, start-up phase, health, log tail)
version_added: 0.1.0
description:
  - Asks the node's container engine (Docker Engine API, through community.docker's client) for the container's
    state and the last lines of its log, classifies the vLLM start-up phase from the log (starting, joining,
    loading weights, profiling / KV cache, capturing graphs, serving, error, exited) and probes the given health
    URLs from the node.
  - Optionally polls for up to O(wait_s) seconds and returns early once the node is healthy or the container
    stopped. Changes nothing.
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.kimi_k3.attributes.read_only
  - gpufleet.kimi_k3.container_engine
options:
  health_urls:
    description: URLs that must answer HTTP 200 for the node to count as healthy (its own C(/health), or the
      head's for a headless follower).
    type: list
    elements: str
    default: []
  tail:
    description: Number of log lines returned.
    type: int
    default: 200
  wait_s:
    description: Poll up to this many seconds for the node to become healthy or to stop (0 = one look).
    type: float
    default: 0
  validate_certs:
    description: Verify the TLS certificate of C(https://) health URLs.
    type: bool
    default: true
  ca_path:
    description: CA bundle (PEM file on the node) to verify C(https://) health URLs with, instead of the system's.
    type: path
  digests:
    description: Also return the C(RepoDigests) of the container's image.
    type: bool
    default: false
author:
  - gpufleet maintainers (@gpufleet)
"""

EXAMPLES = r"""
- name: Look at the vLLM container
  gpufleet.kimi_k3.vllm_node_status:
    container: vllm-kimi-k3
    health_urls: ["http://127.0.0.1:8000/health"]
  register: vllm_status
"""

RETURN = r"""
exists:
  description: Whether the container exists.
  returned: always
  type: bool
running:
  description: Whether the container is running.
  returned: always
  type: bool
status:
  description: Engine state (running, exited, restarting, absent, ...).
  returned: always
  type: str
exit_code:
  description: Exit code of the container's main process.
  returned: always
  type: int
phase:
  description: Start-up phase read from the log.
  returned: always
  type: str
  sample: loading weights
log_phase:
  description: Start-up phase read from the log, also once the container stopped (RV(phase) is then C(exited)).
  returned: always
  type: str
phase_detail:
  description: The log line that decided the phase.
  returned: always
  type: str
health:
  description: HTTP status per health URL (null when nothing answered).
  returned: always
  type: dict
healthy:
  description: Running and every health URL answered 200.
  returned: always
  type: bool
log_tail:
  description: Last O(tail) log lines.
  returned: always
  type: list
  elements: str
image:
  description: Image reference the container was created from.
  returned: always
  type: str
plan_hash:
  description: The container's C(io.gpufleet.kimi_k3.plan_hash) label (null when absent).
  returned: always
  type: str
repo_digests:
  description: C(RepoDigests) of the container's image (empty unless O(digests)).
  returned: always
  type: list
  elements: str
"""

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.engine import api as engine_api
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.engine import launch_status


def main():
    module = AnsibleModule(
        argument_spec=dict(
            engine_api.container_spec(),
            health_urls=dict(type="list", elements="str", default=[]),
            tail=dict(type="int", default=200),
            wait_s=dict(type="float", default=0),
            validate_certs=dict(type="bool", default=True),
            ca_path=dict(type="path"),
            digests=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    p = module.params
    problem = engine_api.options_problem(p)
    if problem:
        module.fail_json(msg="%s: %s" % problem)
    api = launch_status.DockerAPI(p["docker_host"], docker_client=p["docker_client"])
    deadline = time.monotonic() + max(0.0, p["wait_s"])
    context = launch_status.tls_context(p["validate_certs"], p["ca_path"])
    try:
        while True:
            status = launch_status.node_status(api, p["container"], p["health_urls"], tail=p["tail"],
                                               context=context, digests=p["digests"])
            done = status["healthy"] or not status["running"]
            if done or time.monotonic() >= deadline:
                break
            time.sleep(min(2.0, max(0.0, deadline - time.monotonic())))
    except launch_status.DockerError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, **status)


if __name__ == "__main__":
    main()
