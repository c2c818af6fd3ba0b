"""SSE decoding and the smoke figures on scripted timelines: bytes + the times they arrived -> exact values.

Times are binary fractions (0.125, 0.25, ...) so every expected figure is exact. The timelines follow vLLM's
streamed chat format (llm-serving-measurement.md §1, §6.1): a role-only first chunk, reasoning deltas, content
deltas, one-delta K3 tool calls, a finish chunk, the usage chunk (empty ``choices``) and ``data: [DONE]``.
"""
import json

import pytest

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import measure as sm
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import sse
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import stats as smoke_stats

T0 = 100.0


def ev(delta=None, finish=None, usage=None, crlf=False):
    """One SSE event (bytes) of a chat completion chunk."""
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
             "choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if usage is not None:
        chunk["usage"] = usage
    nl = "\r\n" if crlf else "\n"
    return ("data: " + json.dumps(chunk) + nl + nl).encode()


ROLE = ev({"role": "assistant", "content": ""})
DONE = b"data: [DONE]\n\n"


def usage(completion, prompt=7):
    return ev(usage={"prompt_tokens": prompt, "completion_tokens": completion,
                     "total_tokens": prompt + completion})


def measure(reads, end=None, error=None):
    """Timeline ``[(seconds after T0, bytes), ...]`` -> the request result."""
    return sm.measure_stream(T0, sse.decode_sse([(T0 + t, b) for t, b in reads]),
                             end=None if end is None else T0 + end, error=error)


REASONING_FIRST = [
    (0.25, ROLE),                                   # role-only chunk: not a token
    (0.5, ev({"reasoning": "think"})),              # first token: reasoning
    (0.75, ev({"content": "Hel"})),
    (1.25, ev({"content": "lo"}, finish="stop")),
    (1.5, usage(5)),                                # usage chunk: counts tokens, is not a token event
    (1.5, DONE),
]


def test_reasoning_first_stream_figures():
    r = measure(REASONING_FIRST)
    assert r["ok"] is True and r["error"] is None and r["done"] is True
    assert r["ttft_s"] == 0.5                        # first reasoning delta, not the role chunk (0.25)
    assert r["ttft_reasoning_s"] == 0.5
    assert r["ttft_content_s"] == 0.75
    assert r["itl_s"] == [0.25, 0.5]                 # gaps between token events, not from the request start
    assert r["e2e_s"] == 1.25                        # last token event; the usage chunk at 1.5 does not count
    assert (r["prompt_tokens"], r["output_tokens"]) == (7, 5)
    assert r["finish_reason"] == "stop"
    assert (r["content"], r["reasoning"]) == ("Hello", "think")
    assert r["chunks"] == 5
    assert sm.request_tpot(r) == 0.1875              # (1.25 - 0.5) / (5 - 1)


def test_reasoning_keys_name_the_delta_keys_that_carried_reasoning():
    assert measure(REASONING_FIRST)["reasoning_keys"] == ["reasoning"]
    old = measure([(0.5, ev({"reasoning_content": "old"})), (1.0, ev({"content": "x"}, finish="stop"))])
    assert old["reasoning_keys"] == ["reasoning_content"]
    both = measure([(0.5, ev({"reasoning_content": "a", "reasoning": "a"})),
                    (1.0, ev({"content": "x"}, finish="stop"))])
    assert both["reasoning_keys"] == ["reasoning", "reasoning_content"]


def test_reasoning_content_is_the_fallback_field():
    r = measure([(0.5, ev({"reasoning_content": "old"})), (1.0, ev({"content": "x"}, finish="stop"))])
    assert r["reasoning"] == "old" and r["ttft_reasoning_s"] == 0.5 and r["ttft_content_s"] == 1.0


def test_tool_call_only_stream():
    call = {"index": 0, "id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Oslo", "unit": "celsius"}'}}
    r = measure([(0.125, ROLE), (2.0, ev({"tool_calls": [call]}, finish="tool_calls")), (2.25, usage(12)),
                 (2.25, DONE)])
    assert r["ok"] is True
    assert r["ttft_s"] == 2.0 and r["ttft_content_s"] is None and r["ttft_reasoning_s"] is None
    assert r["itl_s"] == [] and r["e2e_s"] == 2.0
    assert r["content"] == "" and r["finish_reason"] == "tool_calls"
    assert r["tool_calls"] == [{"id": "call_1", "name": "get_weather",
                                "arguments": '{"city": "Oslo", "unit": "celsius"}'}]
    assert sm.request_tpot(r) == 0.0                 # one delta for all 12 tokens


