"""Weights fit, KV capacity prediction and max_model_len auto at plan time (plan_capacity, plan_sizing).

Exact figures for the example inventories; the worked arithmetic is docs/capacity.md ("Predicted before launch").
"""
import json
import os

import pytest
from hypothesis import example, given, settings, strategies as st

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import capacity as pc
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import render as plan_render
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import sizing as plan_sizing
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import topology
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import vllm_flags
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import model_facts
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import recipe_data

from tests.unit.plugins.action.test_plan_golden import plan_inventory
from tests.unit.plugins.plugin_utils.plan.test_topology import make_nodes, plan

HERE = os.path.dirname(os.path.abspath(__file__))

RECIPE = recipe_data.load_recipe()
SNAPSHOTS = recipe_data.load_snapshots()
GIB, MIB = 2 ** 30, 2 ** 20

# (max_model_len, KV cache size tokens per engine, concurrency per engine, per deployment)
TP8_GB300 = [(32768, 5117901, 156.19, 156.19), (65536, 5416693, 82.65, 82.65), (131072, 5579565, 42.57, 42.57),
             (262144, 5664731, 21.61, 21.61), (524288, 5708296, 10.89, 10.89), (1048576, 5730331, 5.46, 5.46)]
DEP16_GB300 = [(32768, 3568667, 108.91, 1742.51), (65536, 4751881, 72.51, 1160.13),
               (131072, 5696184, 43.46, 695.34), (262144, 6324603, 24.13, 386.02),
               (524288, 6693844, 12.77, 204.28), (1048576, 6895119, 6.58, 105.21)]
TP8_MI355X = [(32768, 3070949, 93.72, 93.72), (65536, 3163288, 48.27, 48.27), (131072, 3211572, 24.5, 24.5),
              (262144, 3236271, 12.35, 12.35), (524288, 3248763, 6.2, 6.2), (1048576, 3255046, 3.1, 3.1)]
TP8_B300 = [(32768, 4530145, 138.25, 138.25), (65536, 4794623, 73.16, 73.16), (131072, 4938791, 37.68, 37.68),
            (262144, 5014175, 19.13, 19.13), (524288, 5052737, 9.64, 9.64), (1048576, 5072242, 4.84, 4.84)]


def rows(capacity):
    return [(r["max_model_len"], r["kv_cache_size_tokens"], r["max_concurrency"], r["deployment_concurrency"])
            for r in capacity["table"]]


def deployments(result):
    assert result["ok"], [plan_render.format_problem(e) for e in result["errors"]]
    return dict((d["name"], d["capacity"]) for d in result["cluster"]["deployments"])


# ----------------------------------------------------------------------------- example inventories


def test_gb300_tp8_two_trays_worked_by_hand():
    """multi_node_tp over 2 GB300 trays, every figure derived here from the recipe data."""
    cap = plan_inventory("gb300-cluster")["cluster"]["capacity"]
    memory = 284208 * MIB                          # one GB300 NVL72 GPU (nvidia-smi)
    weights = 1560e9 / 8                           # TP 8: every GPU holds 1/8 of the checkpoint
    budget = memory * 0.95 - weights - 8 * GIB     # --gpu-memory-utilization 0.95, 8 GiB reserve
    token = 24 * (512 + 64) * 1                    # 24 MLA layers x 576 latent elements x fp8
    state = 69 * (96 * 128 * 128 * 4 + 3 * 3 * 96 * 128 * 2) / 8   # 69 KDA layers, heads split over TP 8
    assert (token, state) == (13824, 56171520)
    concurrency = budget / (1048576 * token + state)
    assert cap["at_max_model_len"] == {"max_model_len": 1048576, "kv_cache_size_tokens": int(concurrency * 1048576),
                                       "max_concurrency": round(concurrency, 2),
                                       "deployment_concurrency": round(concurrency, 2), "sequence_gib": 13.552}
    assert cap["per_gpu"] == {"memory_gib": 277.55, "weights_gib": 181.61, "reserve_gib": 8.0, "kv_budget_gib": 74.06,
                              "kv_bytes_per_token": 13824.0, "state_bytes_per_sequence": 56171520}
    assert cap["kv_tokens"] == int(budget / token) == 5752536
    assert rows(cap) == TP8_GB300 and cap["engines"] == 1 and cap["max_model_len"] == 1048576


