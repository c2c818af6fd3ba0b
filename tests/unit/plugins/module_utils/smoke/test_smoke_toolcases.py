"""The verifier-scale tool cases: how many, which kinds, schemas valid, Kimi's id format judged exactly."""
import collections

import pytest

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import toolcases as tc

jsonschema = pytest.importorskip("jsonschema")


def test_case_mix_and_stable_ids():
    cases = tc.build_cases()
    assert len(cases) == 53
    assert collections.Counter(c["kind"] for c in cases) == {
        "single": 36, "parallel": 6, "no_call": 5, "multi_turn_result": 3, "multi_turn_next": 3}
    assert len({c["id"] for c in cases}) == 53
    assert [c["id"] for c in cases] == [c["id"] for c in tc.build_cases()]
    assert all(c["expect_call"] == bool(c["expected_tools"]) for c in cases)
    assert all(set(c["expected_tools"]) <= {t["function"]["name"] for t in c["tools"]} for c in cases)


def test_every_schema_is_valid_draft_2020_12_and_the_mix_is_diverse():
    kinds = collections.Counter()
    for tool in tc.TOOLS:
        schema = tool["function"]["parameters"]
        jsonschema.Draft202012Validator.check_schema(schema)
        for prop in schema["properties"].values():
            kinds.update(k for k in ("enum", "minimum", "exclusiveMinimum", "pattern", "format", "items",
                                     "properties", "uniqueItems") if k in prop)
        kinds["optional"] += len(set(schema["properties"]) - set(schema.get("required", [])))
    assert all(kinds[k] >= 1 for k in ("enum", "minimum", "exclusiveMinimum", "pattern", "format", "items",
                                       "properties", "uniqueItems", "optional")), kinds


def test_id_format_errors_exact():
    calls = [{"id": "functions.get_weather:0", "name": "get_weather"},
             {"id": "functions.lookup_order:1", "name": "lookup_order"}]
    assert tc.id_format_errors(calls, [{"role": "user", "content": "x"}]) == []
    history = [{"role": "assistant", "tool_calls": [{"id": "functions.get_weather:0"}]}, {"role": "tool"}]
    assert tc.prior_calls(history) == 1
    assert tc.id_format_errors([{"id": "functions.lookup_order:1", "name": "lookup_order"}], history) == []
    # the server's own ids (vLLM 0.32.0's kimi_k3 parser gives calls none) pass; Kimi's must name and count right
    assert tc.id_format_errors([{"id": "chatcmpl-tool-abc", "name": "x"}, {"id": "functions.y:1", "name": "z"},
                                {"id": None, "name": "w"}, {"id": "chatcmpl-tool-abc", "name": "v"},
                                {"id": "functions.u", "name": "u"}], []) == [
        "call 1: id 'functions.y:1' is not functions.z:1",
        "call 2: id None is missing or repeated",
        "call 3: id 'chatcmpl-tool-abc' is missing or repeated",
        "call 4: id 'functions.u' is not functions.u:4"]
    assert tc.id_format_errors([{"id": "functions.x:0", "name": "x"}], history) == [
        "call 0: id 'functions.x:0' is not functions.x:1"]


def test_attempt_judgement_classes_and_verifier_validity():
    from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import toolgroup as tg
    single = next(c for c in tc.build_cases() if c["id"] == "single-get_weather-0")
    no_call = next(c for c in tc.build_cases() if c["kind"] == "no_call")

    def res(calls, finish, ok=True, content=""):
        return {"ok": ok, "error": None if ok else "HTTP 500: boom", "finish_reason": finish, "content": content,
                "reasoning": "", "tool_calls": calls}

    good = {"id": "functions.get_weather:0", "name": "get_weather", "arguments": '{"city": "Oslo", "unit": "celsius"}'}
    assert tg.judge_attempt(single, res([good], "tool_calls"), "stream") == {
        "status": "ok", "classes": [], "finish_reason": "tool_calls", "k2vv_valid": True, "error": "",
        "http_ok": True}
    assert tg.judge_attempt(single, res([dict(good, id="chatcmpl-tool-1")], "tool_calls"), "stream")["classes"] == []
    bad_id = dict(good, id="functions.get_weather:3")
    assert tg.judge_attempt(single, res([bad_id], "tool_calls"), "stream")["classes"] == ["bad_id"]
    empty_entry = {"id": None, "name": None, "arguments": ""}
    got = tg.judge_attempt(single, res([good, empty_entry], "tool_calls"), "non_stream")
    assert got["status"] == "ok" and got["k2vv_valid"] is False  # the verifier counts the empty entry
    assert tg.judge_attempt(single, res([], None), "stream")["finish_reason"] == "stop"
    assert tg.judge_attempt(single, res([], None), "non_stream")["classes"] == ["no_call"]
    other = dict(good, id="functions.lookup_order:0", name="lookup_order", arguments='{"order_id": "x"}')
    assert tg.judge_attempt(single, res([other], "tool_calls"), "stream")["classes"] == ["wrong_tool"]
    assert tg.judge_attempt(no_call, res([], "stop", content="hello"), "stream")["status"] == "ok"
    assert tg.judge_attempt(no_call, res([good], "tool_calls"), "stream")["classes"] == ["unexpected_call"]
    assert tg.judge_attempt(single, res([], None, ok=False), "stream") == {
        "status": "error", "classes": ["error"], "finish_reason": None, "k2vv_valid": None,
        "error": "HTTP 500: boom", "http_ok": False}


def test_group_figures_from_scripted_cases():
    from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import toolgroup as tg

    def attempt(status, finish, valid, classes=()):
        return {"status": status, "classes": list(classes), "finish_reason": finish, "k2vv_valid": valid,
                "http_ok": True, "error": ""}

    ok = attempt("ok", "tool_calls", True)
    cases = [{"expect_call": True, "results": [ok]},
             {"expect_call": True, "results": [attempt("schema_violation", "tool_calls", False,
                                                       ["schema_violation"]), ok]},
             {"expect_call": True, "results": [attempt("no_call", "stop", None, ["no_call"])] * 3},
             {"expect_call": False, "results": [attempt("ok", "stop", None)]},
             {"expect_call": False, "results": [attempt("unexpected_call", "tool_calls", True,
                                                        ["unexpected_call"])]}]
    f = tg.figures(cases)
    assert f["k2vv"]["finish_tool_calls"] == 3 and f["k2vv"]["successful_tool_call_count"] == 2
    assert f["schema_accuracy"] == 0.666667
    assert f["trigger"] == {"tp": 2, "fp": 1, "fn": 1, "tn": 1}
    assert (f["tool_call_precision"], f["tool_call_recall"], f["tool_call_f1"]) == (0.666667, 0.666667, 0.666667)
    assert (f["first_attempt_success"], f["after_retry_success"]) == (0.4, 0.6)
    assert (f["failure_rates"]["no_call"]["k"], f["failure_rates"]["no_call"]["n"]) == (3, 8)
    assert f["failure_rates"]["schema_violation"]["rate"] == 0.125
