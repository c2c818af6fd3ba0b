"""API-behaviour and prefill/decode judgements: exact verdicts and messages on scripted answers and metrics."""
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import api
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import pd


def test_reasoning_split():
    ok = api.judge_reasoning_split("42", "thinking...", ["reasoning"], "reasoning")
    assert ok == {"ok": True, "error": None, "markers": [], "keys": ["reasoning"]}
    leak = api.judge_reasoning_split("thinking...</think>42", "", [], "reasoning")
    assert leak["ok"] is False and leak["error"] == (
        "reasoning markers </think> in content: the reasoning parser is not wired; "
        "no reasoning text although thinking is on")
    old_key = api.judge_reasoning_split("42", "t", ["reasoning_content"], "reasoning")
    assert old_key["error"] == "reasoning arrived under reasoning_content, the release's key is reasoning"
    both = api.judge_reasoning_split("42", "t", ["reasoning_content", "reasoning"], "reasoning_content")
    assert both["ok"] is True and both["keys"] == ["reasoning", "reasoning_content"]
    k3 = api.judge_reasoning_split("<|open|>think<|sep|>x", "t", ["reasoning"], "reasoning")
    assert k3["markers"] == ["<|open|>think"]


def test_served_name():
    assert api.judge_served_name(["moonshotai/Kimi-K3"], "moonshotai/Kimi-K3")["ok"] is True
    assert api.judge_served_name(["a", "kimi"], ["kimi", "alias"])["ok"] is True
    bad = api.judge_served_name(["other/model"], "moonshotai/Kimi-K3")
    assert bad["error"] == "/v1/models serves ['other/model'], the plan's name is moonshotai/Kimi-K3"
    assert api.judge_served_name([], None) == {"ok": True, "error": None, "expected": None, "served": []}


def test_prompt_tokens_plausibility_bounds():
    assert api.judge_prompt_tokens(520, 2000) == {"ok": True, "error": None, "prompt_tokens": 520,
                                                  "bounds": [250, 1845]}
    assert api.judge_prompt_tokens(249, 2000)["error"] == (
        "usage.prompt_tokens 249 for a 2000-character prompt is outside 250..1845")
    assert api.judge_prompt_tokens(1846, 2000)["ok"] is False
    assert api.judge_prompt_tokens(1845, 2000)["ok"] is True
    assert api.judge_prompt_tokens(None, 2000)["error"] == "no usage.prompt_tokens in the response"


def test_invalid_parameter_status():
    assert api.judge_invalid_parameter(400) == {"ok": True, "error": None, "status": 400}
    assert api.judge_invalid_parameter(500)["error"] == (
        "an invalid parameter was answered with HTTP 500 instead of 400: request validation fails inside the server")
    assert api.judge_invalid_parameter(200)["error"] == (
        "an invalid parameter was accepted (HTTP 200) instead of refused with 400")
    # the real vllm-router refuses it itself with 422
    assert api.judge_invalid_parameter(422) == {"ok": True, "error": None, "status": 422}
    assert api.judge_invalid_parameter(None)["ok"] is False


def test_version():
    assert api.release_of("v0.32.0+cpu") == "0.32.0"
    assert api.release_of(" 0.28.0 ") == "0.28.0"
    assert api.judge_version("0.32.0", "0.32.0+cpu")["ok"] is True
    assert api.judge_version("0.27.1", "0.28.0")["error"] == "/version reports 0.27.1, the plan deploys 0.28.0"
    assert api.judge_version(None, "0.28.0")["error"] == "/version did not answer"
    assert api.judge_version("0.28.0", None)["ok"] is True