def test_gb300_dep16_experts_split_over_sixteen_ranks():
    cap = plan_inventory("gb300-dep16")["cluster"]["capacity"]
    # replicated 84 GB on every rank + the routed experts (1560 - 84 GB) over EP 16; KDA state not split (TP 1)
    assert cap["per_gpu"]["weights_gib"] == round((84e9 + 1476e9 / 16) / GIB, 2) == 164.15
    assert cap["per_gpu"]["state_bytes_per_sequence"] == 69 * 6512640 == 449372160
    assert rows(cap) == DEP16_GB300 and cap["engines"] == 16


def test_mi355x_tp8_bf16_kv_at_the_model_length():
    cap = plan_inventory("mi355x-cluster")["cluster"]["capacity"]
    # no --kv-cache-dtype on AMD: the model's bf16, twice the fp8 bytes; no --max-model-len: the model's 1M
    assert cap["kv_cache_dtype"] == "auto" and cap["per_gpu"]["kv_bytes_per_token"] == 27648.0
    assert cap["max_model_len"] == 1048576 and cap["at_max_model_len"]["max_concurrency"] == 3.1
    assert rows(cap) == TP8_MI355X and cap["max_num_seqs"] == 128


def test_b300_tp8_single_node():
    cap = deployments(plan(make_nodes(1, kimi_k3_accelerator="b300", kimi_k3_strategy="single_node_tp")))["main"]
    assert cap["per_gpu"]["memory_gib"] == 268.59 and cap["per_gpu"]["kv_budget_gib"] == 65.56
    assert rows(cap) == TP8_B300


def test_fleet_every_replica_has_its_own_prediction():
    caps = deployments(plan_inventory("gb300-fleet"))
    assert sorted(caps) == ["replica-1", "replica-2"]
    assert rows(caps["replica-1"]) == rows(caps["replica-2"]) == TP8_GB300
    assert plan_inventory("gb300-fleet")["cluster"]["capacity"] is None  # several deployments: per deployment


def test_pd_cluster_prefill_tep8_and_decode_dep16():
    r = plan_inventory("gb300-pd")
    caps = deployments(r)
    assert rows(caps["prefill-1"]) == TP8_GB300 and rows(caps["decode-1"]) == DEP16_GB300
    assert caps["decode-1"]["max_num_seqs"] == 8
    summary = plan_render.summary_table(r)
    assert "capacity decode-1: weights 1,560 GB" in summary
    assert "--max-num-seqs 8 admits at most 8 per engine" in summary
    assert "      1,048,576         6,895,119                6.58      105.21" in summary.splitlines()


INVENTORIES = os.path.join(HERE, "..", "..", "..", "..", "inventories")


@pytest.mark.parametrize("name", sorted(n for n in os.listdir(INVENTORIES) if not n.startswith(".")))
def test_every_example_inventory_still_renders(name):
    r = plan_inventory(name)
    assert r["ok"], [plan_render.format_problem(e) for e in r["errors"]]


# ----------------------------------------------------------------------------- refusals


@pytest.mark.parametrize("count,layout,fragments", [
    (1, dict(kimi_k3_accelerator="h200", kimi_k3_strategy="single_node_tp"),
     ["1,560 GB", "8 x 151 GB x 0.97 = 1,170 GB usable", "one copy spans TP 8 x PP 1", "195.0 GB of weights"]),
    (2, dict(kimi_k3_accelerator="h200", kimi_k3_strategy="multi_node_tp_dp", kimi_k3_interconnect="rdma"),
     ["8 x 151 GB x 0.97 = 1,170 GB usable", "each data-parallel replica (TP 8 x PP 1) holds a full copy"]),
    (4, dict(kimi_k3_accelerator="gb300", kimi_k3_strategy="multi_node_tp_dp", kimi_k3_interconnect="nvlink"),
     ["4 x 298 GB x 0.95 = 1,132 GB usable", "each data-parallel replica (TP 4 x PP 1)", "390.0 GB of weights"]),
])
def test_layouts_that_cannot_hold_the_weights_are_refused(count, layout, fragments):
    r = plan(make_nodes(count, **layout))
    assert not r["ok"] and len(r["errors"]) == 1
    e = r["errors"][0]
    assert e["variable"] == "kimi_k3_strategy" and e["message"].startswith("the weights do not fit: 1,560 GB")
    for fragment in fragments:
        assert fragment in e["message"], e["message"]
    assert "at least 2 %s nodes with" % layout["kimi_k3_accelerator"] in e["fix"]
    assert "multi_node_tp_dp" not in e["fix"] and "multi_node_tp / multi_node_tep" in e["fix"]


def test_h200_fix_offers_no_strategy_the_recipe_refuses_there():
    r = plan(make_nodes(1, kimi_k3_accelerator="h200", kimi_k3_strategy="single_node_tp"))
    assert "multi_node_dep" not in r["errors"][0]["fix"]  # unsupported on h200 by the recipe


