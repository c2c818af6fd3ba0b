#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_smoke
short_description: Smoke-test a Kimi-K3 vLLM endpoint (vision, text, long context, tool calling)
version_added: "0.1.0"
description:
  - Runs on the controller (C(delegate_to=localhost)) with the openai SDK and sends read-only chat requests to a
    vLLM OpenAI-compatible endpoint. Facts are recorded on the inventory host the task runs for (the head).
  - Groups C(vision) (OCR of a receipt whose text is known), C(text) (C(concurrency) parallel streams of checkable
    prompts, numbers and facts, each answer judged by its normalised value), C(long_context) (a prompt of about
    O(long_context_tokens) tokens, clamped to the served max_model_len; the needle must be in the answer) and
    C(tool_calling) (12 cases over two tools with JSON Schemas, sent at once; every call validated with jsonschema
    Draft 2020-12, both streaming and non-streaming, retried up to O(tool_call_retries) times, failures counted per
    class; a case still invalid after its retries fails the group).
  - Every text, long-context and vision response is also checked for a think marker in C(content), the served name
    it carries (against O(expected_served_name)) and a plausible C(usage.prompt_tokens); any finding fails the group
    with the prompt and the answer in its C(error). With O(judge_accuracy=false) answers and needle are not judged.
  - Streaming requests use C(stream_options.include_usage). TTFT is measured to the first chunk carrying content
    or reasoning text (C(reasoning), falling back to C(reasoning_content)); ITL is the gap between token-carrying
    chunks. The SDK's own retries are off (C(max_retries=0)).
  - Reads C(/version), C(/v1/models) and the Prometheus C(/metrics) of every O(metrics_urls) before, during and
    after the window (KV cache size and max concurrency from C(vllm:cache_config_info), KV usage, queue,
    preemptions).
  - Server errors, timeouts and HTTP 4xx/5xx make the group C(failed) with the error text; the module itself does
    not fail for them. Apply O(fail_policy) and check RV(ansible_facts.vllm_smoke.policy.passed) to fail a play.
  - O(profile=full) adds the groups C(correctness) (checkable prompts at temperature 0, O(correctness_concurrency)
    at once, judged by the normalised answer; a needle at 90 % of the effective context; through O(base_url) and
    directly against every O(backends) entry, with per-target accuracy and the agreement of each backend with the
    endpoint), C(api) (reasoning/content split, served name, C(usage.prompt_tokens), HTTP 400 for an invalid
    parameter, C(/version)) and C(tool_verifier) (53 tool cases streaming and non-streaming; K2-Vendor-Verifier's
    C(schema_accuracy) and C(tool_call_f1), failure rate per class with a 95 % Wilson interval, first-attempt and
    after-retry rates). With C(decode) entries in O(backends), the decode instances' C(/metrics) before and after
    the run give the C(pd) verdict (recomputed prefill, KV transfer failures). docs/smoke.md has the definitions.
requirements:
  - jsonschema >= 4.18
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.kimi_k3.attributes
  - gpufleet.kimi_k3.endpoint_client
