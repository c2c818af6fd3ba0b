#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: node_probe
short_description: Read-only probe of a GPU node for a Kimi-K3 vLLM deployment
version_added: "0.1.0"
description:
  - Gathers in one call everything the preflight checks need from one node - GPUs, driver, CUDA or ROCm,
    NVLink fabric (MNNVL), IMEX, RDMA ports, GPUDirect path, container engine and its GPU support, C(/dev/shm),
    memlock limit, free disk on the model cache path, kernel, time sync and whether the serving ports are free.
  - Prefers machine-readable tool output (C(nvidia-smi -q -x), C(nvidia-smi --query-gpu ... --format=csv,noheader,nounits),
    C(amd-smi static --json), C(amd-smi version --json), C(nvidia-imex-ctl -N), C(ibv_devinfo)) and falls back
    (C(/proc/driver/nvidia), C(rocm-smi), C(/opt/rocm/.info/version), C(/sys/class/infiniband), the C(docker) CLI).
  - A missing tool never fails the module; it is reported in RV(ansible_facts.node_probe.tools) (value C(null)) and,
    where it matters, in RV(ansible_facts.node_probe.errors). Judging the facts is the job of the
    P(gpufleet.kimi_k3.preflight#role) role.
  - Changes nothing on the node; runs in check mode as well and always returns C(changed=false).
  - Python 3.9 or newer on the node. The engine is asked through community.docker's client (the Python library
    C(requests) on the node, as for community.docker's modules); without it, or when the API does not answer, the
    C(docker) CLI is asked about the same engine (C(-H) and the TLS flags of O(docker_client)).
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.facts
  - gpufleet.kimi_k3.attributes
  - gpufleet.kimi_k3.container_engine.client
options:
  docker_host:
    description:
      - Container engine URL (Docker API C(GET /version) and C(GET /info)) through community.docker's client,
        C(unix:///path), C(tcp://host:port) (TLS per O(docker_client)) or C(ssh://user@host[:port]). When the API is
        not reachable the C(docker) CLI is tried against the same engine.
      - The preflight role passes the plan's C(docker_host).
    type: str
    required: true
  model_cache_dir:
    description:
      - Host directory that will hold the weights / Hugging Face cache. Free space is measured on it, or on its
        nearest existing parent when it does not exist yet. The preflight role passes the plan's C(model_cache_dir).
    type: path
    required: true
  model:
    description:
      - Model id (C(moonshotai/Kimi-K3)) or absolute path. Used to detect weights already present in
        O(model_cache_dir) (HF cache layout C(hub/models--org--name/snapshots/*)) or at the path.
    type: str
  model_revision:
    description:
      - Revision of O(model) the deployment pins (a commit hash, or a branch/tag the cache's C(refs/) resolves). Only
        that snapshot counts as the weights being present. Unset - any snapshot.
    type: str
  weight_read_sample_mib:
    description:
      - When the weights are present, read this many MiB of their shards (direct I/O where the filesystem allows it,
        else through the cache with the files' cached pages dropped first) and report the throughput in
        C(weights.read) of RV(ansible_facts.node_probe). The plan derives its launch timeouts from it
        (C(kimi_k3_weight_read_mib_s)). V(0) reads nothing.
    type: int
    default: 0
  weight_read_max_seconds:
    description: Stop the sample read after this many seconds, whatever O(weight_read_sample_mib) says.
    type: float
    default: 5.0
  ports:
    description:
      - TCP ports that must be free. An element is a port number, or a dict with C(port), C(name) and optionally
        C(bind) (list of addresses; default O(bind_addresses)).
    type: list
    elements: raw
    default: []
  bind_addresses:
    description:
      - Addresses on which each port of O(ports) is test-bound (a bind, never a listen).
    type: list
    elements: str
    default: ['0.0.0.0']
  command_timeout:
    description:
      - Seconds after which a vendor tool is killed (through C(timeout(1)) when present). C(0) disables it.
    type: int
    default: 60
  deployment_container:
    description:
      - Name of this collection's vLLM container. When it runs, the ports and GPU memory it holds are reported as
        held by the deployment (a re-run of deploy.yml) rather than by a foreign process. Empty disables the lookup.
      - The preflight role passes the plan's C(container.name).
    type: str
    default: ""
  interfaces:
    description:
      - Network interfaces whose state, MTU and addresses are reported (C(ip -j addr show), else C(/sys/class/net)).
        The preflight role passes the socket interfaces of the plan (C(GLOO_SOCKET_IFNAME) / C(NCCL_SOCKET_IFNAME)).
      - With C(ip), the addresses of every interface are reported too (C(interfaces.all)), so preflight can tell the
        cluster network from the others.
    type: list
    elements: str
    default: []
  all_interfaces:
    description:
      - Read C(ip -j addr show) also when O(interfaces) is empty, for C(interfaces.all). The preflight role sets it
        where inter-node ports will listen on every address (check C(port_exposure)).
    type: bool
    default: false
  probe_root:
    description:
      - Directory below which kernel state - paths under C(/proc) and C(/sys) (loaded modules, C(/proc/driver/nvidia/params),
        sysfs RDMA devices, module versions) - is read. Real nodes keep the default C(/).
      - The rehearsal cluster's nodes share the host's kernel, so each writes its profile's kernel state below a root
        of its own and the sim inventories set it (role variable C(preflight_probe_root)).
      - Falls back to the environment variable C(KIMI_K3_PROBE_ROOT) of the module's process when not given, then to C(/).
    type: path
  access_paths:
    description:
      - Paths the deployment writes besides O(model_cache_dir) (for example the launch role's env file directory); the
        probe reports whether the user it runs as may write each one (or its nearest existing parent).
    type: list
    elements: path
    default: []
notes:
  - Facts are returned under C(ansible_facts['node_probe']); read them through C(ansible_facts), not injected vars.
  - The memlock limit is the one of the probing process (the SSH session), as returned by C(getrlimit).
seealso:
  - name: GPU node probe formats
    description: Formats and parser traps the probe follows (project reference gpu-node-probes.md).
    link: https://example.invalid/gpufleet/kimi_k3/docs/preflight.md
author:
  - gpufleet maintainers (@gpufleet)
attributes:
  check_mode:
    details: The probe only reads, so it runs unchanged in check mode.
  facts:
    support: full
"""

EXAMPLES = r"""
- name: Probe the node
  gpufleet.kimi_k3.node_probe:
    docker_host: unix:///var/run/docker.sock
    model_cache_dir: /data/hf-cache
    model: moonshotai/Kimi-K3
    ports:
      - {name: api, port: 8000, bind: ['0.0.0.0']}
      - {name: master, port: 29501, bind: ['10.0.0.11']}
      - {name: dp_rpc, port: 29550, bind: ['10.0.0.11']}
  check_mode: false

- name: Show what was found
  ansible.builtin.debug:
    msg: "{{ ansible_facts['node_probe']['gpu_count'] }} x {{ ansible_facts['node_probe']['gpu_model'] }}"
"""

RETURN = r"""
ansible_facts:
  description: Facts about the node.
  returned: always
  type: dict
  contains:
    node_probe:
      description: Everything gathered; see docs/preflight.md for the full layout.
      returned: always
      type: dict
      contains:
        vendor:
          description: C(nvidia), C(amd) or null when no GPU stack was found.
          type: str
          sample: nvidia
        gpu_count:
          description: Number of GPUs found (0 when none or when the tools fail).
          type: int
          sample: 4
        gpu_model:
          description: Normalised model - one of C(gb300 gb200 b300 b200 h200 mi355x mi350x unknown), or
            C(mixed:a,b) when the GPUs disagree.
          type: str
          sample: gb300
        gpus:
          description: Per GPU - index, name, uuid, pci_bus_id, pci_device_id, memory_total_mib, compute_cap
            (C(10.3); C(gfx950) on AMD), model, fabric (state, status, clique_id, cluster_uuid, health).
          type: list
          elements: dict
        driver_version:
          description: NVIDIA driver (from nvidia-smi, else C(/proc/driver/nvidia/version)) or amdgpu driver version.
          type: str
          sample: 580.173.02
        cuda_version:
          description: Newest CUDA the NVIDIA driver serves (not a toolkit), null on AMD or when libcuda is absent.
          type: str
          sample: "13.0"
        rocm_version:
          description: ROCm version (amd-smi, else C(/opt/rocm/.info/version)), null on NVIDIA.
          type: str
          sample: 7.0.2
        mnnvl:
          description: True only when every GPU reports fabric C(Completed)/C(Success), a ClusterUUID other than
            all zeros, one common ClusterUUID and CliqueId, and C(Healthy).
          type: bool
        fabric:
          description: Node fabric summary - state, cluster_uuid, clique_id, healthy, reasons (why not MNNVL).
          type: dict
        imex:
          description: C(nvidia-imex-ctl -N) - present, domain_state, up, nodes, all_ready, matrix_ok, channel.
          type: dict
        rdma:
          description: source (C(ibv_devinfo)/C(sysfs)/null), ports (device, port, state, link_layer), active_ports.
          type: dict
        gpudirect:
          description: peermem_loaded, dmabuf_capable (open kernel module), mode (C(peermem)/C(dmabuf)/C(none)).
          type: dict
        engine:
          description: Container engine - reachable, source (C(socket)/C(cli)), version, api_version, runtimes,
            nvidia_runtime, nvidia_hook, cdi_devices, cdi_specs, gpu_support (ok, via), error.
          type: dict
        devices:
          description: kfd, dri_render_nodes, nvidia_nodes, imex_channel, infiniband_uverbs.
          type: dict
        shm_bytes:
          description: Size of C(/dev/shm) in bytes.
          type: int
        memlock:
          description: Soft RLIMIT_MEMLOCK in bytes, -1 for unlimited (C(memlock_hard) alongside).
          type: int
        disk:
          description: path, checked_path (nearest existing parent), exists, free_bytes, total_bytes.
          type: dict
        weights:
          description: present, path, bytes, missing_shards - weights already in the cache; read - the sample
            read of O(weight_read_sample_mib) (bytes, seconds, mib_s, direct, files, error), null without one.
          type: dict
        kernel:
          description: C(uname -r).
          type: str
        time_sync:
          description: synchronized (true/false/null = unknown) and source (C(timedatectl)/C(chronyc)/null).
          type: dict
        ports:
          description: One entry per port and address - name, port, address, state (C(free), C(in_use),
            C(not_local), C(error ...)).
          type: list
          elements: dict
        deployment:
          description: This collection's vLLM container on the node - container, exists, running, image.
          type: dict
        kernel_state:
          description: Read below O(probe_root) - modules (loaded kernel modules from C(/proc/modules)),
            modules_readable, nvidia_params (C(/proc/driver/nvidia/params) as name -> value, null when absent).
          type: dict
        access:
          description: Who the probe runs as - user, euid, groups, socket (engine socket path), socket_rw, paths
            (path -> writable) for O(model_cache_dir) and O(access_paths).
          type: dict
        tools:
          description: Tool name -> path, or null when not found.
          type: dict
        errors:
          description: Problems met while probing (missing tools that matter, failed commands).
          type: list
          elements: str
        commands:
          description: Every external command the probe ran - command (tool and first argument), rc, seconds (wall).
            A tool that takes long here (for example C(nvidia-smi) taking tens of seconds) is itself a finding.
          type: list
          elements: dict
        probe_seconds:
          description: Wall time of the whole probe on the node, in seconds (tool calls plus reading files).
          type: float
"""

from ansible.module_utils.basic import AnsibleModule, env_fallback

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.engine.api import docker_client_spec
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.probe.collect import collect, module_io


ARGUMENT_SPEC = dict(
    docker_host=dict(type="str", required=True),
    docker_client=docker_client_spec(),
    model_cache_dir=dict(type="path", required=True),
    model=dict(type="str"),
    model_revision=dict(type="str"),
    ports=dict(type="list", elements="raw", default=[]),
    bind_addresses=dict(type="list", elements="str", default=["0.0.0.0"]),
    command_timeout=dict(type="int", default=60),
    deployment_container=dict(type="str", default=""),
    interfaces=dict(type="list", elements="str", default=[]),
    all_interfaces=dict(type="bool", default=False),
    probe_root=dict(type="path", fallback=(env_fallback, ["KIMI_K3_PROBE_ROOT"])),
    access_paths=dict(type="list", elements="path", default=[]),
    weight_read_sample_mib=dict(type="int", default=0),
    weight_read_max_seconds=dict(type="float", default=5.0),
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    facts = collect(module_io(module, module.params["probe_root"]), module.params)
    module.exit_json(changed=False, ansible_facts={"node_probe": facts})


if __name__ == "__main__":
    main()