def test_unknown_model_is_a_warning_naming_what_was_not_checked():
    r = plan(make_nodes(1, kimi_k3_accelerator="h200", kimi_k3_strategy="single_node_tp",
                        kimi_k3_model="example-org/other-model"))
    assert r["ok"], r["errors"]
    (w,) = [w for w in r["warnings"] if w["variable"] == "kimi_k3_model"]
    assert "example-org/other-model is not a model the collection knows" in w["message"]
    assert "the weights fit and the KV capacity were not checked" in w["message"]
    assert r["cluster"]["capacity"] is None


def test_a_length_one_sequence_cannot_hold_is_predicted_and_named():
    r = plan_inventory("sim-gb300-pd")  # decode DEP8 on 2 trays: 5.6 GiB of KV per GPU
    (w,) = [w for w in r["warnings"] if w["variable"] == "kimi_k3_max_model_len"]
    assert "needs 13.92 GiB of KV per GPU, the predicted KV budget is 5.61 GiB per GPU" in w["message"]
    assert "uncalibrated gb300 reserve, architecture from recipe data" in w["message"]
    assert "at most 402432" in w["fix"]


# ----------------------------------------------------------------------------- max_model_len auto


def auto_nodes(**extra):
    return make_nodes(2, kimi_k3_accelerator="gb300", kimi_k3_strategy="multi_node_tp", kimi_k3_interconnect="nvlink",
                      kimi_k3_max_model_len="auto", **extra)


def test_auto_picks_the_longest_length_holding_the_target():
    r = plan(auto_nodes(kimi_k3_target_concurrency=20))
    assert r["ok"], r["errors"]
    budget = 284208 * MIB * 0.95 - 1560e9 / 8 - 8 * GIB
    expected = int((budget / 20 - 56171520) / 13824 // 1024) * 1024
    assert expected == 282624
    for p in r["plans"].values():
        assert vllm_flags.flag_value(p["vllm_args"], "--max-model-len") == [str(expected)]
    cap = r["cluster"]["capacity"]
    assert cap["max_model_len"] == expected and cap["at_max_model_len"]["max_concurrency"] >= 20
    assert pc.capacity_at(budget, 13824, 56171520, expected + 1024)["max_concurrency"] < 20


def test_auto_never_exceeds_the_model_length():
    r = plan(auto_nodes(kimi_k3_target_concurrency=1))
    assert r["cluster"]["capacity"]["max_model_len"] == 1048576


def test_auto_without_a_target_is_refused():
    r = plan(auto_nodes())
    assert [e["variable"] for e in r["errors"]] == ["kimi_k3_target_concurrency"]
    assert "kimi_k3_max_model_len is auto" in r["errors"][0]["message"]


def test_a_target_no_length_holds_is_refused():
    r = plan(auto_nodes(kimi_k3_target_concurrency=5000))
    (e,) = r["errors"]
    assert e["variable"] == "kimi_k3_target_concurrency" and "do not fit at any length" in e["message"]


def test_a_fixed_length_below_the_target_is_a_warning_naming_the_length_that_meets_it():
    r = plan(make_nodes(2, kimi_k3_accelerator="gb300", kimi_k3_strategy="multi_node_tp", kimi_k3_interconnect="nvlink",
                        kimi_k3_target_concurrency=20))
    assert r["ok"], r["errors"]
    (w,) = [w for w in r["warnings"] if w["variable"] == "kimi_k3_target_concurrency"]
    assert w["message"] == ("20 concurrent sequences of 1048576 tokens are wanted, the deployment is predicted to "
                            "hold 5.46.")
    assert w["fix"] == "set kimi_k3_max_model_len to 282624 (or auto), or add nodes."


def test_auto_for_an_unknown_model_stays_with_vllm():
    r = plan(auto_nodes(kimi_k3_model="example-org/other-model"))
    assert r["ok"] and vllm_flags.flag_value(r["plans"]["node0"]["vllm_args"], "--max-model-len") == ["auto"]


def test_with_length_replaces_both_spellings():
    assert plan_sizing.with_length(["m", "--max-model-len", "auto", "--x"], 4096, None) == \
        ["m", "--max-model-len", "4096", "--x"]
    assert plan_sizing.with_length(["--max-model-len=-1"], 4096, None) == ["--max-model-len=4096"]
    assert plan_sizing.with_length(["--max-model-len", "8k"], 4096, None) == ["--max-model-len", "8k"]


# ----------------------------------------------------------------------------- the model's own files


def stage(tmp_path, model, config, total=None, shards=(("model-00001.safetensors", 10),)):
    snap = tmp_path / "hub" / ("models--" + model.replace("/", "--")) / "snapshots" / ("0" * 40)
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(config))
    if total is not None:
        weight_map = dict(("w%d" % i, name) for i, (name, _size) in enumerate(shards))
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (snap / "model.safetensors.index.json").write_text(json.dumps(index))
        for name, size in shards:
            (snap / name).write_bytes(b"\0" * size)
    return str(tmp_path)


