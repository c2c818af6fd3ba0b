"""The plan's refusal point: the longest max-model-len the engine starts with (max_model_len_limit, vLLM's own fit
test), refused beyond it when the figures are trusted, or warned with kimi_k3_max_model_len_fit: warn (the capacity
curve's refusal probe). The cpu rehearsal plan: 1 GiB / (16 x 2,304 B) = 29,127 blocks = 466,032 tokens."""
import json

from ansible_collections.gpufleet.kimi_k3.plugins.filter import capacity as capacity_filters
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import topology
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import model_facts
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import recipe_data

REV = "7c3d9e2f1a0b4c5d6e7f8091a2b3c4d5e6f70819"


def cpu_plan(tmp_path, **extra):
    snap = tmp_path / "hub" / "models--moonshotai--Kimi-K3" / "snapshots" / REV
    snap.mkdir(parents=True, exist_ok=True)
    from sim.engine import make_model  # the rehearsal model's config, without torch
    (snap / "config.json").write_text(json.dumps(make_model.CONFIG))
    cluster = {"kimi_k3_accelerator": "cpu", "kimi_k3_strategy": "multi_node_tp", "kimi_k3_interconnect": "tcp",
               "kimi_k3_vllm_version": "0.32.0", "kimi_k3_model_revision": REV, "kimi_k3_socket_ifname": "lo",
               "kimi_k3_model_cache_dir": str(tmp_path), "kimi_k3_allow_unauthenticated_api": True,
               "kimi_k3_image": "127.0.0.1:5000/vllm/vllm-openai-cpu@sha256:" + "c" * 64}
    cluster.update(extra)
    nodes = [{"host": "cpu-node0%d" % i, "head": i == 1, "vars": dict(cluster, ansible_host="127.0.0.6%d" % i)}
             for i in (1, 2)]
    return topology.build_cluster_plan(nodes, recipe_data.load_recipe(), recipe_data.load_snapshots(),
                                       model_facts=model_facts.read)


def test_cpu_plan_predicts_the_engines_refusal_point(tmp_path):
    r = cpu_plan(tmp_path)
    assert r["ok"], r["errors"]
    assert r["cluster"]["capacity"]["max_model_len_limit"] == 466032


def test_the_longest_accepted_length_plans_and_one_token_more_is_refused(tmp_path):
    assert cpu_plan(tmp_path, kimi_k3_max_model_len=466032)["ok"]
    r = cpu_plan(tmp_path, kimi_k3_max_model_len=466033)  # 0.999998 sequences: vLLM refuses, the plan too
    assert not r["ok"]
    (err,) = [e for e in r["errors"] if e["variable"] == "kimi_k3_max_model_len"]
    assert "--max-model-len 466033" in err["message"] and "vLLM refuses to start" in err["message"]


def test_max_model_len_fit_warn_renders_the_refused_length_for_the_probe(tmp_path):
    r = cpu_plan(tmp_path, kimi_k3_max_model_len=524288, kimi_k3_max_model_len_fit="warn")
    assert r["ok"], r["errors"]
    (warn,) = [w for w in r["warnings"] if w["variable"] == "kimi_k3_max_model_len"]
    assert "--max-model-len 524288 needs 1.12 GiB" in warn["message"]
    assert "kimi_k3_max_model_len_fit: warn" in warn["message"]
    assert "524288" in r["plans"]["cpu-node01"]["vllm_args"]
    bad = cpu_plan(tmp_path, kimi_k3_max_model_len_fit="sometimes")
    assert not bad["ok"] and [e["variable"] for e in bad["errors"]] == ["kimi_k3_max_model_len_fit"]


def test_the_curve_filter_predicts_before_the_relaunch(tmp_path):
    cluster = cpu_plan(tmp_path)["cluster"]
    assert capacity_filters.capacity_refusal(cluster, 4096)["refused"] is False
    beyond = capacity_filters.capacity_refusal(cluster, 524288)
    assert (beyond["limit"], beyond["refused"], beyond["observed"]) == (466032, True, "not launched")


def test_the_curve_filter_reads_a_templated_none_as_not_launched(tmp_path):
    cluster = cpu_plan(tmp_path)["cluster"]
    for served, observed in (("None", "not launched"), ("", "not launched"), ("True", "served"), (True, "served")):
        assert capacity_filters.capacity_refusal(cluster, 524288, served)["observed"] == observed
    assert capacity_filters.capacity_refusal(cluster, 524288, "False", "RuntimeError")["observed"].startswith("failed")
