"""The smoke run against the in-test fake server (test_smoke_fake.FakeVLLM)."""
import json

import pytest

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import finalise as smoke_finalise
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import report as smoke_report
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import runner as sr

from tests.unit.plugins.module_utils.smoke.test_smoke_fake import FakeVLLM


def params(base_url, **kw):
    p = {"base_url": base_url, "model": None, "api_key": None, "groups": list(sr.QUICK_GROUPS), "max_tokens": 256,
         "reasoning_effort": "low", "extra_body": None, "timeout": 10.0, "concurrency": 4,
         "long_context_tokens": 4000, "tool_call_retries": 2, "tool_call_rounds": 1, "tool_choice": "auto",
         "image": None, "image_expected_tokens": None, "metrics_urls": None, "metrics_interval": 0.05,
         "reproduction": None,
         "fail_policy": {"fail_on_group_failure": True, "min_tool_call_success_rate": 0.9}}
    p.update(kw)
    return p


def test_all_groups_ok_against_healthy_server():
    with FakeVLLM(ttft=0.03, itl=0.004, tokens=6) as f:
        facts = sr.run_smoke(params(f.base_url))
    g = facts["groups"]
    assert set(g) == set(sr.QUICK_GROUPS)
    assert {k: v["status"] for k, v in g.items()} == {k: "ok" for k in sr.QUICK_GROUPS}, g
    assert facts["model"] == "moonshotai/Kimi-K3"
    assert facts["policy"] == {"passed": True, "violations": []}
    # TTFT counts from the request to the first reasoning delta, after the role-only chunk
    assert 0.03 <= g["text"]["ttft_s"]["p50"] < 0.3
    assert g["text"]["requests"] == 4
    # checkable prompts: the answer is one word (the number or the code) after two reasoning tokens
    assert g["text"]["output_tokens"] == 4 * (1 + 2)
    assert g["text"]["itl_s"]["n"] == 4 * 2
    assert g["text"]["answers"] == {"judged": True, "right": 4, "n": 4, "problems": []}
    assert g["vision"]["ocr"]["ok"] is True
    assert g["long_context"]["needle_found"] is True
    tc = g["tool_calling"]["tool_calls"]
    assert tc["cases"] == 12 and tc["attempt_success_rate"] == 1.0
    assert tc["first_attempt"] == {"k": 12, "n": 12, "rate": 1.0, "ci95": [0.757506, 1.0]}
    assert tc["by_mode"]["stream"]["cases"] == 6
    s = facts["server"]
    assert s["version"] == "0.28.0" and s["max_model_len"] == 32768
    assert s["kv_cache_size_tokens"] == 262144 and s["kv_cache_max_concurrency"] == 8.0
    assert s["window"]["generation_tokens"] > 0
    assert s["preemptions"] == 0


def test_requests_carry_measurement_settings():
    with FakeVLLM() as f:
        sr.run_smoke(params(f.base_url, groups=["text"], concurrency=1))
        body = f.requests[0]
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["reasoning_effort"] == "low"
    assert body["max_tokens"] == 256


def test_server_error_is_a_failed_group_not_a_crash():
    with FakeVLLM(status=500) as f:
        facts = sr.run_smoke(params(f.base_url, groups=["text", "tool_calling"], tool_call_retries=1))
    assert facts["groups"]["text"]["status"] == "failed"
    assert "HTTP 500" in facts["groups"]["text"]["error"]
    assert "engine exploded" in facts["groups"]["text"]["error"]
    tc = facts["groups"]["tool_calling"]
    assert tc["status"] == "failed" and tc["retries"] == {"error": 12}
    assert not facts["policy"]["passed"]


def test_unreachable_server_fails_groups():
    facts = sr.run_smoke(params("http://127.0.0.1:9/v1", groups=["text"], timeout=2.0))
    assert facts["groups"]["text"]["status"] == "failed"
    assert "no model" in facts["groups"]["text"]["error"]
    assert facts["server"]["errors"]


