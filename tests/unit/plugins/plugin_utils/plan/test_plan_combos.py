"""Combination rules judged on the final argv (recipe combination_rules, plan_combos): one refused example each.

RULES is the rule table of the closing note: (rule, inventory, fragment of the message).
"""
import json

import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import combos as plan_combos
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import recipe_data
from tests.unit.plugins.plugin_utils.plan.test_topology import make_nodes, plan
from tests.unit.plugins.plugin_utils.plan.test_topology_fleet import pd_cluster

RECIPE = recipe_data.load_recipe()
GB300_TP = dict(kimi_k3_accelerator="gb300", kimi_k3_strategy="multi_node_tp", kimi_k3_interconnect="nvlink")
GB300_TEP = dict(GB300_TP, kimi_k3_strategy="multi_node_tep")
GB300_DEP = dict(GB300_TP, kimi_k3_strategy="multi_node_dep")
B300_DEP = dict(kimi_k3_accelerator="b300", kimi_k3_strategy="multi_node_dep", kimi_k3_interconnect="rdma")
B300_TP8 = dict(kimi_k3_accelerator="b300", kimi_k3_strategy="single_node_tp")
B300_TP_PP = dict(kimi_k3_accelerator="b300", kimi_k3_strategy="multi_node_tp_pp", kimi_k3_interconnect="rdma")
ELASTIC = ["--enable-elastic-ep", "--enable-eplb"]

RULES = [
    ("all2all_without_expert_parallel", 2, dict(GB300_TP, kimi_k3_all2all_backend="flashinfer_nvlink_one_sided"),
     "--all2all-backend flashinfer_nvlink_one_sided does nothing without expert parallelism"),
    ("all2all_with_one_dp_rank", 2, dict(GB300_TEP, kimi_k3_all2all_backend="flashinfer_nvlink_one_sided"),
     "is never used with one data-parallel rank"),
    ("flashinfer_nvlink_over_rdma", 2, dict(B300_DEP, kimi_k3_all2all_backend="flashinfer_nvlink_one_sided"),
     "is a FlashInfer multi-node NVLink (MNNVL) kernel, but the nodes talk over RDMA"),
    ("dcp_not_dividing_tp", 1, dict(B300_TP8, kimi_k3_extra_args=["--decode-context-parallel-size", "3"]),
     "--decode-context-parallel-size 3 does not divide the tensor-parallel size"),
    ("dcp_a2a_without_dcp", 1, dict(B300_TP8, kimi_k3_extra_args=["--dcp-comm-backend", "a2a"]),
     "--dcp-comm-backend a2a needs --decode-context-parallel-size > 1"),
    ("speculative_with_pipeline_parallel", 2,
     dict(B300_TP_PP, kimi_k3_extra_args=["--speculative-config", '{"method":"dspark","num_speculative_tokens":8}']),
     "speculative decoding (--speculative-config) is not allowed with pipeline parallelism"),
    ("spec_method_with_pipeline_parallel", 2, dict(B300_TP_PP, kimi_k3_extra_args=["--spec-method", "dspark"]),
     "speculative decoding (--spec-method dspark) is not allowed with pipeline parallelism"),
    ("elastic_ep_without_eplb", 4, dict(GB300_DEP, kimi_k3_dp_lb_mode="internal",
                                        kimi_k3_extra_args=["--enable-elastic-ep"]),
     "--enable-elastic-ep needs --enable-eplb"),
    ("elastic_ep_without_expert_parallel", 2, dict(GB300_TP, kimi_k3_extra_args=ELASTIC),
     "but expert parallelism is off"),
    ("elastic_ep_with_pipeline_parallel", 2, dict(B300_TP_PP, kimi_k3_extra_args=ELASTIC),
     "--enable-elastic-ep is not supported with pipeline parallelism"),
    ("elastic_ep_with_hybrid_or_external_lb", 4, dict(GB300_DEP, kimi_k3_extra_args=ELASTIC),
     "not hybrid or external load balancing"),
    ("elastic_ep_eplb_communicator", 4, dict(GB300_DEP, kimi_k3_dp_lb_mode="internal", kimi_k3_extra_args=ELASTIC + [
        "--eplb-config", json.dumps({"communicator": "torch_gloo"})]),
     "the EPLB communicator must be torch_nccl or pynccl"),
]


