#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: monitoring_config
short_description: Write a Prometheus scrape configuration and a Grafana dashboard for a planned Kimi-K3 deployment
version_added: 0.1.0
description:
  - Runs on the controller (action plugin) and contacts no host.
  - From the cluster plan (O(plans), C(plan_result.plans) of the C(gpufleet.kimi_k3.plan) role) writes under
    O(dest) a file_sd target file with every node that serves C(/metrics) (C(serves_http)), one with the routers
    when there are any, a complete C(prometheus.yml) whose scrape jobs read them, and a Grafana dashboard
    (TTFT, inter-token latency, throughput, KV cache usage, running/waiting requests, preemptions, per node).
  - Targets carry the labels C(kimi_k3_cluster), C(node), C(role) and C(node_rank); the dashboard filters on them.
  - Panels come from C(data/monitoring/vllm-dashboard.yml); the dashboard is checked against
    C(data/monitoring/grafana-dashboard.schema.json) before it is written.
  - Files are only rewritten when their content changes. See docs/monitoring.md.
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.kimi_k3.attributes
  - gpufleet.kimi_k3.attributes.action
options:
  plans:
    description:
      - The plan's vLLM targets, C(plan_result.cluster.monitoring.vllm) (per-host plans, C(plan_result.plans), are
        accepted too); a router's plan is no vLLM target (its C(/metrics) is on its own port, O(routers)).
    type: dict
    required: true
  cluster_name:
    description: Value of the C(kimi_k3_cluster) label and part of the dashboard title and uid.
    type: str
    required: true
  routers:
    description:
      - Routers in front of the endpoints, as URLs (C(http://host:port)) or C({name, url}) mappings; their
        C(/metrics) is scraped by a job of its own.
    type: list
    elements: raw
    default: []
  dest:
    description: Controller directory receiving C(prometheus.yml), C(targets/*.json), C(grafana/kimi-k3-dashboard.json).
    type: path
    required: true
  scrape_interval:
    description: Prometheus scrape (and evaluation) interval.
    type: str
    default: 15s
  ca_file:
    description: CA bundle Prometheus uses to verify https endpoints (C(tls_config.ca_file)).
    type: path
author:
  - gpufleet maintainers (@gpufleet)
attributes:
  action:
    details: Runs as an action plugin on the controller (contacts no host).
  check_mode:
    details: Reports the files that would change; writes nothing.
"""

EXAMPLES = r"""
- name: Write the monitoring configuration next to the other artifacts
  gpufleet.kimi_k3.monitoring_config:
    plans: "{{ plan_result.cluster.monitoring.vllm }}"
    routers: "{{ plan_result.cluster.monitoring.routers }}"
    cluster_name: gb300-cluster
    dest: "{{ lookup('gpufleet.kimi_k3.artifacts_dir') }}/monitoring"
"""

RETURN = r"""
dest:
  description: Absolute directory the files went to.
  returned: always
  type: str
written:
  description: Files (re)written under RV(dest), relative paths, or that would be in check mode.
  returned: always
  type: list
  elements: str
prometheus_config:
  description: Path of the generated C(prometheus.yml).
  returned: always
  type: str
dashboard:
  description: Path of the generated Grafana dashboard JSON.
  returned: always
  type: str
summary:
  description: Scrape targets (C(host:port)), router targets, job names, the C(vllm:*) metrics the dashboard queries.
  returned: always
  type: dict
  sample:
    targets: ["10.20.0.11:8000"]
    router_targets: []
    jobs: [kimi_k3_vllm]
    metrics: ["vllm:kv_cache_usage_perc", "vllm:num_requests_running"]
    dashboard_uid: kimi-k3-gb300-cluster
"""