def test_tool_call_fragments_are_joined_and_each_fragment_is_a_token_event():
    first = {"index": 0, "id": "call_9", "type": "function", "function": {"name": "lookup_order", "arguments": ""}}
    rest = {"index": 0, "function": {"arguments": '{"order_id": "B-2041"}'}}
    r = measure([(0.5, ev({"tool_calls": [first]})), (0.625, ev({"tool_calls": [rest]}, finish="tool_calls")),
                 (0.75, DONE)])
    assert r["tool_calls"] == [{"id": "call_9", "name": "lookup_order", "arguments": '{"order_id": "B-2041"}'}]
    assert r["ttft_s"] == 0.5 and r["itl_s"] == [0.125] and r["e2e_s"] == 0.625


def test_usage_only_stream_is_a_failed_request_without_ttft():
    r = measure([(0.25, ROLE), (0.5, ev({}, finish="length")), (0.75, usage(0)), (0.75, DONE)])
    assert r["ok"] is False
    assert r["error"] == "no token in the stream (finish_reason=length, completion_tokens=0)"
    assert r["ttft_s"] is None and r["itl_s"] == []
    assert r["e2e_s"] == 0.75                        # a failed request: the time it ended
    assert r["output_tokens"] == 0 and r["chunks"] == 3


def test_cut_stream_is_a_failed_request():
    r = measure([(0.5, ev({"reasoning": "a"})), (1.0, ev({"content": "b"}))], end=1.5)
    assert r["ok"] is False
    assert r["error"] == "stream cut: ended after 2 token chunk(s) without finish_reason or [DONE]"
    assert r["ttft_s"] == 0.5 and r["itl_s"] == [0.5]
    assert r["e2e_s"] == 1.5


def test_finish_reason_without_done_completes():
    r = measure([(0.5, ev({"content": "only"}, finish="stop"))])
    assert r["ok"] is True and r["done"] is False and r["e2e_s"] == 0.5


def test_done_without_finish_reason_completes():
    r = measure([(0.5, ev({"content": "a"})), (0.75, DONE)])
    assert r["ok"] is True and r["finish_reason"] is None


def test_error_event_ends_the_stream_and_fails_it():
    err = b'data: {"error": {"message": "engine died mid-stream", "code": 500}}\n\n'
    r = measure([(0.5, ev({"content": "partial"})), (0.75, err), (1.0, ev({"content": "ignored"}))], end=1.0)
    assert r["ok"] is False and r["error"] == "stream error: engine died mid-stream"
    assert r["content"] == "partial" and r["e2e_s"] == 1.0


def test_error_event_without_message():
    r = measure([(0.5, b'data: {"error": {"code": 500}}\n\n')])
    assert r["error"] == "stream error: An error occurred during streaming"
    assert sm.stream_error_text({"error": "plain text"}) == "plain text"
    assert sm.stream_error_text({"error": {"message": ""}}) == "An error occurred during streaming"
    assert sm.stream_error_text({"error": {"message": 42}}) == "An error occurred during streaming"


def test_invalid_json_event_fails_the_stream():
    r = measure([(0.5, ev({"content": "a"})), (0.75, b"data: {not json\n\n")])
    assert r["ok"] is False and r["error"] == "stream error: event is not JSON: {not json"


def test_transport_error_wins_over_the_events():
    r = measure(REASONING_FIRST[:3], end=2.0, error="connection error: reset")
    assert r["ok"] is False and r["error"] == "connection error: reset" and r["e2e_s"] == 2.0
    assert r["ttft_s"] == 0.5


def test_events_after_done_are_ignored():
    r = measure([(0.5, ev({"content": "a"})), (0.75, DONE), (1.0, ev({"content": "late"}))])
    assert r["content"] == "a" and r["e2e_s"] == 0.5 and r["itl_s"] == []


def test_non_object_json_is_ignored():
    r = measure([(0.25, b"data: 42\n\n"), (0.5, ev({"content": "a"}, finish="stop"))])
    assert r["ok"] is True and r["chunks"] == 1 and r["ttft_s"] == 0.5