options:
  groups:
    description: Groups to run.
    type: list
    elements: str
    choices: [vision, text, long_context, tool_calling, correctness, api, tool_verifier]
    default: [vision, text, long_context, tool_calling]
  profile:
    description: C(quick) runs O(groups); C(full) adds C(correctness), C(api) and C(tool_verifier).
    type: str
    choices: [quick, full]
    default: quick
  correctness_concurrency:
    description: Requests the C(correctness) group sends at once per target, and the parallel cases of the
      C(tool_verifier) group.
    type: int
    default: 32
  correctness_seed:
    description: Seed of the correctness prompts (the same seed gives the same prompts, so runs compare).
    type: int
    default: 0
  backends:
    description: The endpoints behind O(base_url) (a router's backends) as dicts with C(url) (API root) and
      C(kind) (C(worker), C(prefill) or C(decode)). The C(correctness) group runs against each directly; the
      C(decode) ones give the C(pd) verdict.
    type: list
    elements: dict
    default: []
  judge_accuracy:
    description: False for a model whose answers mean nothing (random rehearsal weights, from the plan's
      C(judge_accuracy)); the C(correctness) group then reports "accuracy not judged" and its gates are off.
    type: bool
    default: true
  expected_served_name:
    description: The plan's served model name (a string, or a list whose first entry counts), compared with
      C(/v1/models) by the C(api) group and with every quick-profile response's C(model).
    type: raw
  expected_version:
    description: The plan's vLLM release, compared with C(/version) by the C(api) group.
    type: str
  reasoning_key:
    description: The delta key the release streams reasoning under.
    type: str
    choices: [reasoning, reasoning_content]
    default: reasoning
  needle_token_budget:
    description: Cap of the effective context the needle is placed in (0 = max_model_len itself).
    type: int
    default: 131072
  previous_tool_figures:
    description: The C(tool_verifier) figures of an earlier run (C(schema_accuracy), C(tool_call_f1),
      C(first_attempt_success), C(after_retry_success)) to compare with, e.g. before an upgrade.
    type: dict
  pd_limits:
    description: C(max_recompute_fraction) (default 0.05) and C(max_kv_transfer_failures) (default 0) of the
      C(pd) verdict.
    type: dict
  max_tokens:
    description: C(max_tokens) of every request. K3 reasons by default, so keep it generous.
    type: int
    default: 2048
  concurrency:
    description: Parallel requests of the C(text) group (the C(tool_calling) group sends all its cases at once). Above 128,
      the C(text) group's streams are spread over ceil(concurrency / 128) client processes (started and warmed up
      before the clock starts), so the client's own CPU does not cap the load.
    type: int
    default: 4
  long_context_tokens:
    description: Approximate prompt length of the C(long_context) group in tokens (clamped to max_model_len).
    type: int
    default: 32000
  tool_call_retries:
    description: Re-samples of a failed tool turn (application level; the SDK does not retry).
    type: int
    default: 2
  tool_call_rounds:
    description: How many times the set of at least 12 tool cases (6 prompts x streaming/non-streaming, or twice in the
      one mode of O(tool_call_modes)) is sent; all cases go at once.
    type: int
    default: 1
  tool_choice:
    description: C(tool_choice) of tool requests. K3 refuses a named tool choice without strict tool calling.
    type: str
    choices: [auto, required]
    default: auto
  tool_call_modes:
    description: Which of streaming (C(stream)) and non-streaming (C(non_stream)) requests the C(tool_calling) group
      sends.
    type: list
    elements: str
    choices: [stream, non_stream]
    default: [stream, non_stream]
  image:
    description:
      - Image for the vision group. Default is the receipt shipped in the collection (PNG; its text is also in a
        C(tEXt) chunk C(kimi-sim-ocr) that the rehearsal stand-in server reads).
      - An C(http(s)://) or C(data:) URL, or a file path on the controller.
    type: str
  image_expected_tokens:
    description: Strings the OCR answer must contain (normalised comparison). Default for the shipped sample is
      the shop name, receipt number, subtotal, tax and total; a custom O(image) without them is refused (the
      C(vision) group fails without sending a request).
    type: list
    elements: str
  reproduction:
    description: Facts needed to reproduce the run (image digest, driver, CUDA/ROCm, GPU model, interconnect,
      V2 runner, Rust frontend). Passed through; the vLLM version, model and max_model_len are added.
    type: dict
  fail_policy:
    description:
      - Evaluated into RV(ansible_facts.vllm_smoke.policy). Keys C(fail_on_group_failure) (bool, default true),
        C(min_tool_call_success_rate) (0..1; fails when the upper bound of the first-attempt rate's 95 % Wilson
        interval is below), C(max_ttft_s) (0 = off), C(fail_on_log_errors) (bool), C(fail_on_preemptions) (bool);
        for the full profile C(min_accuracy), C(min_agreement) (0..1, default 1.0), C(fail_on_api_behaviour),
        C(fail_on_pd) (bool, default true), C(min_schema_accuracy) (default 1.0; the Wilson upper bound of
        C(schema_accuracy) must reach it), C(min_tool_call_f1) (default 0.73), C(max_tool_call_failure_rate) and C(max_regression) (off when absent or
        negative). The module never fails because of it.
      - The container logs of the smoke window exist only after the requests, so this module has none;
        C(fail_on_log_errors) is violated here. Add the logs with M(gpufleet.kimi_k3.vllm_smoke_finalise), which
        evaluates the policy again (the smoke role does).
    type: dict
notes:
  - Facts are namespaced as C(ansible_facts['vllm_smoke']); read them through C(ansible_facts), not as injected
    variables.
author:
  - gpufleet maintainers (@gpufleet)
attributes:
  check_mode:
    details: Requests are read-only; they are sent in check mode too. Never reports a change.
"""

EXAMPLES = r"""
- name: Smoke test the endpoint
  gpufleet.kimi_k3.vllm_smoke:
    base_url: "http://10.0.0.11:8000/v1"
    api_key: "{{ kimi_k3_api_key | default(omit) }}"
    metrics_urls: ["http://10.0.0.11:8000/metrics", "http://10.0.0.12:8000/metrics"]
    fail_policy: {fail_on_group_failure: true, min_tool_call_success_rate: 0.9}
  delegate_to: localhost
  register: smoke

- name: Fail on policy violations
  ansible.builtin.fail:
    msg: "{{ ansible_facts['vllm_smoke']['policy']['violations'] }}"
  when: not ansible_facts['vllm_smoke']['policy']['passed']
"""

RETURN = r"""
report_markdown:
  description: The Markdown report (summary table, tool-call classes, server window, GPU memory, logs, policy).
  returned: always
  type: str
summary_table:
  description: Plain-text summary table, one row per group.
  returned: always
  type: str
ansible_facts:
  description: Facts recorded on the host.
  returned: always
  type: complex
  contains:
    vllm_smoke:
      description: Smoke results.
      type: dict
      contains:
        base_url: {description: API root used (ending in /v1)., type: str, sample: "http://127.0.0.11:8000/v1"}
        model: {description: Model name sent., type: str, sample: moonshotai/Kimi-K3}
        started_at: {description: UTC start time., type: str}
        duration_s: {description: Wall time of the whole smoke., type: float}
        groups:
          description:
            - Per group (C(vision), C(text), C(long_context), C(tool_calling)) a dict with C(status) (ok|failed),
              C(error) (text or null), C(ttft_s), C(ttft_content_s), C(itl_s), C(tpot_s), C(e2e_s) (each a dict of
              n/mean/p50/p90/p99/min/max in seconds), C(output_tokens), C(prompt_tokens) (usage totals),
              C(tokens_per_s) (output tokens / group wall time), C(wall_s), C(requests), C(failed_requests),
              C(retries) (retries per failure class).
            - C(vision) adds C(ocr) (ok, missing, found); C(text) adds C(answers) (C(judged), C(right), C(n),
              C(problems)); C(long_context) adds C(target_prompt_tokens), C(needle_judged) and C(needle_found);
              C(tool_calling) adds C(tool_calls) (cases, attempts, attempt/first-attempt/final success rates,
              C(first_attempt) as C(k)/C(n)/C(rate)/C(ci95), C(failures) and C(retries) per class - no_call,
              invalid_json, schema_violation, unknown_tool, leaked_control_tokens, empty_arguments, error - and
              C(by_mode) stream/non_stream).
            - C(correctness) adds C(correctness) (C(judged), C(note), C(targets) - per target C(accuracy) and
              C(agreement) as C(k)/C(n)/C(rate)/C(ci95), C(needle), C(wrong)); C(api) adds C(api) (C(checks) per
              check C(ok)/C(error), C(errors)); C(tool_verifier) adds C(tool_verifier) (C(schema_accuracy),
              C(tool_call_f1), C(k2vv) summary, C(trigger) counts, C(failure_rates) per class with C(ci95),
              C(retry_rates), C(by_mode), C(comparison)).
          type: dict
          sample: {text: {status: ok, ttft_s: {mean: 0.21, p50: 0.2, p90: 0.25, p99: 0.3}, output_tokens: 812,
                          tokens_per_s: 96.1, itl_s: {mean: 0.02}, e2e_s: {mean: 8.4}, retries: {}, error: null}}
        server:
          description:
            - C(version) (/version), C(models) and C(max_model_len) (/v1/models), C(kv_cache_size_tokens) and
              C(kv_cache_max_concurrency) (sums over engines of the C(vllm:cache_config_info) labels; null when
              the build does not export them), C(num_gpu_blocks), C(block_size), C(cache_config) per engine,
              C(engines), C(kv_cache_usage_perc) (max over engines after the window), C(preemptions_total),
              C(preemptions) (during the window), C(window) (counter deltas, server-side mean TTFT/ITL/E2E/queue
              from histogram deltas, peaks of KV usage/queue/running sampled during the window),
              C(errors); M(gpufleet.kimi_k3.vllm_smoke_finalise) adds C(kv_from_log) (per host, from start-up log
              lines).
          type: dict
        pd:
          description: With decode O(backends) - per decode C(/metrics) C(instances) (C(recompute_fraction),
            C(basis), C(kv_transfer_failures)) and C(errors); null otherwise.
          type: dict
        gpu_memory:
          description: Empty here; M(gpufleet.kimi_k3.vllm_smoke_finalise) fills it from its node probes (per host GPU
            count, used/total MiB and used fraction).
          type: dict
        log_findings:
          description: Empty here; M(gpufleet.kimi_k3.vllm_smoke_finalise) fills it from the container logs (per host
            warning/error counts, tagged known signatures, the first matching lines; C(readable=false) and C(error)
            for a log that could not be read).
          type: dict
        reproduction:
          description: O(reproduction) plus vllm_version, model, max_model_len.
          type: dict
        settings:
          description: The request settings used (max_tokens, reasoning_effort, concurrency, ...).
          type: dict
        policy:
          description: Outcome of O(fail_policy).
          type: dict
          contains:
            passed:
              description: Whether every criterion of O(fail_policy) holds.
              type: bool
              sample: true
            violations:
              description: One line per violated criterion; empty when RV(ansible_facts.vllm_smoke.policy.passed).
              type: list
              elements: str
              sample: []
"""

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import endpoint_args
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import finalise as smoke_finalise
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import runner as smoke_runner
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import tool_validation

ARGUMENT_SPEC = endpoint_args.argument_spec(
    groups=dict(type="list", elements="str", choices=list(smoke_runner.GROUPS),
                default=list(smoke_runner.QUICK_GROUPS)),
    profile=dict(type="str", choices=list(smoke_runner.PROFILES), default="quick"),
    correctness_concurrency=dict(type="int", default=smoke_runner.CORRECTNESS_CONCURRENCY),
    correctness_seed=dict(type="int", default=0),
    backends=dict(type="list", elements="dict", default=[]),
    judge_accuracy=dict(type="bool", default=True),
    expected_served_name=dict(type="raw"),
    expected_version=dict(type="str"),
    reasoning_key=dict(type="str", choices=["reasoning", "reasoning_content"], default="reasoning", no_log=False),
    needle_token_budget=dict(type="int", default=131072, no_log=False),
    previous_tool_figures=dict(type="dict"),
    pd_limits=dict(type="dict"),
    max_tokens=dict(type="int", default=2048, no_log=False),
    concurrency=dict(type="int", default=4),
    long_context_tokens=dict(type="int", default=32000, no_log=False),
    tool_call_retries=dict(type="int", default=2),
    tool_call_rounds=dict(type="int", default=1),
    tool_choice=dict(type="str", choices=["auto", "required"], default="auto"),
    tool_call_modes=dict(type="list", elements="str", choices=["stream", "non_stream"],
                         default=["stream", "non_stream"]),
    image=dict(type="str"),
    image_expected_tokens=dict(type="list", elements="str", no_log=False),
    reproduction=dict(type="dict"),
    fail_policy=dict(type="dict"),
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    if not tool_validation.HAS_JSONSCHEMA:
        module.fail_json(msg=missing_required_lib("jsonschema", reason="to validate tool calls"))
    p = endpoint_args.endpoint_params(module, "smoke")
    if p["max_tokens"] < 1 or p["concurrency"] < 1 or p["tool_call_retries"] < 0 or p["correctness_concurrency"] < 1:
        module.fail_json(msg="max_tokens, concurrency and correctness_concurrency must be >= 1, "
                             "tool_call_retries >= 0")
    bad = [b for b in p["backends"] if not isinstance(b.get("url"), str) or not b["url"]]
    if bad:
        module.fail_json(msg="every backends entry needs a url (API root): %s" % bad)
    module.exit_json(**smoke_finalise.module_result(smoke_runner.run_smoke(p)))


if __name__ == "__main__":
    main()