TINY_MLA = {"architectures": ["DeepseekV3ForCausalLM"], "num_hidden_layers": 2, "kv_lora_rank": 512,
            "qk_rope_head_dim": 64, "torch_dtype": "bfloat16", "max_position_embeddings": 4096}


def test_the_cache_index_and_config_replace_the_recipe_figures(tmp_path):
    cache = stage(tmp_path, "example-org/tiny-mla", TINY_MLA, total=3340000,
                  shards=(("a.safetensors", 7), ("b.safetensors", 11)))
    facts = model_facts.read("example-org/tiny-mla", None, cache)
    assert facts["weights_bytes"] == 3340000 and facts["largest_shard_bytes"] == 11 and facts["shard_count"] == 2
    r = topology.build_cluster_plan(make_nodes(1, kimi_k3_accelerator="b300", kimi_k3_strategy="single_node_tp",
                                               kimi_k3_model="example-org/tiny-mla", kimi_k3_model_cache_dir=cache,
                                               kimi_k3_max_model_len=4096), RECIPE, SNAPSHOTS,
                                    model_facts=model_facts.read)
    assert r["ok"], r["errors"]
    cap = r["cluster"]["capacity"]
    assert cap["weights_source"].endswith("model.safetensors.index.json")
    assert cap["architecture_source"].endswith("config.json")
    assert cap["per_gpu"]["kv_bytes_per_token"] == 2 * 576 * 1  # 2 MLA layers, fp8 (Blackwell)
    assert cap["per_gpu"]["state_bytes_per_sequence"] == 0 and [t["max_model_len"] for t in cap["table"]] == []
    assert not [w for w in r["warnings"] if w["variable"] == "kimi_k3_model"]


def test_model_facts_absent_or_malformed_count_as_absent(tmp_path):
    assert model_facts.read("example-org/none", None, str(tmp_path)) is None
    cache = stage(tmp_path, "example-org/bad", TINY_MLA)
    snap = os.path.join(cache, "hub", "models--example-org--bad", "snapshots", "0" * 40)
    with open(os.path.join(snap, "model.safetensors.index.json"), "w") as handle:
        handle.write("{not json")
    facts = model_facts.read("example-org/bad", "0" * 40, cache)
    assert "weights_bytes" not in facts and facts["config"]["kv_lora_rank"] == 512


def test_kimi_linear_style_config_counts_kda_layers():
    config = {"text_config": dict(TINY_MLA, num_hidden_layers=8, linear_attn_config={
        "kda_layers": [1, 2, 3, 5, 6, 7], "num_heads": 32, "head_dim": 128, "short_conv_kernel_size": 4})}
    arch = pc.architecture_from_config(config)
    assert (arch["mla_layers"], arch["kda_layers"]) == (2, 6)
    assert pc.kda_state_bytes(arch) == 32 * 128 * 128 * 4 + 3 * 3 * 32 * 128 * 2


# ----------------------------------------------------------------------------- the CPU rehearsal profile


CPU_RULE = {"rule": "fixed_kv_bytes", "env": "VLLM_CPU_KVCACHE_SPACE", "unit_bytes": GIB}


@pytest.mark.parametrize("block,tokens,concurrency", [(128, 465920, 227.5), (16, 466032, 227.55), (None, 466033, 227.56)])
def test_cpu_engine_kv_line_from_a_fixed_budget(block, tokens, concurrency):
    """vLLM CPU 0.32.0, DeepSeek-V3-style tiny model (2 MLA layers, 576, bf16), VLLM_CPU_KVCACHE_SPACE=1:
    "CPU KV cache size: 466,032 tokens, Maximum concurrency for 2,048 tokens per request: 227.55x"."""
    arch = pc.architecture_from_config(TINY_MLA)
    token, state = pc.per_gpu_kv(arch, {"tp": 1, "pp": 1, "dcp": 1}, 2)
    budget = pc.kv_budget(CPU_RULE, 0, 1.0, 0, {"VLLM_CPU_KVCACHE_SPACE": "1"})
    pool = pc.pool_bytes(budget, token, block)
    assert (token, state, budget) == (2304, 0, GIB)
    assert int(pool / token) == tokens
    assert pc.capacity_at(pool, token, state, 2048)["max_concurrency"] == concurrency
    assert abs(tokens - 466032) / 466032.0 < 0.0003  # within 0.03 % at every block size