def test_events_of_one_read_share_its_timestamp():
    both = ev({"content": "a"}) + ev({"content": "b"}, finish="stop")
    r = measure([(0.5, both)])
    assert r["ttft_s"] == 0.5 and r["itl_s"] == [0.0] and r["content"] == "ab"


# ------------------------------------------------------------------------------------------------ SSE decoding

def test_split_reads_crlf_comments_and_fields():
    event = ev({"content": "Hello"}, crlf=True)
    reads = [(1.0, b": keep-alive\r\n\r\n"), (1.5, event[:17]), (2.0, event[17:]),
             (2.5, b"event: message\nid: 7\nretry: 10\ndata: [DONE]\n\n")]
    events = sse.decode_sse(reads)
    assert [t for t, _p in events] == [2.0, 2.5]     # an event is complete when its blank line arrives
    assert events[0][1]["choices"][0]["delta"] == {"content": "Hello"}
    assert events[1][1] == sse.DONE


def test_multi_line_data_is_joined():
    events = sse.decode_sse([(1.0, b'data: {"a":\ndata: 1}\n\n')])
    assert events == [(1.0, {"a": 1})]


def test_trailing_event_without_blank_line_counts_at_close():
    dec = sse.SSEDecoder()
    assert dec.feed(b'data: {"a": 1}', 1.0) == []
    assert dec.close(3.0) == [(3.0, {"a": 1})]
    assert sse.decode_sse([(1.0, b'data: {"b": 2}\n')], end=4.0) == [(4.0, {"b": 2})]
    assert sse.decode_sse([(1.0, b"data: [DONE]")]) == [(1.0, sse.DONE)]


def test_blank_lines_without_data_are_no_event():
    assert sse.decode_sse([(1.0, b"\n\n: ping\n\n\r\n")]) == []
    assert sse.decode_sse([]) == []


def test_invalid_event_text():
    (t, p), = sse.decode_sse([(1.0, b"data: nope\n\n")])
    assert p == sse.InvalidEvent("nope") and p != "nope" and repr(p) == "InvalidEvent('nope')"


# ------------------------------------------------------------------------------------------------ aggregates

def _second_request():
    """TTFT 1.0, gaps 0.25/0.25/0.5, E2E 2.0, 9 tokens."""
    return measure([(1.0, ev({"content": "a"})), (1.25, ev({"content": "b"})), (1.5, ev({"content": "c"})),
                    (2.0, ev({"content": "d"}, finish="stop")), (2.0, usage(9, prompt=3)), (2.0, DONE)])


def test_aggregate_of_completed_requests():
    first, second = measure(REASONING_FIRST), _second_request()
    failed = measure([(0.5, ev({"content": "x"}))], end=0.75)          # cut: not in the figures
    first["client_queue_s"], second["client_queue_s"], failed["client_queue_s"] = 0.0, 0.5, 9.0
    agg = sm.aggregate([first, second, failed], wall_s=2.5)
    assert (agg["requests"], agg["failed_requests"]) == (3, 1)
    assert agg["ttft_s"] == {"n": 2, "mean": 0.75, "p50": 0.75, "p90": 0.95, "p99": 0.995, "min": 0.5, "max": 1.0}
    assert agg["ttft_content_s"]["mean"] == 0.875    # (0.75 + 1.0) / 2
    # ITL over all gaps of all completed requests: 0.25, 0.5 | 0.25, 0.25, 0.5
    assert agg["itl_s"] == {"n": 5, "mean": 0.35, "p50": 0.25, "p90": 0.5, "p99": 0.5, "min": 0.25, "max": 0.5}
    # TPOT: (1.25 - 0.5) / 4 = 0.1875 and (2.0 - 1.0) / 8 = 0.125
    assert agg["tpot_s"] == {"n": 2, "mean": 0.15625, "p50": 0.15625, "p90": 0.18125, "p99": 0.186875,
                             "min": 0.125, "max": 0.1875}
    assert agg["e2e_s"]["mean"] == 1.625 and agg["e2e_s"]["max"] == 2.0
    assert agg["client_queue_s"]["max"] == 0.5
    assert (agg["output_tokens"], agg["prompt_tokens"]) == (14, 10)
    assert agg["tokens_per_s"] == 5.6                # 14 / 2.5
    assert agg["request_throughput_rps"] == 0.8      # 2 completed / 2.5 s
    assert agg["wall_s"] == 2.5
    assert agg["errors"] == ["stream cut: ended after 1 token chunk(s) without finish_reason or [DONE]"]


