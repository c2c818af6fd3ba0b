import pytest

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.capacity import curve as cap
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.capacity import runner as cr

from tests.unit.plugins.module_utils.smoke.test_smoke_fake import FakeVLLM


def test_curve_values_are_ints_sorted_and_unique():
    assert cap.curve_values([131072, "8192", 32768, 8192]) == [8192, 32768, 131072]
    assert cap.curve_values([]) == []


def test_curve_values_measure_the_running_value_first():
    # each relaunch reloads the weights: the served value is measured before any relaunch
    assert cap.curve_values([2048, 524288, "4096"], running=4096) == [4096, 2048, 524288]
    assert cap.curve_values([2048, 4096], running="2048") == [2048, 4096]
    # a running value that is not a point changes nothing
    assert cap.curve_values([2048, 4096], running=8192) == [2048, 4096]


@pytest.mark.parametrize("status,body,wanted,running,restart", [
    (200, {"data": [{"id": "m", "max_model_len": 32768}]}, 32768, 32768, False),
    (200, {"data": [{"id": "m", "max_model_len": "32768"}]}, "32768", 32768, False),
    (200, {"data": [{"id": "m", "max_model_len": 8192}]}, 32768, 8192, True),
    (200, {"data": []}, 8192, None, True),
    (200, {"data": [{"id": "m"}]}, 8192, None, True),
    (200, {"data": [{"id": "m", "max_model_len": "x"}]}, 8192, None, True),
    (503, {"data": [{"id": "m", "max_model_len": 8192}]}, 8192, None, True),
    (-1, None, 8192, None, True),
    (None, "not json", 8192, None, True),
])
def test_restart_decision(status, body, wanted, running, restart):
    d = cap.restart_decision(status, body, wanted)
    assert d["running"] == running and d["restart"] is restart and d["wanted"] == int(wanted)
    assert d["reason"]


def test_restart_decision_reasons_name_the_values():
    assert cap.restart_decision(200, {"data": [{"max_model_len": 8192}]}, 32768)["reason"] == \
        "serving max_model_len 8192, the point needs 32768"
    assert cap.restart_decision(200, {"data": [{"max_model_len": 8192}]}, 8192)["reason"] == \
        "already serving max_model_len 8192"
    assert "answered 503" in cap.restart_decision(503, {}, 8192)["reason"]


def test_theoretical_concurrency():
    assert cap.theoretical_concurrency(1234567, 1048576) == round(1234567 / 1048576, 4)
    assert cap.theoretical_concurrency(1 << 20, 8192, max_num_seqs=64) == 64
    assert cap.theoretical_concurrency(None, 8192) is None


def test_sweep_levels_geometric_and_knee():
    assert cap.sweep_levels(16) == [1, 2, 4, 8, 16]
    lv = cap.sweep_levels(256, theoretical=5.5)
    assert lv == [1, 2, 4, 5, 6, 8, 11]
    assert cap.sweep_levels(64, theoretical=0.3) == [1]


def test_prompt_tokens_for():
    assert cap.prompt_tokens_for(8192, 128) == 8192 - 128 - 256
    assert cap.prompt_tokens_for(8192, 128, fraction=0.5, margin=0) == 4032
    assert cap.prompt_tokens_for(1 << 20, 128, cap=100000) == 100000
    assert cap.prompt_tokens_for(300, 128) == 16


def step(c, tput, ttft_p99=0.1, waiting=0, pre=0, failed=0):
    return {"concurrency": c, "throughput_tok_s": tput, "ttft_s": {"p99": ttft_p99},
            "num_requests_waiting_max": waiting, "preemptions": pre, "failed_requests": failed}


@pytest.mark.parametrize("s,prev,needle", [
    (step(4, 400, ttft_p99=3.0), None, "ttft_p99"),
    (step(4, 400, waiting=2), None, "waiting"),
    (step(4, 400, pre=1), None, "preemption"),
    (step(4, 400, failed=1), None, "failed"),
    (step(8, 410), step(4, 400), "plateau"),
])
def test_saturation_reasons(s, prev, needle):
    reasons = cap.saturation_reasons(s, prev, ttft_limit_s=2.0)
    assert len(reasons) == 1 and needle in reasons[0]


def test_no_saturation_when_scaling():
    assert cap.saturation_reasons(step(8, 790), step(4, 400), ttft_limit_s=2.0) == []
    assert cap.saturation_reasons(step(8, 790, ttft_p99=9), step(4, 400), ttft_limit_s=0) == []


def test_max_sustainable_stops_at_first_saturated():
    steps = [dict(step(1, 100), saturation=[]), dict(step(2, 200), saturation=[]),
             dict(step(4, 210), saturation=["plateau"]), dict(step(8, 400), saturation=[])]
    assert cap.max_sustainable(steps) == 2
    assert cap.max_sustainable([dict(step(1, 1), saturation=["x"])]) is None