def metrics(local=0.0, external=0.0, cached=0.0, failed=None, computed=None, prompts=None):
    lines = ["# TYPE vllm:prompt_tokens_by_source_total counter"]
    for eng in ("0", "1"):
        for src, val in (("local_compute", local), ("external_kv_transfer", external), ("local_cache_hit", cached)):
            lines.append('vllm:prompt_tokens_by_source_total{engine="%s",model_name="m",source="%s"} %s'
                         % (eng, src, val / 2))
    if failed is not None:
        lines += ["# TYPE vllm:nixl_num_failed_transfers_total counter",
                  'vllm:nixl_num_failed_transfers_total{engine="0",model_name="m"} %s' % failed]
    if computed is not None:
        lines += ["# TYPE vllm:request_prefill_kv_computed_tokens histogram",
                  'vllm:request_prefill_kv_computed_tokens_sum{engine="0",model_name="m"} %s' % computed,
                  'vllm:request_prefill_kv_computed_tokens_count{engine="0",model_name="m"} 1.0',
                  "# TYPE vllm:request_prompt_tokens histogram",
                  'vllm:request_prompt_tokens_sum{engine="0",model_name="m"} %s' % prompts,
                  'vllm:request_prompt_tokens_count{engine="0",model_name="m"} 1.0']
    return "\n".join(lines) + "\n"


def test_pd_counters_sum_over_engines():
    got = pd.pd_counters(metrics(local=10, external=5000, failed=2))
    assert got["by_source"] == {"local_compute": 10.0, "local_cache_hit": 0.0, "external_kv_transfer": 5000.0}
    assert got["vllm:nixl_num_failed_transfers"] == 2.0
    assert got["vllm:nixl_num_failed_notifications"] is None and got["kv_computed_sum"] is None
    assert pd.pd_counters("")["by_source"] is None


def test_decode_that_transferred_passes():
    before = {"d": pd.pd_counters(metrics(local=2, external=1000, failed=0))}
    after = {"d": pd.pd_counters(metrics(local=12, external=9000, failed=0))}
    out = pd.judge_pd(before, after)
    assert out["errors"] == []
    assert out["instances"]["d"] == {"recompute_fraction": 0.001248, "basis": "vllm:prompt_tokens_by_source",
                                     "kv_transfer_failures": {"nixl_num_failed_transfers": 0.0}, "errors": []}


def test_decode_that_recomputes_and_fails_transfers_is_caught():
    before = {"d": pd.pd_counters(metrics(local=0, external=0, failed=1))}
    after = {"d": pd.pd_counters(metrics(local=4000, external=0, failed=4))}
    out = pd.judge_pd(before, after)
    assert out["errors"] == [
        "d: decode prefilled 100.0 % of its prompt tokens itself (> 5.0 %): the prefill was recomputed, not "
        "transferred",
        "d: 3 KV transfer failure(s) in the window (nixl_num_failed_transfers 3)"]


def test_recompute_at_the_boundary_and_histogram_fallback():
    at = pd.judge_decode({"by_source": {"local_compute": 5.0, "local_cache_hit": 0.0, "external_kv_transfer": 95.0}})
    assert at["recompute_fraction"] == 0.05 and at["errors"] == []
    over = pd.judge_decode({"by_source": {"local_compute": 6.0, "local_cache_hit": 0.0,
                                          "external_kv_transfer": 94.0}})
    assert over["errors"][0].startswith("decode prefilled 6.0 %")
    hist = pd.judge_decode(pd.pd_delta({"by_source": None}, {"by_source": None, "kv_computed_sum": 300.0,
                                                             "prompt_tokens_sum": 3000.0}))
    assert (hist["recompute_fraction"], hist["basis"]) == (0.1, "vllm:request_prefill_kv_computed_tokens")
    idle = pd.judge_decode({"by_source": dict.fromkeys(pd.SOURCES, 0.0)})
    assert idle["errors"] == ["recompute not measurable: served no prompt token in the window"]
    blind = pd.judge_decode({"by_source": None, "kv_computed_sum": None, "prompt_tokens_sum": None})
    assert blind["errors"] == ["recompute not measurable: neither vllm:prompt_tokens_by_source nor "
                               "vllm:request_prefill_kv_computed_tokens is exported"]


