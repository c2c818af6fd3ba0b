#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: fabric_report
short_description: Judge every node's fabric job result and write the fabric section of the preflight report
version_added: 0.1.0
description:
  - Runs on the controller (action plugin), once for the whole cluster (C(run_once)); contacts no host.
  - Reads each host's fabric job outcome (O(outcome_var), a dict with C(result) - the job's JSON document - and
    C(failure)) and judges it against the host's job spec (O(specs), built by the C(gpufleet.kimi_k3.fabric_specs)
    filter from the plan) - interfaces carrying the node's address, every planned port answered from every peer,
    names resolved alike on every node, the vLLM release and torch build read in the image against the plan,
    the collective's join, results and bandwidth, the expert-parallel kernel tests.
  - Does not fail itself - RV(hosts) holds each host's verdict for a following per-host task.
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.kimi_k3.attributes
  - gpufleet.kimi_k3.attributes.report
options:
  specs:
    description: The job spec of every host, keyed by host.
    type: dict
    required: true
  hosts:
    description: Hosts to judge. Default every host of O(specs).
    type: list
    elements: str
  outcome_var:
    description: Name of the per-host variable holding the job's outcome.
    type: str
    default: fabric_job_outcome
  dest:
    description: Controller directory for C(fabric-report.json) and C(fabric-report.md); when it holds a
      C(preflight-report.json) / C(.md), the fabric section is put into them too (replacing an earlier one). Written
      in check mode too; never a change. Omitted - no files.
    type: path
author:
  - gpufleet maintainers (@gpufleet)
"""

EXAMPLES = r"""
- name: Judge the fabric of every deployment and write the report
  gpufleet.kimi_k3.fabric_report:
    specs: "{{ fabric_plan.specs }}"
    dest: /srv/artifacts
  register: fabric_outcome
  run_once: true
  delegate_to: localhost
"""

RETURN = r"""
ok:
  description: No host failed a fabric check; checks that were not run (skipped) do not count.
  returned: always
  type: bool
report:
  description: The fabric section - schema, summary (ok, hosts, deployments, fail, skip, pass, failed_hosts),
    findings (host, check, status, observed, expected, fix, variable, pair), pairs (every port from every peer),
    bandwidth (send/recv between node leaders), nodes (join time, latency, bus bandwidth, versions), provenance.
  returned: always
  type: dict
hosts:
  description: Per host - ok, its findings, its node row and the provenance read in its image.
  returned: always
  type: dict
host_failures:
  description: Per failing host, one message with its failing checks (pair, setting) and their fixes.
  returned: always
  type: dict
markdown:
  description: The fabric section in Markdown (the per-pair table).
  returned: always
  type: str
failure_message:
  description: Every failing check in one paragraph, with its fix.
  returned: always
  type: str
written:
  description: Report files rewritten under O(dest).
  returned: when O(dest) is set
  type: list
  elements: str
"""