def test_unauthorised_without_key_and_ok_with_key():
    with FakeVLLM(api_key="s3cret") as f:
        bad = sr.run_smoke(params(f.base_url, groups=["text"], model="moonshotai/Kimi-K3"))
        good = sr.run_smoke(params(f.base_url, groups=["text"], api_key="s3cret"))
    assert "HTTP 401" in bad["groups"]["text"]["error"]
    assert good["groups"]["text"]["status"] == "ok"


@pytest.mark.parametrize("fault,cls", [
    ("no_call", "no_call"), ("invalid_json", "invalid_json"), ("schema_violation", "schema_violation"),
    ("unknown_tool", "unknown_tool"), ("leak", "leaked_control_tokens"), ("empty", "empty_arguments"),
])
def test_tool_faults_are_classified_and_retried(fault, cls):
    with FakeVLLM(tool_fault=fault) as f:
        facts = sr.run_smoke(params(f.base_url, groups=["tool_calling"], tool_call_retries=1, concurrency=2))
    tc = facts["groups"]["tool_calling"]
    assert tc["status"] == "failed"
    assert tc["tool_calls"]["failures"] == {cls: 24}
    assert tc["retries"] == {cls: 12}
    assert tc["error"].startswith("12 of 12 tool case(s) still invalid after 1 retries; ")
    assert any(cls.split("_")[0] in v or "tool-call" in v for v in facts["policy"]["violations"])


def test_one_recovered_tool_hiccup_passes_with_the_retry_counted():
    with FakeVLLM(tool_fault="schema_violation") as f:
        f.tool_fault_times = 1
        facts = sr.run_smoke(params(f.base_url, groups=["tool_calling"], tool_call_retries=2))
    tc = facts["groups"]["tool_calling"]
    assert tc["status"] == "ok"
    assert tc["retries"] == {"schema_violation": 1}
    assert tc["tool_calls"]["first_attempt"] == {"k": 11, "n": 12, "rate": 0.916667, "ci95": [0.64612, 0.985135]}
    assert tc["tool_calls"]["attempt_success_rate"] == 0.9231  # 12 of 13 attempts: the old gate's figure
    assert facts["policy"] == {"passed": True, "violations": []}


def test_tool_hiccups_above_the_threshold_fail_the_rate_gate():
    with FakeVLLM(tool_fault="schema_violation") as f:
        f.tool_fault_times = 5
        facts = sr.run_smoke(params(f.base_url, groups=["tool_calling"], tool_call_retries=2))
    tc = facts["groups"]["tool_calling"]
    assert tc["status"] == "ok" and tc["tool_calls"]["first_attempt"]["k"] == 7
    assert facts["policy"]["violations"] == [
        "group tool_calling: first-attempt tool-call success 7/12 (0.583333, 95 % Wilson interval 0.319511..0.80674)"
        ": even the upper bound is below 0.9"]


def test_vision_fails_when_answer_misses_tokens():
    with FakeVLLM() as f:
        facts = sr.run_smoke(params(f.base_url, groups=["vision"], image_expected_tokens=["99.99"]))
    v = facts["groups"]["vision"]
    assert v["status"] == "failed" and v["ocr"]["missing"] == ["99.99"]


def test_long_context_clamped_to_max_model_len():
    with FakeVLLM(max_model_len=8192) as f:
        facts = sr.run_smoke(params(f.base_url, groups=["long_context"], long_context_tokens=100000,
                                    max_tokens=1024))
        prompt = f.requests[0]["messages"][0]["content"]
    lc = facts["groups"]["long_context"]
    assert lc["target_prompt_tokens"] == 8192 - 1024 - 512
    assert len(prompt) < 8192 * 6


