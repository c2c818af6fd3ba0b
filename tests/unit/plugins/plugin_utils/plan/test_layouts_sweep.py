"""The layouts sweep's judgement (plugins/plugin_utils/plan/layouts_sweep.py): which rows it launches, goodput under
an SLO, predicted against engine concurrency, and whether the layout `auto` picks holds - exact values on scripted
capacity reports; any report shape is judged or refused by name, never raised on."""
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import layouts_sweep as sweep

SLO = {"ttft_s": 10.0, "tpot_s": 0.5}


def _row(layout, rank, kind="single", status="ok", concurrency=113.78, kv_tokens=466032, length=4096):
    groups = [[None, None, layout, 2]] if kind == "single" else [["replica-1", "replica", "single_node_tp", 1],
                                                                 ["replica-2", "replica", "single_node_tp", 1]]
    return {"layout": layout, "rank": rank, "kind": kind, "status": status, "groups": groups,
            "max_model_len": length, "concurrency_at_target": concurrency,
            "deployments": [{"capacity": {"kv_tokens_per_engine": kv_tokens}}]}


def _step(concurrency, tput, ttft_p99, tpot_p99, failed=0):
    return {"concurrency": concurrency, "throughput_tok_s": tput, "failed_requests": failed,
            "ttft_s": {"p50": ttft_p99 / 2, "p99": ttft_p99}, "tpot_s": {"p99": tpot_p99},
            "itl_s": {"p50": tpot_p99 / 2, "p99": tpot_p99}}


def _capacity(steps, engine=113.7773, tokens=466032, length=4096):
    return {"points": [{"max_model_len": length, "kv": {"kv_cache_max_concurrency": engine},
                        "kv_cache_size_tokens": tokens, "peak_throughput_tok_s": 40.0, "steps": steps}]}


def test_choose_takes_single_rows_in_rank_order_up_to_top_and_says_why_it_skips():
    table = {"layouts": [_row("multi_node_tp", 1), _row("2 x single_node_tp", 2, kind="fleet"),
                         _row("multi_node_tp_pp", 3), _row("multi_node_tep", None, status="refused"),
                         _row("single_node_tp", 4)]}
    runs, skipped = sweep.choose(table, 2)
    assert [r["layout"] for r in runs] == ["multi_node_tp", "multi_node_tp_pp"]
    assert skipped == [("2 x single_node_tp", "a fleet layout: needs an inventory that lays the nodes out as "
                                              "2 x single_node_tp, with a router host (--layout-inventory)"),
                       ("single_node_tp", "beyond the top 2")]
    # given an inventory for it, the fleet runs in its rank
    runs, skipped = sweep.choose(table, 3, {"2 x single_node_tp": "inventories/sim-cpu-fleet"})
    assert [r["layout"] for r in runs] == ["multi_node_tp", "2 x single_node_tp", "multi_node_tp_pp"]
    assert skipped == [("single_node_tp", "beyond the top 3")]


def test_extra_vars_launch_the_rows_strategy_at_the_length():
    assert sweep.extra_vars(_row("multi_node_tp_pp", 2), 4096) == {"kimi_k3_strategy": "multi_node_tp_pp",
                                                                   "kimi_k3_max_model_len": 4096}
    # a fleet's strategies are its inventory's
    assert sweep.extra_vars(_row("2 x single_node_tp", 1, kind="fleet"), 2048) == {"kimi_k3_max_model_len": 2048}


def _dep(name, kind, strategy, nnodes):
    return {"name": name, "kind": kind, "strategy": strategy, "nnodes": nnodes}


def test_layout_of_names_a_plans_deployments_as_the_table_does():
    assert sweep.layout_of([_dep("main", "single", "multi_node_tp", 2)]) == "multi_node_tp"
    assert sweep.layout_of([_dep("replica-1", "replica", "single_node_tp", 1),
                            _dep("replica-2", "replica", "single_node_tp", 1)]) == "2 x single_node_tp"
    assert sweep.layout_of([_dep("decode-1", "decode", "multi_node_dep", 2),
                            _dep("prefill-1", "prefill", "multi_node_tep", 2)]) == \
        "PD multi_node_tep x2 + multi_node_dep x2"
    # unequal replicas, an unknown mix, nothing: no name of the table
    assert sweep.layout_of([_dep("replica-1", "replica", "single_node_tp", 1),
                            _dep("replica-2", "replica", "multi_node_tp", 2)]) is None
    assert sweep.layout_of([_dep("a", "replica", "x", 1), _dep("b", "prefill", "y", 1)]) is None
    assert sweep.layout_of([]) is None and sweep.layout_of(None) is None


def test_predicted_kv_tokens_add_up_every_engine_of_a_fleet():
    fleet = dict(_row("2 x single_node_tp", 1, kind="fleet"),
                 deployments=[{"capacity": {"kv_tokens_per_engine": 38832, "engines": 1}},
                              {"capacity": {"kv_tokens_per_engine": 38832, "engines": 1}}])
    r = sweep.measured(fleet, _capacity([], engine=226.0, tokens=77664), SLO)
    assert (r["predicted_kv_tokens"], r["engine_kv_tokens"]) == (77664, 77664)
    fleet["deployments"][1]["capacity"]["kv_tokens_per_engine"] = None
    assert sweep.measured(fleet, _capacity([]), SLO)["predicted_kv_tokens"] is None