def test_missing_scrape_is_an_error():
    snap = pd.pd_counters(metrics(external=10))
    assert pd.judge_pd({"d": snap}, {})["errors"] == ["d: no /metrics after the window"]
    assert pd.judge_pd({}, {"d": snap})["errors"] == ["d: no /metrics before the window"]


@given(st.text(max_size=300))
def test_pd_counters_refuse_garbage_cleanly(text):
    try:
        pd.pd_counters(text)
    except ValueError:
        pass  # prometheus_client's parser refuses malformed text with ValueError; the caller reports it


def test_pd_counters_exact_from_text_with_and_without_total_suffix():
    text = metrics(local=4, external=96, computed=300.0, prompts=3000.0) + "\n".join([
        "# TYPE vllm:nixl_num_failed_notifications counter",
        'vllm:nixl_num_failed_notifications{engine="0",model_name="m"} 2.0',
        'vllm:nixl_num_failed_notifications{engine="1",model_name="m"} 1.0',
        "# TYPE vllm:nixl_num_kv_expired_reqs_total counter",
        'vllm:nixl_num_kv_expired_reqs_total{engine="0",model_name="m"} 5.0',
        "# TYPE vllm:prompt_tokens_by_source_total counter",
        'vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="other"} 7.0']) + "\n"
    assert pd.pd_counters(text) == {
        "by_source": {"local_compute": 4.0, "local_cache_hit": 0.0, "external_kv_transfer": 96.0},
        "kv_computed_sum": 300.0, "prompt_tokens_sum": 3000.0, "vllm:nixl_num_failed_transfers": None,
        "vllm:nixl_num_failed_notifications": 3.0, "vllm:nixl_num_kv_expired_reqs": 5.0}


def test_pd_delta_exact():
    before = {"by_source": {"local_compute": 1.0, "local_cache_hit": 2.0, "external_kv_transfer": 3.0},
              "kv_computed_sum": 10.0, "prompt_tokens_sum": None, "vllm:nixl_num_failed_transfers": 1.0}
    after = {"by_source": {"local_compute": 2.0, "local_cache_hit": 2.0, "external_kv_transfer": 13.0},
             "kv_computed_sum": 15.0, "prompt_tokens_sum": 40.0, "vllm:nixl_num_failed_transfers": 4.0,
             "vllm:nixl_num_failed_notifications": None, "vllm:nixl_num_kv_expired_reqs": 0.0}
    assert pd.pd_delta(before, after) == {
        "by_source": {"local_compute": 1.0, "local_cache_hit": 0.0, "external_kv_transfer": 10.0},
        "kv_computed_sum": 5.0, "prompt_tokens_sum": 40.0, "vllm:nixl_num_failed_transfers": 3.0,
        "vllm:nixl_num_failed_notifications": None, "vllm:nixl_num_kv_expired_reqs": 0.0}
    assert pd.pd_delta({}, dict(after, by_source=None))["by_source"] is None
    assert pd.pd_delta({}, after)["by_source"] == after["by_source"]


