"""The verifier-scale tool cases: how many, which kinds, schemas valid, Kimi's id format judged exactly."""
import collections

import pytest

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils import smoke_toolcases as tc

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
    assert tc.id_format_errors([{"id": "chatcmpl-tool-abc", "name": "x"}, {"id": "functions.y:1", "name": "z"},
                                {"id": None, "name": "w"}], []) == [
        "call 0: id 'chatcmpl-tool-abc' is not functions.x:0",
        "call 1: id 'functions.y:1' is not functions.z:1",
        "call 2: id None is not functions.w:2"]
    assert tc.id_format_errors([{"id": "functions.x:0", "name": "x"}], history) == [
        "call 0: id 'functions.x:0' is not functions.x:1"]
