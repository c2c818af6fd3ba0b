import asyncio
import json

import pytest
from jsonschema import SchemaError

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import tool_validation as tv

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "minLength": 1},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
PING = {"type": "function", "function": {"name": "ping", "parameters": {"type": "object", "properties": {}}}}
EVENT = {"type": "function", "function": {"name": "book", "parameters": {
    "type": "object", "properties": {"date": {"type": "string", "format": "date"}}, "required": ["date"]}}}


@pytest.fixture
def toolset():
    return tv.ToolSet([WEATHER, PING, EVENT])


def call(name, arguments):
    return {"id": "c1", "name": name, "arguments": arguments}


def test_ok_call(toolset):
    res = tv.classify_turn(toolset, content="", tool_calls=[call("get_weather", '{"city": "Oslo", "unit": "celsius"}')],
                           expected_tool="get_weather")
    assert res["status"] == "ok"
    assert res["classes"] == []
    assert res["calls"][0]["arguments"] == {"city": "Oslo", "unit": "celsius"}
    assert res["expected_tool_called"] is True


def test_no_call(toolset):
    res = tv.classify_turn(toolset, content="The weather in Oslo is fine.", tool_calls=[])
    assert res["status"] == "no_call"
    assert "Oslo" in res["error"]


def test_entry_without_name_and_arguments_is_no_call(toolset):
    # K2 #54701-style empty delta: a slot that never received a name or arguments
    res = tv.classify_turn(toolset, tool_calls=[{"id": None, "name": None, "arguments": None}])
    assert res["status"] == "no_call"


def test_invalid_json(toolset):
    res = tv.classify_turn(toolset, tool_calls=[call("get_weather", '{"city": "Oslo", "unit": ')])
    assert res["status"] == "invalid_json"
    assert "not valid JSON" in res["error"]


def test_json_that_is_not_an_object_is_invalid_json(toolset):
    res = tv.classify_turn(toolset, tool_calls=[call("get_weather", '["Oslo"]')])
    assert res["status"] == "invalid_json"


def test_schema_violation_wrong_type(toolset):
    # the K3 parser falls back to a raw string when a non-string value fails json.loads: wrong type, valid JSON
    res = tv.classify_turn(toolset, tool_calls=[call("get_weather", '{"city": "Oslo", "unit": "celsius", "days": "3"}')])
    assert res["status"] == "schema_violation"
    assert "days" in res["error"]


def test_schema_violation_missing_required_and_extra(toolset):
    res = tv.classify_turn(toolset, tool_calls=[call("get_weather", '{"city": "Oslo", "country": "NO"}')])
    assert res["status"] == "schema_violation"
    assert "2 error(s)" in res["error"]


def test_format_is_checked(toolset):
    bad = tv.classify_turn(toolset, tool_calls=[call("book", '{"date": "next tuesday"}')])
    good = tv.classify_turn(toolset, tool_calls=[call("book", '{"date": "2026-08-14"}')])
    assert bad["status"] == "schema_violation"
    assert good["status"] == "ok"


def test_unknown_tool(toolset):
    res = tv.classify_turn(toolset, tool_calls=[call("get_wether", '{"city": "Oslo"}')])
    assert res["status"] == "unknown_tool"
    assert "get_weather" in res["error"]


@pytest.mark.parametrize("args", [None, "", "   "])
def test_empty_arguments(toolset, args):
    res = tv.classify_turn(toolset, tool_calls=[call("get_weather", args)])
    assert res["status"] == "empty_arguments"


def test_empty_object_is_empty_arguments_only_when_schema_requires(toolset):
    assert tv.classify_turn(toolset, tool_calls=[call("get_weather", "{}")])["status"] == "empty_arguments"
    assert tv.classify_turn(toolset, tool_calls=[call("ping", "{}")])["status"] == "ok"


@pytest.mark.parametrize("text,marker", [
    ("Sure.<|close|>message<|sep|>", "<|close|>"),
    ('<|open|>call tool="get_weather" index="1"', "<|open|>"),
    ("<|tool_calls_section_begin|> functions.get_weather:0", "<|tool_calls_section"),
    ("<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{}", "<|tool_call"),
])
def test_leaked_control_tokens_in_content(toolset, text, marker):
    res = tv.classify_turn(toolset, content=text, tool_calls=[call("ping", "{}")])
    assert res["status"] == "leaked_control_tokens"
    assert marker in res["leaks"]