def test_aggregate_wall_defaults_to_the_longest_request():
    agg = sm.aggregate([measure(REASONING_FIRST), _second_request()])
    assert agg["wall_s"] == 2.0 and agg["tokens_per_s"] == 7.0 and agg["request_throughput_rps"] == 1.0


def test_aggregate_of_nothing_completed():
    agg = sm.aggregate([measure([(0.5, ev({}))])], wall_s=1.0)
    assert agg["ttft_s"]["n"] == 0 and agg["ttft_s"]["mean"] is None
    assert agg["tokens_per_s"] is None and agg["output_tokens"] == 0 and agg["request_throughput_rps"] == 0.0
    assert sm.aggregate([], wall_s=None)["wall_s"] is None


@pytest.mark.parametrize("tokens,expected", [(None, None), (0, None), (1, None), (2, 0.75), (4, 0.25)])
def test_tpot_needs_more_than_one_token(tokens, expected):
    assert sm.request_tpot({"ttft_s": 0.5, "e2e_s": 1.25, "output_tokens": tokens}) == expected
    assert sm.request_tpot({"ttft_s": None, "e2e_s": 1.25, "output_tokens": 4}) is None


def test_percentile_matches_numpy_linear():
    assert smoke_stats.percentile([4, 1, 3, 2], 90) == pytest.approx(3.7)
    assert smoke_stats.percentile([4, 1, 3, 2], 50) == 2.5
    assert smoke_stats.percentile([4, 1, 3, 2], 0) == 1 and smoke_stats.percentile([4, 1, 3, 2], 100) == 4
    assert smoke_stats.percentile([7], 99) == 7
    assert smoke_stats.percentile([None, 2], 50) == 2 and smoke_stats.percentile([], 50) is None


def test_stats_rounding():
    assert smoke_stats.stats([1 / 3.0], digits=3)["mean"] == 0.333


@pytest.mark.parametrize("text,value", [("1,234,567", 1234567), ("1.18", 1.18), ("", None), (None, None),
                                        ("nan", None), ("2e3", 2000.0), ("x", None), (" 8 ", 8), ("None", None),
                                        ("null", None), ("NaN", None), ("1.0", 1.0), ("2E1", 20.0), (16, 16)])
def test_parse_number(text, value):
    got = smoke_stats.parse_number(text)
    assert got == value and type(got) is type(value)


RESULT_KEYS = {"ok", "error", "stream", "ttft_s", "ttft_content_s", "ttft_reasoning_s", "e2e_s", "itl_s", "chunks",
               "content", "reasoning", "tool_calls", "prompt_tokens", "output_tokens", "finish_reason",
               "client_queue_s", "done", "reasoning_keys", "model"}


def test_result_shape():
    r = measure(REASONING_FIRST)
    assert set(r) == RESULT_KEYS and r["stream"] is True and r["client_queue_s"] is None
    assert r["model"] == "m"  # the served name of the first chunk that carries one
    plain = sm.new_result(False)
    assert set(plain) == RESULT_KEYS
    assert plain == {"ok": False, "error": None, "stream": False, "ttft_s": None, "ttft_content_s": None,
                     "ttft_reasoning_s": None, "e2e_s": None, "itl_s": [], "chunks": 0, "content": "",
                     "reasoning": "", "tool_calls": [], "prompt_tokens": None, "output_tokens": None,
                     "finish_reason": None, "client_queue_s": None, "done": False, "reasoning_keys": [],
                     "model": None}


def test_no_events_at_all():
    r = sm.measure_stream(T0, [])
    assert r["ok"] is False and r["e2e_s"] == 0.0 and r["error"].startswith("no token in the stream")


def test_reasoning_chunks_are_joined_and_events_after_an_invalid_one_are_ignored():
    r = measure([(0.5, ev({"reasoning": "a"})), (0.75, ev({"reasoning": "b"})), (1.0, b"data: nope\n\n"),
                 (1.25, ev({"content": "late"}))])
    assert r["reasoning"] == "ab" and r["content"] == "" and r["itl_s"] == [0.25]
    assert r["error"] == "stream error: event is not JSON: nope"


