"""The stand-in's /metrics text, byte for byte, for a fixed state of two engines: the collection's metrics
readers and the monitoring role's scrape jobs read these names, labels, bucket bounds and number formats."""
import hashlib

from vllm_standin import engine

CACHE_INFO = {"block_size": "1536", "cache_dtype": "fp8", "num_gpu_blocks": "4096", "note": 'a "quoted"\\value'}


def _group():
    group = engine.EngineGroup([0, 3], 10 ** 6, 8)
    for k, e in enumerate(group.engines):
        for j in range(2):
            req = engine.Request("r%d-%d" % (k, j), 200000 * (k + 1), 10, arrival=0.0)
            req.generated = 50000 * (k + 1)
            e.running.add(req)
        e.waiting.extend(engine.Request("w%d" % j, 10, 10, arrival=0.0) for j in range(k))
        e.reserved = 250000 * (k + 1)
        e.prompt_tokens_total, e.generation_tokens_total, e.preemptions = 1234 + k, 567 * (k + 1), k
        e.success.update({"stop": 7 + k, "length": 2, "error": k})
        e.by_source.update({"local_compute": 1000 + k, "external_kv_transfer": 234 * k})
        for v in (0.001, 0.02, 0.3, 4.0, 1e9):
            for h in (e.h_ttft, e.h_itl, e.h_e2e, e.h_queue, e.h_prefill, e.h_decode):
                h.observe(v * (k + 1))
        for v in (1, 100, 5000, 10 ** 7):
            for h in (e.h_prompt, e.h_gen, e.h_kv_computed):
                h.observe(v + k)
    return group


def test_the_metrics_text_of_a_fixed_state_is_the_known_one():
    text = engine.render_metrics(_group(), "moonshotai/Kimi-K3", CACHE_INFO)
    lines = text.split("\n")
    assert lines[:4] == [
        "# HELP vllm:num_requests_running Number of requests in model execution batches.",
        "# TYPE vllm:num_requests_running gauge",
        'vllm:num_requests_running{engine="0",model_name="moonshotai/Kimi-K3"} 2.0',
        'vllm:num_requests_running{engine="3",model_name="moonshotai/Kimi-K3"} 2.0']
    assert ('vllm:cache_config_info{block_size="1536",cache_dtype="fp8",engine="3",note="a \\"quoted\\"\\\\value",'
            'num_gpu_blocks="4096"} 1.0') in lines
    assert 'vllm:kv_cache_usage_perc{engine="0",model_name="moonshotai/Kimi-K3"} 0.5' in lines
    assert 'vllm:kv_cache_usage_perc{engine="3",model_name="moonshotai/Kimi-K3"} 1.0' in lines
    assert 'vllm:request_success_total{engine="3",finished_reason="abort",model_name="moonshotai/Kimi-K3"} 0.0' \
        in lines
    assert 'vllm:prefix_cache_queries_total{engine="3",model_name="moonshotai/Kimi-K3"} 1235.0' in lines
    assert 'vllm:e2e_request_latency_seconds_sum{engine="3",model_name="moonshotai/Kimi-K3"} 2000000008.642' in lines
    assert text.endswith("\n") and len(lines) == 491
    # the whole text: a changed name, label, bucket bound or number format anywhere shows here
    assert hashlib.sha256(text.encode()).hexdigest() == \
        "2f8dd933c86a304d5c08189724ed693cd1e48a4138d0ef9a5cdbc78853e144e6"
