"""vLLM /metrics -> per-engine snapshot -> cluster summary and window deltas, with exact values (two engines, one
node scraped twice, counters with and without the _total suffix)."""
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import metrics as smm

BEFORE = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3
vllm:num_requests_running{engine="1",model_name="m"} 2
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 1
vllm:num_requests_waiting{engine="1",model_name="m"} 0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.5
# TYPE vllm:num_preemptions counter
vllm:num_preemptions_total{engine="0",model_name="m"} 2
vllm:num_preemptions_total{engine="1",model_name="m"} 1
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{engine="0",model_name="m"} 100
vllm:generation_tokens_total{engine="1",model_name="m"} 50
# TYPE vllm:prompt_tokens counter
vllm:prompt_tokens_total{engine="0",model_name="m"} 10
# TYPE vllm:request_success counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 4
vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 6
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 4
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 4
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 2
vllm:time_to_first_token_seconds_count{engine="1",model_name="m"} 2
vllm:time_to_first_token_seconds_sum{engine="1",model_name="m"} 1
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="1536",cache_dtype="fp8",engine="0",kv_cache_max_concurrency="1.25",\
kv_cache_size_tokens="262144",model_name="m",num_gpu_blocks="170"} 1
vllm:cache_config_info{block_size="1536",cache_dtype="fp8",engine="1",kv_cache_max_concurrency="1.5",\
kv_cache_size_tokens="131072",model_name="m",num_gpu_blocks="85"} 1
"""

AFTER = BEFORE.replace('vllm:num_preemptions_total{engine="1",model_name="m"} 1',
                       'vllm:num_preemptions_total{engine="1",model_name="m"} 4') \
    .replace('vllm:generation_tokens_total{engine="0",model_name="m"} 100',
             'vllm:generation_tokens_total{engine="0",model_name="m"} 164') \
    .replace('vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 4',
             'vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 8') \
    .replace('vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 2',
             'vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 4.5')


def test_parse_per_engine():
    snap = smm.parse_metrics(BEFORE, source="http://a/metrics")
    assert snap["source"] == "http://a/metrics" and sorted(snap["engines"]) == ["0", "1"]
    e0 = snap["engines"]["0"]
    assert e0["gauges"] == {"vllm:num_requests_running": 3.0, "vllm:num_requests_waiting": 1.0,
                            "vllm:kv_cache_usage_perc": 0.25}
    # _total stripped; request_success summed over finished_reason
    assert e0["counters"] == {"vllm:num_preemptions": 2.0, "vllm:generation_tokens": 100.0,
                              "vllm:prompt_tokens": 10.0, "vllm:request_success": 10.0}
    assert e0["histograms"] == {"vllm:time_to_first_token_seconds": {"sum": 2.0, "count": 4.0}}
    assert e0["cache_config"] == {"block_size": 1536, "cache_dtype": "fp8", "kv_cache_max_concurrency": 1.25,
                                  "kv_cache_size_tokens": 262144, "num_gpu_blocks": 170}


def test_series_without_engine_label_and_counters_without_total():
    text = ("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} 7\n"
            "# TYPE vllm:num_preemptions gauge\nvllm:num_preemptions{model_name=\"m\"} 5\n"
            "# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc{model_name=\"m\"} 0.75\n"
            "# TYPE other_metric gauge\nother_metric 1\n")
    snap = smm.parse_metrics(text)
    assert list(snap["engines"]) == ["0"]
    e = snap["engines"]["0"]
    assert e["gauges"] == {"vllm:num_requests_running": 7.0, "vllm:gpu_cache_usage_perc": 0.75}
    assert e["counters"] == {"vllm:num_preemptions": 5.0}
    summ = smm.summarise_snapshot(smm.merge_snapshots([snap]))
    assert summ["kv_cache_usage_perc_max"] == 0.75 and summ["num_preemptions"] == 5.0  # the old gauge name counts


def test_summary_sums_engines_and_takes_the_kv_peak():
    summ = smm.summarise_snapshot(smm.merge_snapshots([smm.parse_metrics(BEFORE, "a")]))
    assert summ == {
        "engines": 2, "num_requests_running": 5.0, "num_requests_waiting": 1.0, "kv_cache_usage_perc_max": 0.5,
        "num_preemptions": 3.0, "prompt_tokens": 10.0, "generation_tokens": 150.0,
        "kv_cache_size_tokens": 393216, "kv_cache_max_concurrency": 2.75, "num_gpu_blocks": 255,
        "block_size": 1536,
        "cache_config": {"0": smm.parse_metrics(BEFORE)["engines"]["0"]["cache_config"],
                         "1": smm.parse_metrics(BEFORE)["engines"]["1"]["cache_config"]}}


def test_summary_of_an_empty_snapshot():
    summ = smm.summarise_snapshot({"engines": {}})
    assert summ["engines"] == 0 and summ["kv_cache_usage_perc_max"] is None and summ["kv_cache_size_tokens"] is None
    assert summ["block_size"] is None and summ["num_requests_running"] == 0.0


def test_kv_usage_zero_is_a_peak_of_zero():
    text = "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{engine=\"0\"} 0\n"
    assert smm.summarise_snapshot(smm.merge_snapshots([smm.parse_metrics(text)]))["kv_cache_usage_perc_max"] == 0.0


def test_max_concurrency_is_rounded_to_four_places():
    text = ('# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{engine="0",kv_cache_max_concurrency='
            '"1.123456"} 1\n')
    assert smm.summarise_snapshot(smm.merge_snapshots([smm.parse_metrics(text)]))["kv_cache_max_concurrency"] == 1.1235


def test_non_numeric_capacity_labels_are_not_summed():
    text = ('# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{engine="0",kv_cache_size_tokens="None",'
            'block_size="auto"} 1\n')
    summ = smm.summarise_snapshot(smm.merge_snapshots([smm.parse_metrics(text)]))
    assert summ["kv_cache_size_tokens"] is None and summ["block_size"] is None
    assert summ["cache_config"] == {"0": {"kv_cache_size_tokens": "None", "block_size": "auto"}}


def test_a_url_listed_twice_counts_once():
    a, again = smm.parse_metrics(BEFORE, "a"), smm.parse_metrics(AFTER, "a")
    merged = smm.merge_snapshots([a, again])
    assert merged["sources"] == ["a", "a"] and merged["engines"] == a["engines"]


def test_two_servers_each_with_engine_0_are_two_engines():
    # a fleet of two replicas: each server numbers its engine 0; their KV pools add up
    text = ('# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{engine="0",kv_cache_size_tokens="466032",'
            'block_size="16",num_gpu_blocks="29127"} 1\n# TYPE vllm:num_requests_running gauge\n'
            'vllm:num_requests_running{engine="0"} 2\n')
    one, two = smm.parse_metrics(text, "http://r1/metrics"), smm.parse_metrics(text, "http://r2/metrics")
    merged = smm.merge_snapshots([one, two])
    assert sorted(merged["engines"]) == ["http://r1/metrics#0", "http://r2/metrics#0"]
    summ = smm.summarise_snapshot(merged)
    assert (summ["engines"], summ["kv_cache_size_tokens"], summ["num_gpu_blocks"], summ["num_requests_running"]) == (
        2, 932064, 58254, 4.0)


def test_window_delta():
    before = smm.merge_snapshots([smm.parse_metrics(BEFORE)])
    after = smm.merge_snapshots([smm.parse_metrics(AFTER)])
    d = smm.snapshot_delta(before, after)
    assert d["num_preemptions"] == 3.0 and d["generation_tokens"] == 64.0 and d["prompt_tokens"] == 0.0
    assert d["request_success"] == 0.0
    # server TTFT over the window: (4.5 + 1 - 2 - 1) / (8 + 2 - 4 - 2) = 2.5 / 4
    assert d["time_to_first_token_seconds_mean"] == 0.625
    assert d["inter_token_latency_seconds_mean"] is None  # no count in the window
    assert smm.snapshot_delta(after, after)["time_to_first_token_seconds_mean"] is None
    assert smm.snapshot_delta({}, after)["num_preemptions"] == 6.0


def test_window_delta_rounds_to_microseconds():
    def snap(s, c):
        return {"engines": {"0": {"counters": {}, "gauges": {}, "cache_config": {}, "histograms": {
            "vllm:e2e_request_latency_seconds": {"sum": s, "count": c}}}}}
    assert smm.snapshot_delta(snap(0.0, 0.0), snap(1.0, 3.0))["e2e_request_latency_seconds_mean"] == 0.333333


def test_series_of_one_engine_with_other_labels_are_summed():
    text = ('# TYPE vllm:num_requests_running gauge\n'
            'vllm:num_requests_running{engine="0",model_name="a"} 2\n'
            'vllm:num_requests_running{engine="0",model_name="b"} 3\n'
            '# TYPE vllm:e2e_request_latency_seconds histogram\n'
            'vllm:e2e_request_latency_seconds_sum{engine="0",model_name="a"} 1.5\n'
            'vllm:e2e_request_latency_seconds_count{engine="0",model_name="a"} 1\n'
            'vllm:e2e_request_latency_seconds_sum{engine="0",model_name="b"} 2.5\n'
            'vllm:e2e_request_latency_seconds_count{engine="0",model_name="b"} 3\n')
    e = smm.parse_metrics(text)["engines"]["0"]
    assert e["gauges"] == {"vllm:num_requests_running": 5.0}
    assert e["histograms"] == {"vllm:e2e_request_latency_seconds": {"sum": 4.0, "count": 4.0}}


def test_snapshots_without_engines_and_engines_without_a_series():
    assert smm.merge_snapshots([{"source": "x"}]) == {"engines": {}, "sources": ["x"]}
    assert smm.summarise_snapshot({})["engines"] == 0
    empty = {"counters": {}, "gauges": {}, "histograms": {}, "cache_config": {}}
    one = {"counters": {"vllm:num_preemptions": 2.0}, "gauges": {"vllm:num_requests_running": 4.0},
           "cache_config": {},
           "histograms": {"vllm:request_queue_time_seconds": {"sum": 0.5, "count": 1.0}}}
    summ = smm.summarise_snapshot({"engines": {"0": empty, "1": one}})
    assert (summ["num_requests_running"], summ["num_requests_waiting"]) == (4.0, 0.0)
    d = smm.snapshot_delta({"engines": {}}, {"engines": {"0": empty, "1": one}})
    assert d["num_preemptions"] == 2.0
    assert d["request_queue_time_seconds_mean"] == 0.5  # a count difference of exactly 1
