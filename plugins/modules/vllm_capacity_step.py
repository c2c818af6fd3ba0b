#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_capacity_step
short_description: One concurrency sweep against a running vLLM endpoint (a point of the max-model-len curve)
version_added: "0.1.0"
description:
  - Runs on the controller (C(delegate_to=localhost)) with the openai SDK. Reads the served max_model_len
    (C(/v1/models)) and the KV budget (C(vllm:cache_config_info) labels, else the start-up log line given in
    O(log_text)), then sends streaming requests of about O(prompt_fraction) x (max_model_len - O(output_tokens))
    prompt tokens at increasing concurrency and records per step throughput, TTFT/ITL percentiles, queue, KV usage
    and preemptions.
  - A step is saturated when p99 TTFT exceeds O(ttft_limit_s), requests wait or get preempted, requests fail, or
    throughput grows less than O(plateau_gain) although concurrency went up. The sweep stops one level past the
    first saturated step when O(stop_on_saturation).
  - The module fails when every request of a step failed (the server stopped serving, e.g. an engine that dies on
    its first request), since a curve of such a step would hold no figure, only the look of a result.
  - Up to 128 simultaneous streams run in the module's own process; above that the streams are spread over
    ceil(concurrency / 128) client processes (each with its own connection pool, started and warmed up before the
    clock starts), so the client's own CPU does not cap the load or inflate TTFT/ITL.
  - Requests are read-only; check mode sends them too (they change nothing) and the module never reports a change.
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.kimi_k3.attributes
  - gpufleet.kimi_k3.endpoint_client
options:
  max_model_len:
    description: Fallback when C(/v1/models) does not report max_model_len.
    type: int
  concurrency_levels:
    description: Explicit levels. Default is a geometric plan up to O(max_concurrency), capped at about twice the
      theoretical concurrency.
    type: list
    elements: int
  max_concurrency:
    description: Highest concurrency of the default plan.
    type: int
    default: 64
  requests_per_level:
    description: Requests per step = this x concurrency (at least the concurrency).
    type: float
    default: 2
  output_tokens:
    description: Output tokens per request (C(max_tokens) with C(ignore_eos) and C(min_tokens)).
    type: int
    default: 128
  prompt_fraction:
    description: Prompt length as a fraction of (max_model_len - output_tokens), minus a 256-token margin.
    type: float
    default: 1.0
  max_prompt_tokens:
    description: Upper bound of the prompt length (tokens).
    type: int
  ttft_limit_s:
    description: p99 TTFT above which a step counts as saturated (0 = no TTFT criterion).
    type: float
    default: 0
  plateau_gain:
    description: Relative throughput gain below which a higher concurrency counts as a plateau.
    type: float
    default: 0.05
  stop_on_saturation:
    description: Stop one level past the first saturated step.
    type: bool
    default: true
  log_text:
    description: Container start-up log of the head; its KV-cache line is used when the metrics lack the labels.
    type: str
  restarted:
    description: Whether the server was restarted for this point (recorded only).
    type: bool
    default: false
author:
  - gpufleet maintainers (@gpufleet)
attributes:
  check_mode:
    details: The sweep's requests change nothing, so check mode runs the whole sweep; never reports a change.
"""

EXAMPLES = r"""
- name: Sweep concurrency at the running max-model-len
  gpufleet.kimi_k3.vllm_capacity_step:
    base_url: "http://10.0.0.11:8000/v1"
    ttft_limit_s: 30
    output_tokens: 256
  delegate_to: localhost
  register: step
"""

RETURN = r"""
sweep:
  description: The sweep.
  returned: always
  type: dict
  contains:
    max_model_len: {description: Served max_model_len., type: int}
    version: {description: vLLM version (/version)., type: str}
    kv:
      description: kv_cache_size_tokens, kv_cache_max_concurrency, source (metrics|log|null), from_metrics,
        from_log (both raw).
      type: dict
    theoretical_max_concurrency: {description: KV tokens / max_model_len (or the server's figure)., type: float}
    levels: {description: Concurrency levels planned., type: list, elements: int}
    prompt_tokens: {description: Target prompt length (tokens)., type: int}
    steps:
      description: Per step concurrency, requests, failed_requests, wall_s, throughput_tok_s, request_throughput_rps,
        output_tokens, prompt_tokens, ttft_s/itl_s/tpot_s/e2e_s (n, mean, p50, p90, p99, min, max),
        client_queue_s (same statistics - how long requests waited in this client before being sent; not part of
        the TTFT, a large value means the client, not the server, limited the step), num_requests_waiting_max,
        num_requests_running_max, kv_cache_usage_perc_max, preemptions, client_processes (client processes the
        step's streams were spread over, see the description), server_ttft_mean_s, errors, saturation (list of reasons; empty = not saturated).
      type: list
      elements: dict
    point:
      description: The curve point - max_model_len, restarted, kv_cache_size_tokens, theoretical_max_concurrency,
        measured_max_concurrency, peak_throughput_tok_s, kv_cache_usage_perc_peak, steps.
      type: dict
    errors: {description: Problems reading the server., type: list, elements: str}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.capacity import curve as capacity_curve
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.capacity import runner as capacity_runner
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import endpoint_args

ARGUMENT_SPEC = endpoint_args.argument_spec(
    max_model_len=dict(type="int"),
    concurrency_levels=dict(type="list", elements="int"),
    max_concurrency=dict(type="int", default=64),
    requests_per_level=dict(type="float", default=2),
    output_tokens=dict(type="int", default=128, no_log=False),
    prompt_fraction=dict(type="float", default=1.0),
    max_prompt_tokens=dict(type="int", no_log=False),
    ttft_limit_s=dict(type="float", default=0),
    plateau_gain=dict(type="float", default=0.05),
    stop_on_saturation=dict(type="bool", default=True),
    log_text=dict(type="str"),
    restarted=dict(type="bool", default=False),
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = endpoint_args.endpoint_params(module, "capacity")
    sweep = capacity_runner.run_sweep(p)
    if not sweep["steps"]:
        module.fail_json(msg="capacity sweep could not run: %s" % "; ".join(sweep["errors"]), sweep=sweep)
    dead = capacity_curve.dead_levels(sweep["steps"])
    if dead:
        module.fail_json(msg="capacity sweep at max_model_len %s against %s: the server answered no request at %s. "
                             "It stopped serving: status.yml names the node that failed and its container log says why."
                         % (sweep.get("max_model_len"), p["base_url"], "; ".join(dead)), sweep=sweep)
    module.exit_json(changed=False, sweep=sweep)


if __name__ == "__main__":
    main()