def test_judge_decode_exact_and_limits():
    delta = {"by_source": {"local_compute": 10.0, "local_cache_hit": 0.0, "external_kv_transfer": 90.0},
             "vllm:nixl_num_failed_transfers": 1.0, "vllm:nixl_num_failed_notifications": 0.0}
    assert pd.judge_decode(delta, max_fraction=0.1, max_failures=1) == {
        "recompute_fraction": 0.1, "basis": "vllm:prompt_tokens_by_source",
        "kv_transfer_failures": {"nixl_num_failed_transfers": 1.0, "nixl_num_failed_notifications": 0.0},
        "errors": []}
    assert pd.judge_decode(delta, max_fraction=0.0999, max_failures=0)["errors"] == [
        "decode prefilled 10.0 % of its prompt tokens itself (> 10.0 %): the prefill was recomputed, not transferred",
        "1 KV transfer failure(s) in the window (nixl_num_failed_transfers 1)"]
    hist = pd.recompute_fraction({"by_source": None, "kv_computed_sum": 0.0, "prompt_tokens_sum": 500.0})
    assert hist == (0.0, "vllm:request_prefill_kv_computed_tokens")
    assert pd.recompute_fraction({"by_source": None, "kv_computed_sum": 5.0, "prompt_tokens_sum": 0.0})[0] is None
    out = pd.judge_pd({"a": {"by_source": None}, "b": {"by_source": None}}, {"b": {"by_source": None}}, 0.05, 0)
    assert out["errors"] == [
        "a: no /metrics after the window",
        "b: recompute not measurable: neither vllm:prompt_tokens_by_source nor "
        "vllm:request_prefill_kv_computed_tokens is exported"]
    assert sorted(out["instances"]) == ["b"]


def test_api_verdicts_exact():
    assert api.judge_invalid_parameter(None) == {
        "ok": False, "error": "no HTTP status for the invalid-parameter request (transport error)", "status": None}
    assert api.judge_invalid_parameter(499)["error"] == "an invalid parameter was answered with HTTP 499 instead of 400"
    assert api.judge_invalid_parameter(501)["error"].startswith("an invalid parameter was answered with HTTP 501")
    assert api.judge_invalid_parameter(299)["error"] == (
        "an invalid parameter was accepted (HTTP 299) instead of refused with 400")
    assert api.judge_invalid_parameter(300)["error"] == "an invalid parameter was answered with HTTP 300 instead of 400"
    assert api.judge_version("v0.28.0+cu129", "0.28.0") == {"ok": True, "error": None, "reported": "v0.28.0+cu129",
                                                            "planned": "0.28.0"}
    assert api.judge_version("0.28.1", "0.28.0") == {
        "ok": False, "error": "/version reports 0.28.1, the plan deploys 0.28.0", "reported": "0.28.1",
        "planned": "0.28.0"}
    assert api.judge_version(None, None) == {"ok": True, "error": None, "reported": None, "planned": None}
    assert api.judge_version(None, "0.28.0") == {"ok": False, "error": "/version did not answer", "reported": None,
                                                 "planned": "0.28.0"}
    assert [api.release_of(v) for v in ("V1.2.3", "1.2.3 (dev)", None, "", "v", "0.33.0+cpu.x")] == [
        "1.2.3", "1.2.3", "", "", "", "0.33.0"]
    assert api.judge_served_name(["x"], []) == {"ok": True, "error": None, "expected": None, "served": ["x"]}
    assert api.judge_served_name(None, "m") == {"ok": False, "error": "/v1/models serves [], the plan's name is m",
                                                "expected": "m", "served": []}
    assert api.judge_served_name(("m",), ("m", "n")) == {"ok": True, "error": None, "expected": "m", "served": ["m"]}
    assert api.judge_prompt_tokens(0, 2000) == {
        "ok": False, "error": "usage.prompt_tokens 0 for a 2000-character prompt is outside 250..1845",
        "prompt_tokens": 0, "bounds": [250, 1845]}
    assert api.judge_reasoning_split("ok", "", None, "reasoning") == {
        "ok": False, "error": "no reasoning text although thinking is on", "markers": [], "keys": []}
    assert api.judge_reasoning_split("ok", " \n", ["reasoning"], "reasoning")["ok"] is False
    assert api.judge_reasoning_split("ok", "t", None, "reasoning") == {
        "ok": False, "error": "reasoning arrived under no key, the release's key is reasoning", "markers": [],
        "keys": []}
    assert api.judge_reasoning_split("<think>x</think>42", "t", ["reasoning"], "reasoning")["error"] == (
        "reasoning markers </think>, <think> in content: the reasoning parser is not wired")