def test_goodput_is_the_best_step_within_the_slo():
    steps = [_step(1, 10.0, 0.3, 0.03), _step(2, 19.0, 0.5, 0.04), _step(4, 30.0, 12.0, 0.05),  # TTFT over
             _step(8, 35.0, 1.0, 0.6),                                                            # TPOT over
             _step(16, 50.0, 1.0, 0.1, failed=1)]                                                 # a failure
    value, step = sweep.goodput(steps, SLO)
    assert (value, step["concurrency"]) == (19.0, 2)
    assert sweep.goodput([_step(1, 5.0, 11.0, 0.1)], SLO) == (0.0, None)
    assert sweep.goodput([], SLO) == (0.0, None)
    # a step exactly at the SLO counts; equal throughput goes to the lower concurrency
    assert sweep.goodput([_step(4, 7.0, 10.0, 0.5), _step(2, 7.0, 1.0, 0.1)], SLO)[1]["concurrency"] == 2


def test_measured_sets_the_prediction_beside_the_engine():
    steps = [_step(1, 10.0, 0.3, 0.03), _step(2, 19.0, 0.5, 0.04)]
    r = sweep.measured(_row("multi_node_tp", 1, concurrency=113.78), _capacity(steps), SLO)
    assert r == {"layout": "multi_node_tp", "rank": 1, "max_model_len": 4096, "measured": True,
                 "predicted_concurrency": 113.78, "predicted_kv_tokens": 466032,
                 "engine_concurrency": 113.7773, "engine_kv_tokens": 466032, "concurrency_error_pct": 0.002,
                 "prediction_holds": True, "goodput_tok_s": 19.0, "peak_throughput_tok_s": 40.0,
                 "at_concurrency": 2, "ttft_p50_s": 0.25, "ttft_p99_s": 0.5, "itl_p50_s": 0.02, "itl_p99_s": 0.04}
    off = sweep.measured(_row("multi_node_tp_pp", 2, concurrency=116.1), _capacity([], engine=113.7773), SLO)
    assert (off["concurrency_error_pct"], off["prediction_holds"], off["goodput_tok_s"]) == (2.041, False, 0.0)
    edge = sweep.measured(_row("x", 3, concurrency=102.0), _capacity([], engine=100.0), SLO)
    assert (edge["concurrency_error_pct"], edge["prediction_holds"]) == (2.0, True)


def test_a_report_without_the_length_is_not_measured_and_says_so():
    r = sweep.measured(_row("multi_node_tp", 1, length=8192), _capacity([]), SLO)
    assert r["measured"] is False and r["error"] == "the capacity report has no point at max-model-len 8192"


def test_verdict_auto_within_ten_percent_of_the_best():
    results = [{"layout": "multi_node_tp", "measured": True, "goodput_tok_s": 45.0, "prediction_holds": True},
               {"layout": "multi_node_tp_pp", "measured": True, "goodput_tok_s": 50.0, "prediction_holds": True},
               {"layout": "single_node_tp", "measured": False}]
    assert sweep.verdict(results, "multi_node_tp") == {
        "best": "multi_node_tp_pp", "auto": "multi_node_tp", "auto_goodput_pct_of_best": 90.0, "auto_holds": True,
        "predictions_hold": True}
    results[0]["goodput_tok_s"] = 44.99
    v = sweep.verdict(results, "multi_node_tp")
    assert (v["auto_goodput_pct_of_best"], v["auto_holds"]) == (89.98, False)
    results[1]["prediction_holds"] = False
    assert sweep.verdict(results, "multi_node_tp")["predictions_hold"] is False
    # auto's layout not measured, or nothing measured: nothing holds
    assert sweep.verdict(results, "single_node_tp")["auto_holds"] is False
    assert sweep.verdict([], "multi_node_tp") == {"best": None, "auto": "multi_node_tp",
                                                  "auto_goodput_pct_of_best": None, "auto_holds": False,
                                                  "predictions_hold": False}


def test_markdown_has_a_row_per_layout_the_skipped_and_the_verdict():
    results = [sweep.measured(_row("multi_node_tp", 1), _capacity([_step(2, 19.0, 0.5, 0.04)]), SLO),
               {"layout": "multi_node_tp_pp", "rank": 2, "measured": False, "error": "launch failed: x"}]
    report = {"max_model_len": 4096, "slo": SLO, "results": results,
              "skipped": [("2 x single_node_tp", "a fleet layout needs a router host")],
              "verdict": sweep.verdict(results, "multi_node_tp")}
    text = sweep.markdown(report)
    assert "| 1 | multi_node_tp | 113.78 | 113.78 | 0.002 | 466,032 | 466,032 | 19.00 | 2 | 0.250 / 0.500 | " \
           "0.0200 / 0.0400 |" in text
    assert "| 2 | multi_node_tp_pp | not measured: launch failed: x |" in text
    assert "- 2 x single_node_tp: not launched, a fleet layout needs a router host" in text
    assert "`kimi_k3_strategy: auto` picks multi_node_tp: 100.00 % of the best goodput (holds if >= 90 %: yes)" in text


_NUM = st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=False, min_value=0, max_value=1e6))
_STEP = st.fixed_dictionaries({"concurrency": st.integers(0, 512), "throughput_tok_s": _NUM,
                               "failed_requests": st.integers(0, 3),
                               "ttft_s": st.fixed_dictionaries({"p99": _NUM}),
                               "tpot_s": st.one_of(st.none(), st.fixed_dictionaries({"p99": _NUM}))})


@settings(max_examples=200, deadline=None)
@given(st.lists(_STEP, max_size=6), _NUM, st.sampled_from([4096, 8192]))
def test_any_capacity_report_is_judged_never_raised_on(steps, engine, length):
    r = sweep.measured(_row("multi_node_tp", 1, length=length), _capacity(steps, engine=engine), SLO)
    assert r["measured"] is (length == 4096)
    if r["measured"]:
        assert r["goodput_tok_s"] >= 0.0 and isinstance(r["prediction_holds"], bool)
