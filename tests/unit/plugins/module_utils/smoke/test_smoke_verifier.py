"""K2-Vendor-Verifier's schema_accuracy and tool_call_f1, Wilson intervals, per-class and retry rates: exact values
on scripted responses."""
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import verifier as v

pytest.importorskip("jsonschema")

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer", "maximum": 7}},
    "required": ["city"]}}},
    {"type": "function", "function": {"name": "noop", "parameters": {}}},
    {"type": "function", "function": {"name": "mailer", "parameters": {
        "type": "object", "properties": {"to": {"type": "string", "format": "email"}}}}}]


def call(name, arguments):
    return {"id": "functions.%s:0" % name, "type": "function", "function": {"name": name, "arguments": arguments}}


def test_wilson_interval_exact_values():
    assert v.wilson_interval(0, 0) == (None, None)
    lo, hi = v.wilson_interval(8, 100)
    assert (round(lo, 6), round(hi, 6)) == (0.041093, 0.149981)
    lo, hi = v.wilson_interval(0, 10)
    assert (lo, round(hi, 6)) == (0.0, 0.277533)
    lo, hi = v.wilson_interval(10, 10)
    assert (round(lo, 6), hi) == (0.722467, 1.0)
    with pytest.raises(ValueError, match="k must be within 0..n"):
        v.wilson_interval(11, 10)


# (k, n) -> 95 % Wilson bounds and the verdict of the tool-call gate at 0.9 (bounds from an independent computation)
@pytest.mark.parametrize("k, n, bounds, passed", [
    (4, 4, [0.510109, 1.0], True),
    (3, 4, [0.300642, 0.954413], True),      # one recovered hiccup in the old 4 cases: passes
    (2, 4, [0.150039, 0.849961], False),
    (12, 12, [0.757506, 1.0], True),
    (11, 12, [0.64612, 0.985135], True),     # one hiccup in the quick profile's 12 cases
    (9, 12, [0.467695, 0.911058], True),
    (8, 12, [0.390622, 0.86188], False),
    (45, 50, [0.786398, 0.956524], True),
    (41, 50, [0.692039, 0.902298], True),
    (40, 50, [0.669629, 0.887562], False),   # 10 first-attempt failures in 50: fails
    (190, 200, [0.910422, 0.972617], True),
    (172, 200, [0.805101, 0.90133], True),
    (171, 200, [0.799513, 0.897106], False),
])
def test_interval_gate_exact_values(k, n, bounds, passed):
    gate = v.interval_gate(k, n, 0.9)
    assert gate == {"k": k, "n": n, "rate": round(k / float(n), 6), "ci95": bounds, "threshold": 0.9,
                    "passed": passed}


def test_interval_gate_without_a_measurement_does_not_pass():
    assert v.interval_gate(0, 0, 0.0) == {"k": 0, "n": 0, "rate": None, "ci95": [None, None], "threshold": 0.0,
                                          "passed": False}


@given(st.integers(min_value=1, max_value=5000), st.data())
def test_wilson_interval_contains_the_point_estimate(n, data):
    k = data.draw(st.integers(min_value=0, max_value=n))
    lo, hi = v.wilson_interval(k, n)
    assert 0.0 <= lo <= k / n <= hi <= 1.0


def test_call_validity_as_the_verifier_judges_it():
    assert v.k2vv_call_valid(call("get_weather", '{"city": "Oslo", "days": 3}'), TOOLS) is True
    assert v.k2vv_call_valid(call("get_weather", {"city": "Oslo"}), TOOLS) is True  # dict arguments are used as is
    assert v.k2vv_call_valid({"name": "get_weather", "arguments": '{"city": "Oslo"}'}, TOOLS) is True
    assert v.k2vv_call_valid(call("get_weather", '{"days": 9}'), TOOLS) is False  # schema
    assert v.k2vv_call_valid(call("get_weather", '{"city": "Oslo"'), TOOLS) is False  # JSON
    assert v.k2vv_call_valid(call("unknown", "{}"), TOOLS) is False  # no such tool
    assert v.k2vv_call_valid(call("noop", "{}"), TOOLS) is False  # empty schema: "if not schema" -> invalid
    assert v.k2vv_call_valid(call("mailer", '{"to": "not an email"}'), TOOLS) is True  # no format checking
    assert v.k2vv_call_valid({"function": {}}, TOOLS) is False  # missing name -> exception -> invalid


def test_response_validity_needs_tool_calls_finish_and_calls():
    good = [call("get_weather", '{"city": "Oslo"}')]
    assert v.k2vv_tool_calls_valid("tool_calls", good, TOOLS) is True
    assert v.k2vv_tool_calls_valid("tool_calls", good + [call("get_weather", "{}")], TOOLS) is False
    assert v.k2vv_tool_calls_valid("tool_calls", [], TOOLS) is None
    assert v.k2vv_tool_calls_valid("stop", good, TOOLS) is None