def test_long_context_prompt_is_sized_by_the_servers_token_count():
    # the fake counts len(json(messages)) / 4 tokens: ~25 per filler repetition, not the rough estimate's 22
    with FakeVLLM(max_model_len=8192) as f:
        facts = sr.run_smoke(params(f.base_url, groups=["long_context"], long_context_tokens=4000, max_tokens=256))
        probes, final = f.requests[:2], f.requests[-1]
    assert [p["max_tokens"] for p in probes] == [1, 1]
    assert [p["messages"][0]["content"].count(sr.FILLER) for p in probes] == list(sr.PROBE_REPS)
    counted = len(json.dumps(final["messages"])) // 4
    assert abs(counted - 4000) <= 26, counted  # within one repetition of the target
    assert facts["groups"]["long_context"]["status"] == "ok"


def test_tool_call_modes_limit_the_requests_sent():
    with FakeVLLM() as f:
        facts = sr.run_smoke(params(f.base_url, groups=["tool_calling"], tool_call_modes=["non_stream"]))
        streamed = [r for r in f.requests if r.get("stream")]
    tc = facts["groups"]["tool_calling"]["tool_calls"]
    # one mode: the six prompts twice, still twelve cases
    assert tc["by_mode"]["non_stream"]["cases"] == 12 and tc["by_mode"]["stream"]["cases"] == 0
    assert streamed == []


def test_log_probe_and_reproduction_inputs_flow_into_facts():
    logs = {"tray01": "INFO ok\nWARNING 08-14 x [tool.py:1] Error extracting K3 tool calls.\n"
                      "INFO GPU KV cache size: 1,234,567 tokens, Maximum concurrency for 1,048,576 tokens per "
                      "request: 1.18x\n",
            "tray02": ["ERROR boom", "INFO fine"]}
    probes = {"tray01": {"gpus": [{"index": 0, "memory_used_mib": 100, "memory_total_mib": 1000}] * 4}}
    with FakeVLLM() as f:
        run = sr.run_smoke(params(f.base_url, groups=["text"], reproduction={"image": "vllm/vllm-openai@sha256:"
                                                                             + "a" * 64}))
        sent = len(f.requests)
        facts = smoke_finalise.finalise(run, log_lines=logs, node_probes=probes,
                                        reproduction={"nodes": 2}, fail_policy={"fail_on_log_errors": True})
        assert len(f.requests) == sent  # the finalising step sends nothing
    assert facts["log_findings"]["tray01"]["signatures"] == {"k3_tool_parser_error": 1}
    assert facts["log_findings"]["tray02"]["errors"] == 1
    assert facts["server"]["kv_from_log"]["tray01"]["kv_cache_size_tokens"] == 1234567
    assert facts["gpu_memory"]["tray01"]["used_frac"] == 0.1
    assert facts["reproduction"]["vllm_version"] == "0.28.0" and facts["reproduction"]["nodes"] == 2
    assert facts["reproduction"]["image"].endswith("a" * 64)
    assert facts["policy"]["violations"] == ["1 error line(s) in the container log of tray02"]
    assert facts["groups"] == run["groups"]
    md = smoke_report.render_markdown(facts, facts["policy"]["violations"])
    assert "| text | ok |" in md and "FAIL" in md


def test_the_run_itself_cannot_pass_the_log_policy():
    """The logs of the window exist only after the requests: vllm_smoke alone has none to count."""
    with FakeVLLM() as f:
        facts = sr.run_smoke(params(f.base_url, groups=["text"], concurrency=1,
                                    fail_policy={"fail_on_log_errors": True}))
    assert facts["log_findings"] == {}
    assert facts["policy"]["violations"] == [
        "no container log was read, so its error lines could not be counted (fail_on_log_errors)"]


def test_report_says_when_answers_are_not_judged():
    with FakeVLLM() as f:
        judged = sr.run_smoke(params(f.base_url, groups=["text"]))
        not_judged = sr.run_smoke(params(f.base_url, groups=["text"], judge_accuracy=False))
    assert "NOT judged for accuracy" not in smoke_report.render_markdown(judged)
    md = smoke_report.render_markdown(not_judged)
    assert "- answers: NOT judged for accuracy - the plan marks this model's weights as not meaningful" in md
