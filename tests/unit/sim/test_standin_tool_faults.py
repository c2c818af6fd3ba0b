"""VLLM_STANDIN_TOOL_FAULT knobs produce the advertised tool-call defects."""
import json

import pytest

from vllm_standin import chat, config, flags, testing

jsonschema = pytest.importorskip("jsonschema")
openai = pytest.importorskip("openai")

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "minLength": 1}, "days": {"type": "integer", "minimum": 1, "maximum": 7},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2},
        "opts": {"type": "object", "properties": {"verbose": {"type": "boolean"}, "ratio": {"type": "number"}},
                 "required": ["verbose", "ratio"]}},
    "required": ["city", "days", "unit", "tags", "opts"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "send_email", "description": "Send an email message",
                                           "parameters": {"type": "object", "properties": {"to": {"type": "string"}},
                                                          "required": ["to"]}}},
         {"type": "function", "function": {"name": "get_forecast", "description": "Weather forecast for a city",
                                           "parameters": SCHEMA}}]
PROMPT = "Give me the weather forecast for Lisbon for 3 days in fahrenheit"


def behaviour(monkeypatch, **env):
    for k in ("VLLM_STANDIN_TOOL_FAULT", "VLLM_STANDIN_TOOL_FAULT_RATE", "VLLM_STANDIN_SEED",
              "VLLM_ENFORCE_STRICT_TOOL_CALLING"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    snap = flags.Snapshot(flags.load_snapshot("0.28.0"))
    argv = ["m", "-tp", "8", "--enable-auto-tool-choice", "--tool-call-parser", "kimi_k3", "--reasoning-parser", "kimi_k3"]
    _model, values, _explicit = flags.parse_args(argv, snap)
    return chat.ChatBehaviour(config.Deployment("m", values, snap), 131072)


def run(beh, **body):
    req = {"messages": [{"role": "user", "content": PROMPT}], "tools": TOOLS, "max_tokens": 2000}
    req.update(body)
    return beh.prepare(req)[1]


def test_clean_call_satisfies_schema(monkeypatch):
    plan = run(behaviour(monkeypatch))
    assert plan.tool_call["name"] == "get_forecast" and plan.finish_reason == "tool_calls"
    args = json.loads(plan.tool_call["arguments"])
    jsonschema.Draft202012Validator(SCHEMA).validate(args)
    assert args["city"] == "Lisbon" and args["days"] == 3 and args["unit"] == "fahrenheit"
    assert "<|" not in "".join(plan.content)


@pytest.mark.parametrize("fault", chat.TOOL_FAULTS)
def test_each_fault(monkeypatch, fault):
    plan = run(behaviour(monkeypatch, VLLM_STANDIN_TOOL_FAULT=fault))
    if fault == "no_call":
        assert plan.tool_call is None and "".join(plan.content)
        return
    args_text = plan.tool_call["arguments"]
    if fault == "invalid_json":
        with pytest.raises(ValueError):
            json.loads(args_text)
        return
    args = json.loads(args_text)
    errors = list(jsonschema.Draft202012Validator(SCHEMA).iter_errors(args))
    if fault in ("schema_violation", "empty_args"):
        assert errors
    elif fault == "unknown_tool":
        assert plan.tool_call["name"] not in [t["function"]["name"] for t in TOOLS] and not errors
    elif fault == "leak_tokens":
        assert "<|close|>message<|sep|>" in "".join(plan.content) and not errors


def test_fault_rate_is_deterministic_with_seed(monkeypatch):
    def pattern(seed):
        beh = behaviour(monkeypatch, VLLM_STANDIN_TOOL_FAULT="no_call", VLLM_STANDIN_TOOL_FAULT_RATE="0.5",
                        VLLM_STANDIN_SEED=seed)
        return [run(beh).tool_call is None for _unused in range(40)]
    a, b, c = pattern("7"), pattern("7"), pattern("8")
    assert a == b and a != c
    assert 8 <= sum(a) <= 32
    beh = behaviour(monkeypatch, VLLM_STANDIN_TOOL_FAULT="invalid_json,unknown_tool", VLLM_STANDIN_SEED="1")
    kinds = set()
    for _unused in range(20):
        tc = run(beh).tool_call
        kinds.add("unknown_tool" if tc["name"].endswith("_unknown") else "invalid_json")
    assert kinds == {"invalid_json", "unknown_tool"}


def test_named_choice_needs_strict(monkeypatch):
    named = {"type": "function", "function": {"name": "send_email"}}
    plan = run(behaviour(monkeypatch), tool_choice=named)
    assert plan.tool_call["name"] == "send_email"
    with pytest.raises(chat.RequestError) as exc:
        run(behaviour(monkeypatch, VLLM_ENFORCE_STRICT_TOOL_CALLING="0"), tool_choice=named)
    assert exc.value.status == 400
    assert exc.value.message.startswith("Named tool choice for Kimi K3 requires strict tool calling")


def test_auto_choice_needs_server_flag(monkeypatch):
    snap = flags.Snapshot(flags.load_snapshot("0.28.0"))
    _model, values, _explicit = flags.parse_args(["m", "-tp", "8"], snap)
    beh = chat.ChatBehaviour(config.Deployment("m", values, snap), 131072)
    with pytest.raises(chat.RequestError):
        run(beh, tool_choice="auto")


def test_streamed_leak_over_http():
    host = testing.loopback_ip()
    port = testing.free_port(host)
    proc = testing.Proc(["serve", "m", "-tp", "8", "--host", host, "--port", str(port), "--enable-auto-tool-choice",
                         "--tool-call-parser", "kimi_k3"],
                        env=testing.fast_env(VLLM_STANDIN_TOOL_FAULT="leak_tokens"))
    try:
        assert testing.wait_status(host, port, 200, proc=proc), proc.log()
        client = openai.OpenAI(base_url="http://%s:%d/v1" % (host, port), api_key="x", max_retries=0)
        content, calls = "", []
        for ch in client.chat.completions.create(model="m", messages=[{"role": "user", "content": PROMPT}],
                                                 tools=TOOLS, stream=True, max_tokens=500):
            if ch.choices:
                content += ch.choices[0].delta.content or ""
                calls += ch.choices[0].delta.tool_calls or []
        assert "<|close|>message<|sep|>" in content
        assert len(calls) == 1
    finally:
        proc.stop()
