#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: preflight_report
short_description: Judge every node's probe against its plan and write the preflight report
version_added: 0.1.0
description:
  - Runs on the controller (action plugin), once for the whole cluster (C(run_once)); contacts no host.
  - Reads each host's registered M(gpufleet.kimi_k3.node_probe) result (O(probe_var)) and its plan
    (C(plan_result.plans[host]), C(plan_result.cluster)); what a node must provide comes from the plan and the
    recipe's C(node_requirements) (data/recipes/kimi_k3.yml), the operator policy from O(thresholds).
  - Every check of every host is evaluated; a check whose prerequisite failed is reported C(skip) with
    "depends on <check>" instead of failing with a misleading fix (docs/preflight.md).
  - Does not fail itself - RV(host_failures) lets a following per-host task fail exactly the hosts at fault.
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.kimi_k3.attributes
  - gpufleet.kimi_k3.attributes.report
  - gpufleet.kimi_k3.recipe
options:
  hosts:
    description: Hosts to judge. Default C(ansible_play_hosts_all).
    type: list
    elements: str
  thresholds:
    description: Policy overrides - C(min_free_disk_gb), C(min_shm), C(max_gpu_memory_used_pct),
      C(rdma_min_active_ports), C(rdma_allow_down_ports), C(require_time_sync), C(require_gpudirect), C(drift_fatal).
    type: dict
    default: {}
  show_pass:
    description: Include passing checks in RV(table) (the JSON and Markdown always have all).
    type: bool
    default: true
  dest:
    description: Controller directory for C(preflight-report.json) and C(preflight-report.md); written in check mode
      too (they describe the nodes, they change nothing). Omitted - no files.
    type: path
  probe_var:
    description: Name of the variable the probe task registered.
    type: str
    default: preflight_probe_result
author:
  - gpufleet maintainers (@gpufleet)
"""

EXAMPLES = r"""
- name: Judge all nodes together and write the report
  gpufleet.kimi_k3.preflight_report:
    thresholds:
      min_free_disk_gb: 1700
    dest: /srv/artifacts
  register: preflight_result
  run_once: true
  delegate_to: localhost

- name: Fail the hosts at fault
  ansible.builtin.fail:
    msg: "{{ preflight_result.host_failures[inventory_hostname] }}"
  when: inventory_hostname in preflight_result.host_failures
"""

RETURN = r"""
ok:
  description: No host failed a preflight check; warnings do not count.
  returned: always
  type: bool
report:
  description: The report - schema, summary (ok, fail, warn, skip, pass, failed_hosts, failed_checks), findings
    (host, check, status, observed, expected, fix), drift, nodes, thresholds.
  returned: always
  type: dict
failed_hosts:
  description: Hosts a failure is charged to (for a cluster-wide drift failure - the nodes off the common value).
  returned: always
  type: list
  elements: str
host_failures:
  description: Per failing host, one message with its failing checks, their fixes and the checks skipped behind them.
  returned: always
  type: dict
table:
  description: Plain-text table of the findings followed by what to do.
  returned: always
  type: str
markdown:
  description: The Markdown report (with O(dest) set it is the file C(preflight-report.md) instead).
  returned: when O(dest) is not set
  type: str
json:
  description: The JSON report text (with O(dest) set it is the file C(preflight-report.json) instead).
  returned: when O(dest) is not set
  type: str
failure_message:
  description: Every failing check of the cluster in one paragraph.
  returned: always
  type: str
written:
  description: Report files rewritten under O(dest) (unchanged files are not rewritten).
  returned: when O(dest) is set
  type: list
  elements: str
"""