def test_leak_in_reasoning_counts_and_takes_precedence(toolset):
    res = tv.classify_turn(toolset, content="", reasoning="thinking <|open|>tools<|sep|>", tool_calls=[])
    assert res["status"] == "leaked_control_tokens"
    assert res["classes"] == ["leaked_control_tokens", "no_call"]


def test_section_marker_alone_does_not_report_tool_call_marker():
    assert tv.find_leaks("x <|tool_calls_section_begin|> y") == ["<|tool_calls_section"]
    assert tv.find_leaks("plain text", None, "") == []


def test_several_calls_collect_all_classes(toolset):
    res = tv.classify_turn(toolset, tool_calls=[call("nope", "{}"), call("get_weather", "{oops")])
    assert res["classes"] == ["unknown_tool", "invalid_json"]
    assert res["status"] == "unknown_tool"


def test_expected_tool_not_called_is_reported_not_failed(toolset):
    res = tv.classify_turn(toolset, tool_calls=[call("ping", "{}")], expected_tool="get_weather")
    assert res["status"] == "ok"
    assert res["expected_tool_called"] is False


def test_invalid_schema_rejected():
    with pytest.raises(SchemaError):
        tv.ToolSet([{"type": "function", "function": {"name": "x", "parameters": {"type": "objekt"}}}])


def test_stream_accumulation_concatenates_fragments_per_index(toolset):
    acc = {}
    tv.accumulate_stream_tool_calls(acc, [{"index": 0, "id": "a", "function": {"name": "get_weather", "arguments": ""}}])
    tv.accumulate_stream_tool_calls(acc, [{"index": 0, "function": {"arguments": '{"city": "Os'}}])
    tv.accumulate_stream_tool_calls(acc, [{"index": 1, "id": "b", "function": {"name": "ping", "arguments": "{}"}},
                                          {"index": 0, "function": {"arguments": 'lo", "unit": "celsius"}'}}])
    calls = tv.stream_calls_list(acc)
    assert [c["name"] for c in calls] == ["get_weather", "ping"]
    assert json.loads(calls[0]["arguments"]) == {"city": "Oslo", "unit": "celsius"}
    assert tv.classify_turn(toolset, tool_calls=calls)["status"] == "ok"


def test_normalise_sdk_objects():
    class Fn:
        def __init__(self):
            self.name = "ping"
            self.arguments = "{}"

    class Call:
        def __init__(self):
            self.id = "x"
            self.function = Fn()

    assert tv.normalise_tool_calls([Call()]) == [{"id": "x", "name": "ping", "arguments": "{}"}]


def test_retries_count_per_class_and_stop_at_ok():
    outcomes = iter([{"status": "no_call"}, {"status": "invalid_json"}, {"status": "ok"}, {"status": "no_call"}])

    async def attempt():
        res = dict(next(outcomes))
        res.setdefault("classes", [])
        return res

    out = asyncio.run(tv.run_with_retries_async(attempt, retries=5))
    assert out["status"] == "ok"
    assert out["attempts"] == 3
    assert out["retries"] == {"no_call": 1, "invalid_json": 1}
    assert out["first_failure_class"] == "no_call"


def test_retries_exhausted_and_exceptions_recorded():
    async def attempt():
        raise RuntimeError("HTTP 500")

    out = asyncio.run(tv.run_with_retries_async(attempt, retries=2))
    assert out["status"] == "error"
    assert out["attempts"] == 3
    assert out["retries"] == {"error": 2}
    assert "HTTP 500" in out["results"][0]["error"]


def test_summarise_cases_rates():
    a = {"attempts": 2, "status": "ok", "retries": {"no_call": 1},
         "results": [{"status": "no_call"}, {"status": "ok"}]}
    b = {"attempts": 1, "status": "ok", "retries": {}, "results": [{"status": "ok"}]}
    s = tv.summarise_cases([a, b])
    assert s["attempt_success_rate"] == round(2 / 3, 4)
    assert s["first_attempt_success_rate"] == 0.5
    assert s["final_success_rate"] == 1.0
    assert s["failures"] == {"no_call": 1}
    assert s["retries"] == {"no_call": 1}


def test_the_last_failed_attempt_is_not_counted_as_a_retry():
    outcomes = iter([{"status": "schema_violation"}, {"status": "schema_violation"}])

    async def attempt():
        return dict(next(outcomes), classes=[])

    out = asyncio.run(tv.run_with_retries_async(attempt, retries=1))
    assert out["status"] == "schema_violation"
    assert out["attempts"] == 2
    assert out["retries"] == {"schema_violation": 1}
