#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_smoke_finalise
short_description: Add container logs, GPU memory and reproduction facts to a smoke result and apply the fail policy
version_added: "0.1.0"
description:
  - The finalising step after M(gpufleet.kimi_k3.vllm_smoke). Sends no request. The container logs of the smoke
    window exist only after the requests, so the smoke role reads them and then calls this module with the facts of
    the run, the log task's results and the GPU memory it read on every node during the window.
  - Recomputes C(log_findings) (warning/error lines and known signatures per host; a log that could not be read is
    reported with C(readable=false) and the reason, never as a clean log), C(server.kv_from_log), C(gpu_memory),
    C(reproduction) and C(policy).
  - Sets C(kv_check) - the engine's KV cache tokens and maximum concurrency at max-model-len
    (C(vllm:cache_config_info), else the start-up line) and the GPU memory in use beside the plan's prediction from
    O(plan_cluster), the error in % and a warning per figure beyond O(kv_tolerance_pct) - and a report section.
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.kimi_k3.attributes
options:
  facts:
    description: The C(vllm_smoke) facts of the run (RV(ansible_facts.vllm_smoke) of M(gpufleet.kimi_k3.vllm_smoke)).
    type: dict
    required: true
  log_results:
    description:
      - The registered loop results (C(results)) of a M(gpufleet.kimi_k3.vllm_container_log) task run on every
        node, with the host as C(item). C(stdout) is the log; a skipped, unreachable or failed read (any C(rc)
        other than 0) makes that host's log unreadable.
    type: list
    elements: dict
  log_lines:
    description: Container log text (a string or a list of lines) per host, read some other way.
    type: dict
  node_probes:
    description: C(node_probe) facts per host (GPU memory used/total per GPU), summarised into C(gpu_memory) when
      O(gpu_reads) is not given. They are from before the launch; the smoke role passes O(gpu_reads).
    type: dict
  gpu_reads:
    description:
      - The registered loop results (C(results)) of a M(gpufleet.kimi_k3.node_gpu_memory) task run on every node
        while the engine serves, with the host as C(item). Summarised into C(gpu_memory) with the time each node was
        read (C(read_at)); a failed or skipped read gives its host no GPU and the reason.
    type: list
    elements: dict
  reproduction:
    description: Facts needed to reproduce the run (image, driver, CUDA/ROCm, GPU model, interconnect, ...), merged
      into C(reproduction). A C(vllm_args) entry (the plan's C(vllm serve) argv) is not kept; its
      C(--tool-call-parser), C(--reasoning-parser) and C(--tool-strict-level) are, as C(tool_call_parser),
      C(reasoning_parser) and C(tool_strict_level).
    type: dict
  plan_cluster:
    description:
      - The plan's cluster record (C(plan_result.cluster) of M(gpufleet.kimi_k3.cluster_plan)). Its capacity
        prediction for O(deployment) is set beside the engine's own figures in C(kv_check).
    type: dict
  deployment:
    description: The deployment whose prediction counts (the head's C(deployment) in its plan; the only one when
      omitted).
    type: str
  kv_tolerance_pct:
    description:
      - Error in % between a predicted and an engine figure beyond which C(kv_check) carries a warning (never a
        failure of the policy).
    type: float
    default: 2.0
  fail_policy:
    description:
      - Evaluated into C(policy) of RV(ansible_facts.vllm_smoke) (C(passed), C(violations)). Keys C(fail_on_group_failure) (bool, default true),
        C(min_tool_call_success_rate) (0..1), C(max_ttft_s) (0 = off), C(fail_on_log_errors) (bool; a log that
        could not be read, or no log at all, violates it), C(fail_on_preemptions) (bool), and the full profile's
        gates (see M(gpufleet.kimi_k3.vllm_smoke)). The module never fails because of it.
    type: dict
notes:
  - Facts are namespaced as C(ansible_facts['vllm_smoke']).
author:
  - gpufleet maintainers (@gpufleet)
attributes:
  check_mode:
    details: Computes only; never reports a change.
"""

EXAMPLES = r"""
- name: Read the container log of every node
  gpufleet.kimi_k3.vllm_container_log:
    container: vllm-kimi-k3
    since: "{{ smoke_window_start }}"
  delegate_to: "{{ item }}"
  loop: "{{ groups['vllm_cluster'] }}"
  register: smoke_logs
  changed_when: false
  failed_when: false

- name: Add the logs and apply the fail policy
  gpufleet.kimi_k3.vllm_smoke_finalise:
    facts: "{{ ansible_facts['vllm_smoke'] }}"
    log_results: "{{ smoke_logs.results }}"
    fail_policy: {fail_on_group_failure: true, fail_on_log_errors: true}
  delegate_to: localhost
"""

RETURN = r"""
report_markdown:
  description: The smoke report in Markdown, now with the container-log findings, GPU memory and the final policy.
  returned: always
  type: str
summary_table:
  description: The groups' summary as a plain-text table (the same as M(gpufleet.kimi_k3.vllm_smoke) returns).
  returned: always
  type: str
ansible_facts:
  description: The finalised smoke facts, recorded on the host again.
  returned: always
  type: complex
  contains:
    vllm_smoke:
      description: The O(facts) with C(log_findings), C(server.kv_from_log), C(gpu_memory), C(reproduction),
        C(kv_check) and C(policy) recomputed (see M(gpufleet.kimi_k3.vllm_smoke) for the rest).
      type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import capacity_check
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import finalise as smoke_finalise

ARGUMENT_SPEC = dict(
    facts=dict(type="dict", required=True),
    log_results=dict(type="list", elements="dict"),
    log_lines=dict(type="dict"),
    node_probes=dict(type="dict"),
    gpu_reads=dict(type="list", elements="dict"),
    reproduction=dict(type="dict"),
    fail_policy=dict(type="dict"),
    plan_cluster=dict(type="dict"),
    deployment=dict(type="str"),
    kv_tolerance_pct=dict(type="float", default=2.0),
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    facts = smoke_finalise.finalise(p["facts"], log_lines=p["log_lines"], log_results=p["log_results"],
                                    node_probes=p["node_probes"], gpu_reads=p["gpu_reads"],
                                    reproduction=p["reproduction"],
                                    fail_policy=p["fail_policy"], capacity={
                                        "prediction": capacity_check.deployment_capacity(p["plan_cluster"],
                                                                                         p["deployment"]),
                                        "tolerance_pct": p["kv_tolerance_pct"]})
    module.exit_json(**smoke_finalise.module_result(facts))


if __name__ == "__main__":
    main()