def test_render_markdown_has_a_row_per_point():
    pts = [cap.point_summary(8192, [dict(step(1, 100), saturation=[], requests=2)], {"kv_cache_size_tokens": 65536},
                             restarted=True)]
    md = cap.render_markdown({"points": pts, "restarts": 1, "ttft_limit_s": 2})
    assert "| 8192 | 65536 | 8.0 | 1 | 100.0 |" in md
    assert "restarts: 1" in md


def sweep_params(base_url, **kw):
    p = {"base_url": base_url, "model": None, "api_key": None, "max_model_len": None, "concurrency_levels": None,
         "max_concurrency": 16, "requests_per_level": 2, "output_tokens": 8, "prompt_fraction": 1.0,
         "max_prompt_tokens": 2000, "ttft_limit_s": 0, "plateau_gain": 0.05, "stop_on_saturation": True,
         "reasoning_effort": "low", "extra_body": None, "metrics_urls": None, "metrics_interval": 0.02,
         "log_text": None, "restarted": False, "timeout": 10}
    p.update(kw)
    return p


def test_sweep_finds_the_knee_of_a_server_with_four_slots():
    # 32768 KV tokens at max_model_len 8192 -> theoretical 4; the fake runs at most 4 requests, queues the rest.
    # The knee here is the server's waiting queue, which the fake reports exactly; the plateau rule is off
    # (plateau_gain -1: no gain is below -100 %) because it judges wall-clock throughput of two requests, which a
    # loaded CI machine moved to +3.2 % from 2 to 4 streams. The plateau rule has exact tests above.
    with FakeVLLM(ttft=0.05, itl=0.01, tokens=6, max_model_len=8192, kv_tokens=32768, max_running=4) as f:
        out = cr.run_sweep(sweep_params(f.base_url, plateau_gain=-1.0))
        calibration = [r for r in f.requests if not r.get("stream")]
        body = [r for r in f.requests if r.get("stream")][0]
    # Two non-streaming calibration requests measure the server's tokens per filler before the sweep.
    assert len(calibration) == 2 and all(r["max_tokens"] == 1 for r in calibration)
    assert "ignore_eos" not in calibration[0]
    assert out["theoretical_max_concurrency"] == 4.0 and out["kv"]["source"] == "metrics"
    assert out["levels"] == [1, 2, 4, 8]
    by_c = {s["concurrency"]: s for s in out["steps"]}
    assert by_c[4]["saturation"] == []
    assert any("waiting" in r for r in by_c[8]["saturation"])
    assert out["point"]["measured_max_concurrency"] == 4
    assert by_c[1]["saturation"] == [] and by_c[2]["saturation"] == []
    assert all(by_c[c]["throughput_tok_s"] > 0 for c in (1, 2, 4, 8))
    # every request's wait in this client (send gate) is reported next to, not inside, the TTFT
    assert by_c[8]["client_queue_s"]["n"] == by_c[8]["requests"] and by_c[8]["client_queue_s"]["min"] >= 0
    assert by_c[8]["client_queue_s"]["mean"] < by_c[8]["ttft_s"]["mean"]
    assert body["ignore_eos"] is True and body["min_tokens"] == 8
    assert body["stream_options"] == {"include_usage": True}


def test_sweep_takes_kv_from_log_when_metrics_lack_labels():
    log = "INFO GPU KV cache size: 65,536 tokens\nINFO Maximum concurrency for 8,192 tokens per request: 8.00x\n"
    with FakeVLLM(max_model_len=8192, with_cache_info=False, itl=0.001) as f:
        out = cr.run_sweep(sweep_params(f.base_url, log_text=log, concurrency_levels=[1, 2]))
    assert out["kv"]["source"] == "log"
    assert out["kv"]["kv_cache_size_tokens"] == 65536 and out["theoretical_max_concurrency"] == 8.0
    assert [s["concurrency"] for s in out["steps"]] == [1, 2]


def test_sweep_against_dead_server_reports_errors():
    out = cr.run_sweep(sweep_params("http://127.0.0.1:9/v1", timeout=2))
    assert out["steps"] == [] and out["errors"]


@pytest.mark.parametrize("value,expected", [(8192, 8192), ("8192", 8192), (float("inf"), None), ("lots", None),
                                            (None, None)])
def test_running_max_model_len_reads_an_integer_or_nothing(value, expected):
    assert cap.running_max_model_len(200, {"data": [{"id": "m", "max_model_len": value}]}) == expected


def test_dead_levels_name_the_steps_where_no_request_got_an_answer():
    steps = [dict(step(1, 0), requests=2, failed_requests=2, errors=["APIConnectionError: Connection error."]),
             dict(step(2, 10), requests=4, failed_requests=1, errors=["APITimeoutError"]),
             dict(step(4, 0), requests=8, failed_requests=8, errors=[])]
    assert cap.dead_levels(steps) == [
        "concurrency 1: all 2 requests failed (APIConnectionError: Connection error.)",
        "concurrency 4: all 8 requests failed (no error text)"]
    assert cap.dead_levels([dict(step(1, 90), requests=2, failed_requests=0)]) == []
    assert cap.dead_levels([dict(step(1, 0), requests=0, failed_requests=0)]) == []
