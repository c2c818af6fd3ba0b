"""plan.md (plugin_utils.plan.render.plan_markdown): the exact text of a small plan, and the redaction it passes."""
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import render as plan_render

CAPACITY = {"weights_gb": 1560, "weights_source": "recipe", "gpu_memory_utilization": 0.9, "kv_cache_dtype": "fp8",
            "engines": 1, "max_num_seqs": None,
            "per_gpu": {"memory_gib": 180.0, "weights_gib": 100.0, "reserve_gib": 8.0, "kv_budget_gib": 54.0,
                        "kv_bytes_per_token": 13824, "state_bytes_per_sequence": 1048576},
            "at_max_model_len": {"max_model_len": 65536, "kv_cache_size_tokens": 400000, "max_concurrency": 6.1,
                                 "deployment_concurrency": 6.1},
            "table": [{"max_model_len": 65536, "kv_cache_size_tokens": 400000, "max_concurrency": 6.1,
                       "deployment_concurrency": 6.1}]}
TIMEOUTS = {"engine_ready_timeout_s": 1200, "launch_ready_timeout_s": 1500, "stall_timeout_s": 600,
            "basis": "measured 900 MiB/s"}


def _node(host, rank, role, api_url, extra):
    return {"host": host, "node_rank": rank, "role": role, "internal_address": "10.0.0.%d" % (rank + 1),
            "api_url": api_url, "secret_env": ["VLLM_API_KEY"] if api_url else [],
            "vllm_args": ["moonshotai/Kimi-K3", "--tensor-parallel-size", "8", "--max-model-len", "65536"] + extra}


PLAN = {
    "ok": True,
    "cluster": {"strategy": "multi_node_tep", "nnodes": 2, "accelerator": "gb300", "total_gpus": 8,
                "tensor_parallel_size": 8, "pipeline_parallel_size": 1, "data_parallel_size": 1, "dp_lb_mode": None,
                "vllm_version": "0.28.0", "image": "vllm/vllm-openai@sha256:abc", "api_access": "api_key",
                "order": ["t1", "t2"], "capacity": CAPACITY, "timeouts": TIMEOUTS},
    "plans": {"t1": _node("t1", 0, "head", "http://10.0.0.1:8000",
                          ["--otlp-traces-endpoint", "https://otel:zQsecret@collector:4318", "--x-json", '{"a|b": 1}']),
              "t2": _node("t2", 1, "worker", None, ["--headless"])},
    "warnings": [{"host": "t1", "variable": "kimi_k3_tls_certfile", "message": "plain http.", "fix": "set it."}],
    "errors": [],
}

EXPECTED = """# Kimi-K3 plan

- Kimi-K3 plan: multi_node_tep on 2 x gb300 (8 GPUs), TP 8 x PP 1 x DP 1, vLLM 0.28.0
- image vllm/vllm-openai@sha256:abc
- API access: API key required (kimi_k3_api_key)

## Nodes

| host | rank | role | address | http | args |
|---|---|---|---|---|---|
| `t1` | `0` | `head` | `10.0.0.1` | `http://10.0.0.1:8000` | `8` |
| `t2` | `1` | `worker` | `10.0.0.2` | `headless` | `5` |

## Arguments per node

### t1 (head, node rank 0)

| option | value |
|---|---|
| (positional) | `moonshotai/Kimi-K3` |
| `--tensor-parallel-size` | `8` |
| `--max-model-len` | `65536` |
| `--otlp-traces-endpoint` | `https://<hidden>@collector:4318` |
| `--x-json` | `{"a\\|b": 1}` |

Secrets passed by name only: `VLLM_API_KEY`.

### t2 (worker, node rank 1)

| option | value |
|---|---|
| (positional) | `moonshotai/Kimi-K3` |
| `--tensor-parallel-size` | `8` |
| `--max-model-len` | `65536` |
| `--headless` |  |

## Capacity

```
capacity main: weights 1,560 GB (recipe); per GPU 180.0 GiB x 0.90 - 100.0 GiB weights - 8.0 GiB reserve = 54.0 GiB KV; \
13,824 B/token (fp8) + 1.0 MiB KDA state/sequence; 1 engine(s)
  at max-model-len 65,536: 400,000 KV tokens, 6.10x per engine, 6.10 per deployment
  max-model-len   KV tokens/engine  concurrency/engine  deployment
         65,536           400,000                6.10        6.10
```

## Timeouts

| deployment | engine ready (s) | launch ready (s) | stall (s) | basis |
|---|---|---|---|---|
| main | 1200 | 1500 | 600 | measured 900 MiB/s |

## Warnings

- t1: kimi_k3_tls_certfile: plain http. Fix: set it.
"""


def test_plan_markdown_of_a_small_plan_is_exact():
    assert plan_render.plan_markdown(PLAN, secrets=["not-in-the-plan"]) == EXPECTED


def test_plan_markdown_hides_the_inventory_secrets_wherever_they_stand():
    plan = dict(PLAN, warnings=[dict(PLAN["warnings"][0], message="holds zQcanary-value.")])
    text = plan_render.plan_markdown(plan, secrets=["zQcanary-value"])
    assert "zQcanary" not in text and "zQsecret" not in text and "holds <hidden>." in text


def test_plan_markdown_says_when_nothing_is_predicted_or_warned():
    cluster = dict(PLAN["cluster"], capacity=None, timeouts=None)
    text = plan_render.plan_markdown(dict(PLAN, cluster=cluster, warnings=[]))
    assert "main: no capacity prediction (see docs/capacity.md)" in text and text.endswith("## Warnings\n\nnone\n")