def test_cpu_budget_without_its_variable_is_unknown():
    assert pc.kv_budget(CPU_RULE, 0, 1.0, 0, {}) is None


# ----------------------------------------------------------------------------- properties


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.text(max_size=12), st.integers().map(str), st.floats(allow_nan=True).map(str)))
def test_parse_length_never_raises(text):
    value = plan_sizing.parse_length(text)
    assert value is None or value == "auto" or (isinstance(value, int) and value >= 1)


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=12)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["kv_lora_rank", "num_hidden_layers", "qk_rope_head_dim", "text_config",
                                        "linear_attn_config", "torch_dtype", "max_position_embeddings"]), JSON))
@example({"kv_lora_rank": float("inf")})
def test_any_config_gives_figures_or_none(config):
    arch = pc.architecture_from_config(config)
    assert arch is None or arch["mla_layers"] + arch["kda_layers"] >= 0


@settings(max_examples=200, deadline=None)
@given(budget=st.floats(1e6, 1e12), token=st.integers(1, 100000), state=st.integers(0, 10 ** 9),
       target=st.integers(1, 500), multiple=st.sampled_from([1, 256, 1024]))
def test_auto_length_holds_the_target_and_the_next_step_does_not(budget, token, state, target, multiple):
    length = pc.auto_length(budget, token, state, target, multiple, None)
    if length is None:
        assert budget / float(multiple * token + state) < target
        return
    assert budget / float(length * token + state) >= target * (1 - 1e-9)
    assert budget / float((length + multiple) * token + state) < target * (1 + 1e-9)


@settings(max_examples=200, deadline=None)
@given(budget=st.floats(1e6, 1e12), token=st.integers(1, 100000), state=st.integers(0, 10 ** 9),
       lengths=st.lists(st.integers(1, 2 ** 21), min_size=2, max_size=2))
def test_longer_sequences_never_raise_concurrency(budget, token, state, lengths):
    short, long_ = sorted(lengths)
    assert pc.capacity_at(budget, token, state, long_)["max_concurrency"] <= \
        pc.capacity_at(budget, token, state, short)["max_concurrency"]


def test_cpu_rehearsal_prediction_equals_the_real_engines_figures(tmp_path):
    """The plan's arithmetic for the rehearsal model (sim/engine/make_model.py's config in the controller's cache)
    against what vllm-cpu 0.32.0 logged for it on the cpu cluster (TP 2, 1 GiB VLLM_CPU_KVCACHE_SPACE):
    "CPU KV cache size: 466,032 tokens" and a maximum concurrency of 113.78x at max-model-len 4,096."""
    rev = "7c3d9e2f1a0b4c5d6e7f8091a2b3c4d5e6f70819"
    snap = tmp_path / "hub" / "models--moonshotai--Kimi-K3" / "snapshots" / rev
    snap.mkdir(parents=True)
    from sim.engine import make_model  # the rehearsal model's config, without torch
    (snap / "config.json").write_text(json.dumps(make_model.CONFIG))
    cluster = {"kimi_k3_accelerator": "cpu", "kimi_k3_strategy": "multi_node_tp", "kimi_k3_interconnect": "tcp",
               "kimi_k3_vllm_version": "0.32.0", "kimi_k3_model_revision": rev, "kimi_k3_socket_ifname": "lo",
               "kimi_k3_model_cache_dir": str(tmp_path), "kimi_k3_allow_unauthenticated_api": True,
               "kimi_k3_image": "127.0.0.1:5000/vllm/vllm-openai-cpu@sha256:" + "c" * 64}
    nodes = [{"host": "cpu-node0%d" % i, "head": i == 1, "vars": dict(cluster, ansible_host="127.0.0.6%d" % i)}
             for i in (1, 2)]
    r = topology.build_cluster_plan(nodes, recipe_data.load_recipe(), recipe_data.load_snapshots(),
                                    model_facts=model_facts.read)
    assert r["ok"], r["errors"]
    at = r["cluster"]["capacity"]["at_max_model_len"]
    assert at["kv_cache_size_tokens"] == 466032 and at["max_model_len"] == 4096
    assert at["max_concurrency"] == 113.78
