"""The full profile's gates and report sections: every criterion at and across its boundary, exact messages."""
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import gates as g
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import policy as smoke_policy
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import report as smoke_report
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import verifier as ver


def rate(k, n):
    return ver.rate_with_interval(k, n)


def correctness(acc=(32, 32), agr=(32, 32), needle_ok=True, judged=True):
    needle = {"ok": needle_ok, "found": needle_ok, "fraction": 0.9003,
              "error": None if needle_ok else "needle K3-7000 missed (answer: 'x')"}
    target = {"accuracy": rate(*acc), "needle": needle, "wrong": [] if acc[0] == acc[1] else ["arith-1", "fact-2"],
              "requests": acc[1], "failed_requests": 0, "wall_s": 1.0}
    backend = dict(target, agreement=rate(*agr))
    c = {"judged": judged, "note": None if judged else "accuracy not judged: ...", "concurrency": 32, "prompts": 13,
         "targets": {"endpoint": target, "http://b1:8000": backend} if judged else {"endpoint": {"requests": 32}}}
    return {"status": "ok", "correctness": c}


def tool_verifier(schema=(90, 90), f1=1.0, no_call=(0, 106), comparison=None):
    """``schema``: (valid calls, responses that ended in tool calls)."""
    return {"status": "ok", "tool_verifier": {
        "cases": 106, "attempts": 106, "schema_accuracy": round(schema[0] / float(schema[1]), 6) if schema[1] else None,
        "tool_call_f1": f1, "tool_call_precision": 1.0,
        "tool_call_recall": 1.0, "trigger": {"tp": 90, "fp": 0, "fn": 0, "tn": 16},
        "k2vv": {"successful_tool_call_count": schema[0], "finish_tool_calls": schema[1]},
        "retry_rates": {"first_attempt": rate(106, 106), "after_retry": rate(106, 106)},
        "failure_rates": {"no_call": rate(*no_call), "schema_violation": rate(0, 106)},
        "comparison": comparison or {}}}


def facts(**groups):
    return {"groups": groups}


def test_healthy_full_profile_passes():
    f = facts(correctness=correctness(), api={"status": "ok", "api": {"checks": {}, "errors": []}},
              tool_verifier=tool_verifier())
    f["pd"] = {"instances": {}, "errors": []}
    assert smoke_policy.evaluate_policy(f, {}) == []


def test_correctness_gate_messages_and_boundaries():
    assert smoke_policy.evaluate_policy(facts(correctness=correctness(acc=(31, 32))), {"min_accuracy": 0.96875}) == []
    v = smoke_policy.evaluate_policy(facts(correctness=correctness(acc=(31, 32), agr=(30, 32), needle_ok=False)), {})
    assert v == [
        "correctness: endpoint answered 31/32 checkable prompts right (0.96875 < 1.0; wrong: arith-1, fact-2)",
        "correctness: endpoint: needle K3-7000 missed (answer: 'x')",
        "correctness: http://b1:8000 answered 31/32 checkable prompts right (0.96875 < 1.0; wrong: arith-1, fact-2)",
        "correctness: http://b1:8000: needle K3-7000 missed (answer: 'x')",
        "correctness: http://b1:8000 agreed with the endpoint on 30/32 answers (0.9375 < 1.0)"]
    assert g._correctness(facts(correctness=correctness(agr=(30, 32))), {"min_agreement": 0.9375}) == []


def test_not_judged_correctness_is_not_gated():
    assert g._correctness(facts(correctness=correctness(acc=(0, 32), judged=False)), {}) == []


def test_api_and_pd_gates():
    f = facts(api={"status": "ok", "api": {"checks": {}, "errors": ["version@endpoint: /version reports 0.27.1"]}})
    f["pd"] = {"instances": {}, "errors": ["http://d:8000/metrics: 3 KV transfer failure(s) in the window"]}
    assert smoke_policy.evaluate_policy(f, {}) == ["api: version@endpoint: /version reports 0.27.1",
                                                   "pd: http://d:8000/metrics: 3 KV transfer failure(s) in the window"]
    assert smoke_policy.evaluate_policy(f, {"fail_on_api_behaviour": False, "fail_on_pd": False}) == []