def test_summary_and_schema_accuracy_exact():
    records = [{"status": "success", "finish_reason": "tool_calls", "tool_calls_valid": True}] * 7 + [
        {"status": "success", "finish_reason": "tool_calls", "tool_calls_valid": False},
        {"status": "success", "finish_reason": "tool_calls", "tool_calls_valid": None},
        {"status": "success", "finish_reason": "stop", "tool_calls_valid": None},
        {"status": "success", "finish_reason": "length", "tool_calls_valid": None},
        {"status": "failed", "finish_reason": None, "tool_calls_valid": None}]
    s = v.k2vv_summary(records)
    assert s == {"success_count": 11, "failure_count": 1, "finish_stop": 1, "finish_tool_calls": 9,
                 "finish_others": 1, "finish_others_detail": {"length": 1}, "schema_validation_error_count": 2,
                 "successful_tool_call_count": 7, "schema_accuracy": 0.777778}
    assert v.k2vv_summary([])["schema_accuracy"] is None


def test_trigger_counts_and_f1_exact():
    pairs = [(True, "tool_calls")] * 6 + [(True, "stop")] * 2 + [(True, None)] + [(False, "tool_calls")] + [
        (False, "stop")] * 3 + [(False, "length")]
    counts = v.trigger_counts(pairs)
    assert counts == {"tp": 6, "fp": 1, "fn": 3, "tn": 4}
    assert v.tool_call_f1(counts) == {"precision": 0.857143, "recall": 0.666667, "f1": 0.75}


def test_f1_edge_cases():
    assert v.tool_call_f1({"tp": 0, "fp": 0, "fn": 0, "tn": 5}) == {"precision": None, "recall": None, "f1": None}
    assert v.tool_call_f1({"tp": 0, "fp": 2, "fn": 0, "tn": 1}) == {"precision": 0.0, "recall": None, "f1": 0.0}
    assert v.tool_call_f1({"tp": 0, "fp": 0, "fn": 3, "tn": 1}) == {"precision": None, "recall": 0.0, "f1": 0.0}
    assert v.tool_call_f1({"tp": 4, "fp": 0, "fn": 0, "tn": 0})["f1"] == 1.0


def test_rates_with_intervals():
    assert v.rate_with_interval(8, 100) == {"k": 8, "n": 100, "rate": 0.08, "ci95": [0.041093, 0.149981]}
    assert v.rate_with_interval(0, 0) == {"k": 0, "n": 0, "rate": None, "ci95": [None, None]}
    rates = v.class_failure_rates([[], ["no_call"], ["schema_violation", "leaked_control_tokens"], []],
                                  ("no_call", "schema_violation", "invalid_json"))
    assert {k: (r["k"], r["n"], r["rate"]) for k, r in rates.items()} == {
        "no_call": (1, 4, 0.25), "schema_violation": (1, 4, 0.25), "invalid_json": (0, 4, 0.0)}


def test_retry_rates():
    ok, bad = {"status": "ok"}, {"status": "schema_violation"}
    cases = [{"results": [ok]}, {"results": [bad, ok]}, {"results": [bad, bad, bad]}, {"results": [ok]}]
    r = v.retry_rates(cases)
    assert (r["first_attempt"]["k"], r["first_attempt"]["rate"]) == (2, 0.5)
    assert (r["after_retry"]["k"], r["after_retry"]["rate"]) == (3, 0.75)


def test_compare_with_previous():
    assert v.compare_with_previous({"schema_accuracy": 0.9}, None) == {}
    out = v.compare_with_previous({"schema_accuracy": 0.9, "tool_call_f1": 0.8, "first_attempt_success": 0.7},
                                  {"schema_accuracy": 1.0, "tool_call_f1": 0.75})
    assert out["schema_accuracy"] == {"before": 1.0, "after": 0.9, "delta": -0.1}
    assert out["tool_call_f1"] == {"before": 0.75, "after": 0.8, "delta": 0.05}
    assert out["first_attempt_success"] == {"before": None, "after": 0.7, "delta": None}
    assert out["after_retry_success"] == {"before": None, "after": None, "delta": None}


@given(st.one_of(st.none(), st.text(max_size=40), st.dictionaries(st.text(max_size=5), st.integers())),
       st.text(max_size=12))
def test_call_validity_never_raises(arguments, name):
    assert v.k2vv_call_valid({"function": {"name": name, "arguments": arguments}}, TOOLS) in (True, False)
    assert v.k2vv_call_valid({"function": {"name": "get_weather",
                                           "arguments": json.dumps({"city": name})}}, TOOLS) is True
