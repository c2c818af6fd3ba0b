#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: node_gpu_memory
short_description: Read the GPU memory in use on a node now
version_added: 0.1.0
description:
  - Asks C(nvidia-smi --query-gpu ... --format=csv,noheader,nounits) (NVIDIA) or C(amd-smi metric --mem-usage --json)
    (AMD) for every GPU's memory in use and total, and says when it asked. Changes nothing.
  - The smoke role reads it on every node while the engine serves, so the report's GPU memory is the engine's, not
    the preflight probe's from before the launch (P(gpufleet.kimi_k3.smoke#role)).
  - A node without either tool, or a tool that fails, gives no GPU and the reason in RV(gpu_memory.errors); the
    module does not fail for it.
  - On a node without GPUs (the cpu profile) the engine's weights and KV cache live in host memory, so with
    O(container) it also reads that container's memory from the node's Docker engine (the figure C(docker stats)
    shows) into RV(gpu_memory.engine_memory).
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.kimi_k3.attributes.read_only
  - gpufleet.kimi_k3.container_engine.client
options:
  probe_root:
    description: Root under which kernel state is read (tests and the rehearsal); the tools are found on the PATH.
    type: path
    default: /
  container:
    description:
      - The vLLM container whose memory is read when the node has neither GPU tool. Omitted, nothing is read.
    type: str
  docker_host:
    description: The node's Docker engine URL (the plan's C(docker_host)), as P(gpufleet.kimi_k3.vllm_container_log#module)
      takes it; asked only with O(container).
    type: str
    default: unix:///var/run/docker.sock
author:
  - gpufleet maintainers (@gpufleet)
"""

EXAMPLES = r"""
- name: Read the GPU memory the engine holds
  gpufleet.kimi_k3.node_gpu_memory:
  register: gpu_now
"""

RETURN = r"""
gpu_memory:
  description: What the node's GPU tool said.
  returned: always
  type: dict
  contains:
    read_at:
      description: When the tool was asked (UTC, ISO 8601).
      type: str
      sample: "2026-12-06T10:15:02Z"
    read_epoch:
      description: The same instant in seconds since the epoch.
      type: float
    vendor:
      description: C(nvidia), C(amd), or null without either tool.
      type: str
    gpus:
      description: One entry per GPU - C(index), C(memory_used_mib), C(memory_total_mib) (null when not reported).
      type: list
      elements: dict
    errors:
      description: Why a figure is missing (no tool, a failed command).
      type: list
      elements: str
    engine_memory:
      description: The container's memory in use and its limit in MiB (C(container), C(used_mib), C(limit_mib)),
        read only on a node without GPU tools when O(container) is given; null otherwise.
      type: dict
"""

from ansible.module_utils.basic import AnsibleModule

import json

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.engine import api as engine_api
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.probe import gpu_memory
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.probe.collect import module_io

ARGUMENT_SPEC = dict(probe_root=dict(type="path", default="/"), container=dict(type="str"),
                     docker_host=dict(type="str", default=engine_api.DEFAULT_DOCKER_HOST),
                     docker_client=engine_api.docker_client_spec())


def engine_memory(params):
    """(the container's memory, or None; the reason it was not read, or None)."""
    try:
        status, body = engine_api.engine_get(params, "/containers/%s/stats?stream=false" % params["container"],
                                             timeout=30)
        if status != 200:
            return None, "docker stats %s: HTTP %s" % (params["container"], status)
        return gpu_memory.container_memory(json.loads(body.decode("utf-8", "replace")), params["container"]), None
    except (engine_api.EngineError, ValueError) as exc:
        return None, "docker stats %s: %s" % (params["container"], str(exc)[:300])


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    out = gpu_memory.read(module_io(module, module.params["probe_root"]))
    out["engine_memory"] = None
    if out["vendor"] is None and module.params["container"]:
        out["engine_memory"], why = engine_memory(module.params)
        out["errors"] += [why] if why else []
    module.exit_json(changed=False, gpu_memory=out)


if __name__ == "__main__":
    main()