def test_tool_verifier_gates_default_to_the_verifier_pass_marks():
    assert g._tool_verifier(facts(tool_verifier=tool_verifier(schema=(90, 90), f1=0.73)), {}) == []
    # at the official API's 1.0 any invalid call fails: the upper bound of 89/90 is below 1
    assert g._tool_verifier(facts(tool_verifier=tool_verifier(schema=(89, 90), f1=0.7299)), {}) == [
        "tool_verifier: schema_accuracy 0.988889 (89/90, 95 % Wilson interval 0.939716..0.998036) below 1.0",
        "tool_verifier: tool_call_f1 0.7299 below 0.73"]
    assert g._tool_verifier(facts(tool_verifier=tool_verifier(schema=(0, 0))), {"min_tool_call_f1": 0}) == [
        "tool_verifier: schema_accuracy None (0/0, 95 % Wilson interval None..None) below 1.0"]


def test_schema_accuracy_fails_only_when_the_upper_bound_is_below_the_recipe_pass_mark():
    policy = {"min_schema_accuracy": 0.95}
    # 84/90 = 0.933 is below the mark, but 90 responses do not show it: the upper bound is 0.969091
    assert g._tool_verifier(facts(tool_verifier=tool_verifier(schema=(84, 90))), policy) == []
    assert g._tool_verifier(facts(tool_verifier=tool_verifier(schema=(79, 90))), policy) == [
        "tool_verifier: schema_accuracy 0.877778 (79/90, 95 % Wilson interval 0.794263..0.930364) below 0.95"]


def test_failure_rate_and_regression_gates():
    f = facts(tool_verifier=tool_verifier(no_call=(9, 106), comparison={
        "tool_call_f1": {"before": 0.95, "after": 0.9, "delta": -0.05},
        "schema_accuracy": {"before": None, "after": 1.0, "delta": None}}))
    assert g._tool_verifier(f, {"max_tool_call_failure_rate": -1, "max_regression": -1}) == []
    assert g._tool_verifier(f, {"max_tool_call_failure_rate": 0.1, "max_regression": 0.05}) == []
    assert g._tool_verifier(f, {"max_tool_call_failure_rate": 0.08, "max_regression": 0.04}) == [
        "tool_verifier: no_call in 9/106 attempts (0.084906, 95 % CI 0.045312..0.153534) above 0.08",
        "tool_verifier: tool_call_f1 fell from 0.95 to 0.9 (more than 0.04)"]


def test_report_sections():
    f = facts(correctness=correctness(acc=(31, 32)), tool_verifier=tool_verifier(comparison={
        "tool_call_f1": {"before": 0.95, "after": 1.0, "delta": 0.05}}),
        api={"status": "ok", "api": {"checks": {"invalid_parameter": {"ok": False, "error": "HTTP 500"}},
                                     "errors": []}})
    f["pd"] = {"instances": {"http://d/metrics": {"recompute_fraction": 0.001, "basis": "vllm:prompt_tokens_by_source",
                                                  "kv_transfer_failures": {}}}, "errors": []}
    md = smoke_report.render_markdown(dict(f, server={}), [])
    assert "## Correctness" in md and "## API behaviour" in md and "## Prefill/decode" in md
    assert "| endpoint | 31/32 = 0.9688 (95 % CI 0.8426..0.9945) | - | found | 0.9003 | arith-1, fact-2 |" in md
    assert "| invalid_parameter | FAIL | HTTP 500 |" in md
    assert "| http://d/metrics | 0.001 | vllm:prompt_tokens_by_source | - |" in md
    assert "- schema_accuracy (K2-Vendor-Verifier): 1.0 = 90 valid / 90 responses with finish_reason tool_calls" in md
    assert "| tool_call_f1 | 0.95 | 1.0 | 0.05 |" in md
    not_judged = smoke_report.render_markdown(dict(facts(correctness=correctness(judged=False)), server={}))
    assert "- accuracy not judged: ..." in not_judged


def test_decode_backends_are_judged_through_the_router_only():
    from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import groups as smoke_groups
    backends = [{"url": "http://p:8001", "kind": "prefill"}, {"url": "http://d:8002", "kind": "decode"},
                {"url": "http://w:8000", "kind": "worker"}]
    assert [b["url"] for b in smoke_groups.direct_backends(backends)] == ["http://p:8001", "http://w:8000"]
    from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import runner as smoke_runner
    assert smoke_runner.decode_metrics_urls(backends) == ["http://d:8002/metrics"]
    assert smoke_runner.effective_groups(["text"], "full") == ["text", "correctness", "api", "tool_verifier"]
    assert smoke_runner.effective_groups(["tool_calling", "text"], "quick") == ["text", "tool_calling"]