def test_long_stream_errors_are_cut_to_400_characters():
    err = ('data: {"error": {"message": "%s"}}\n\n' % ("m" * 500)).encode()
    assert measure([(0.5, err)])["error"] == "stream error: " + "m" * 400


def test_aggregate_rounding_and_error_list():
    third = 1 / 3.0
    results = [{"ok": True, "itl_s": [third], "ttft_s": third, "ttft_content_s": None, "e2e_s": 2 * third,
                "output_tokens": 1, "prompt_tokens": None, "client_queue_s": None, "error": None}]
    results += [{"ok": False, "error": "e%02d" % i} for i in range(11)]
    agg = sm.aggregate(results, wall_s=third)
    assert (agg["wall_s"], agg["tokens_per_s"], agg["request_throughput_rps"]) == (0.333333, 3.0, 3.0)
    agg = sm.aggregate(results, wall_s=3.0)
    assert (agg["tokens_per_s"], agg["request_throughput_rps"]) == (0.333, 0.3333)
    assert agg["itl_s"]["mean"] == 0.333333 and agg["ttft_s"]["p50"] == 0.333333
    assert agg["errors"] == ["e%02d" % i for i in range(10)]


def test_aggregate_wall_of_zero_length_requests():
    r = {"ok": True, "itl_s": [], "ttft_s": 0.0, "ttft_content_s": None, "e2e_s": 0.0, "output_tokens": 1,
         "prompt_tokens": 1, "client_queue_s": None, "error": None}
    agg = sm.aggregate([r])
    assert agg["wall_s"] is None and agg["tokens_per_s"] is None and agg["request_throughput_rps"] is None


def test_stats_of_nothing_and_default_digits():
    assert smoke_stats.stats([]) == {"n": 0, "mean": None, "p50": None, "p90": None, "p99": None, "min": None,
                                     "max": None}
    assert smoke_stats.stats([None]) == smoke_stats.stats([])
    assert smoke_stats.stats([1 / 3.0])["max"] == 0.333333


def test_sse_data_without_space_invalid_utf8_and_tab_prefix():
    events = sse.decode_sse([(1.0, b'data:{"a": 1}\n\n'), (2.0, b"data: \xff\xfe\n\n"), (3.0, b"data:\t[DONE]\n\n"),
                             (4.0, b"data: " + b"z" * 300 + b"\n\n")])
    assert events[0] == (1.0, {"a": 1})
    assert events[1] == (2.0, sse.InvalidEvent("\ufffd\ufffd"))
    assert events[2] == (3.0, sse.InvalidEvent("\t[DONE]"))  # only one leading space belongs to the field
    assert events[3] == (4.0, sse.InvalidEvent("z" * 200))


def test_only_one_space_after_data_belongs_to_the_field():
    assert sse.decode_sse([(1.0, b"data:  [DONE]\n\n")]) == [(1.0, sse.InvalidEvent(" [DONE]"))]
    assert sse.decode_sse([(1.0, b"data:[DONE]\n\n")]) == [(1.0, sse.DONE)]


@pytest.mark.parametrize("chunk,why", [
    ({"choices": 5}, "choices is not a list of objects"),
    ({"choices": ["x"]}, "choices is not a list of objects"),
    ({"choices": [], "usage": 3}, "usage is not an object"),
    ({"choices": [{"delta": "a"}]}, "delta is not an object"),
    ({"choices": [{"delta": {"content": 7}}]}, "delta.content is not a string"),
    ({"choices": [{"delta": {"reasoning": ["a"]}}]}, "delta.reasoning is not a string"),
    ({"choices": [{"delta": {"tool_calls": {}}}]}, "delta.tool_calls is not a list"),
])
def test_a_malformed_chunk_fails_the_stream_with_what_is_wrong(chunk, why):
    r = measure([(0.5, ev({"content": "a"})), (0.75, ("data: %s\n\n" % json.dumps(chunk)).encode())])
    assert r["ok"] is False
    assert r["error"] == "stream error: malformed chunk (%s): %s" % (why, json.dumps(chunk))
    assert r["content"] == "a"
