# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations


class ModuleDocFragment(object):
    """The container and engine options of the modules that ask a node's Docker engine about the vLLM container
    (vllm_node_status, vllm_wait). The roles pass the plan's C(container.name) and C(docker_host)."""

    DOCUMENTATION = r"""
options:
  container:
    description: Name of the vLLM container on the node (the plan's C(container.name); its default,
      C(kimi_k3_container_name), lives in the recipe data).
    type: str
    required: true
  docker_host:
    description: Engine socket on the node, C(unix://...) or C(tcp://host:port) (the plan's C(docker_host)).
    type: str
    default: unix:///var/run/docker.sock
"""