@pytest.mark.parametrize("rule,count,variables,fragment", RULES, ids=[r[0] for r in RULES])
def test_rule_refuses_its_example(rule, count, variables, fragment):
    r = plan(make_nodes(count, **variables))
    assert not r["ok"]
    hits = [e for e in r["errors"] if fragment in e["message"]]
    assert hits, r["errors"]
    source = [x for x in RECIPE["combination_rules"] if x["name"] == rule][0]["source"]
    assert hits[0]["message"].endswith("source: %s." % source) and hits[0]["fix"]


def test_every_rule_has_a_refused_example():
    assert sorted([r[0] for r in RULES] + ["pd_ucx_transport_without_device"]) == \
        sorted(r["name"] for r in RECIPE["combination_rules"])


def test_extra_args_rules_name_the_extra_args_variable():
    by_rule = dict((rule, (count, variables)) for rule, count, variables, _fragment in RULES)
    count, variables = by_rule["dcp_a2a_without_dcp"]
    r = plan(make_nodes(count, **variables))
    assert [e["variable"] for e in r["errors"]] == ["kimi_k3_extra_args"]
    count, variables = by_rule["all2all_with_one_dp_rank"]
    r = plan(make_nodes(count, **variables))
    assert [e["variable"] for e in r["errors"]] == ["kimi_k3_all2all_backend"]


def test_pd_transport_without_its_device_is_refused():
    r = pd_cluster(prefill={"kimi_k3_extra_env": {"UCX_TLS": "rc,gdr_copy"}})
    (e,) = r["errors"]
    assert e["variable"] == "kimi_k3_extra_env"
    assert e["message"].startswith("UCX_TLS names gdr_copy (/dev/gdrdrv), whose device the container does not get")


def test_pd_roles_get_the_devices_of_their_transports():
    r = pd_cluster()
    assert r["ok"], r["errors"]
    for host in ("prefill-1-0", "decode-1-0"):
        assert "/dev/infiniband:/dev/infiniband:rwm" in r["plans"][host]["container"]["devices"]
    r = pd_cluster(prefill={"kimi_k3_extra_env": {"UCX_TLS": "cuda_ipc,cuda_copy"}})
    assert r["ok"], r["errors"]
    devices = r["plans"]["prefill-1-0"]["container"]["devices"]
    assert devices == ["/dev/nvidia-caps-imex-channels/channel0:/dev/nvidia-caps-imex-channels/channel0:rwm"]


VALID = [
    (GB300_DEP, 4),
    (B300_DEP, 2),
    (dict(GB300_DEP, kimi_k3_dp_lb_mode="internal", kimi_k3_extra_args=ELASTIC), 4),
    (dict(B300_TP8, kimi_k3_features={"dcp": True}), 1),
    # MegaMoE with TP > 1 turns sequence parallelism on: the all2all kernels run with one DP rank
    (dict(GB300_TEP, kimi_k3_moe_backend="deep_gemm_mega_moe", kimi_k3_all2all_backend="flashinfer_nvlink_one_sided"),
     2),
]


@pytest.mark.parametrize("variables,count", VALID)
def test_valid_combinations_pass(variables, count):
    r = plan(make_nodes(count, **variables))
    assert r["ok"], r["errors"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["--eplb-config", "--eplb-config.communicator", "pynccl", "torch_gloo", "{",
                                 '{"communicator": "nixl"}', '{"communicator": 5}', "[1]", "null", "--x"]), max_size=6))
def test_eplb_communicator_reads_any_argv(argv):
    found = plan_combos.eplb_communicator(argv)
    assert found is None or found == "nixl" or found in argv + [""]
