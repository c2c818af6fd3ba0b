"""Stand-in `vllm serve` as a subprocess: OpenAI surface, auth, metrics, reasoning, OCR, tool calls."""
import base64
import http.client
import json
import struct
import zlib

import pytest

from vllm_standin import testing

openai = pytest.importorskip("openai")
prom_parser = pytest.importorskip("prometheus_client.parser")

KEY = "sk-standin-test"
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather for a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "minLength": 1},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7}},
        "required": ["city", "unit"], "additionalProperties": False}}}
STOCK = {"type": "function", "function": {
    "name": "lookup_stock", "description": "Look up a stock price by ticker symbol",
    "parameters": {"type": "object", "properties": {"ticker": {"type": "string"}, "exchange": {"type": "string"}},
                   "required": ["ticker"]}}}


def png_with_text(keyword, text):
    def chunk(ctype, data):
        return struct.pack(">I", len(data)) + ctype + data + struct.pack(">I", zlib.crc32(ctype + data) & 0xFFFFFFFF)
    ihdr = struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0)
    body = chunk(b"IHDR", ihdr)
    if keyword:
        body += chunk(b"tEXt", keyword.encode("latin-1") + b"\x00" + text.encode("latin-1"))
    body += chunk(b"IDAT", zlib.compress(b"\x00\x00")) + chunk(b"IEND", b"")
    return "data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\n" + body).decode()


@pytest.fixture(scope="module")
def server():
    host, port = testing.loopback_ip(), None
    port = testing.free_port(host)
    proc = testing.Proc(["serve", "moonshotai/Kimi-K3", "--host", host, "--port", str(port), "-tp", "8",
                         "--kv-cache-dtype", "fp8", "--served-model-name", "kimi-k3", "--api-key", KEY,
                         "--enable-auto-tool-choice", "--tool-call-parser", "kimi_k3", "--reasoning-parser",
                         "kimi_k3", "--max-model-len", "128k", "--limit-mm-per-prompt", '{"image": 2}'])
    try:
        assert testing.wait_status(host, port, 200, proc=proc), proc.log()
        yield host, port, proc
    finally:
        proc.stop()


@pytest.fixture
def client(server):
    host, port, _proc = server
    return openai.OpenAI(base_url="http://%s:%d/v1" % (host, port), api_key=KEY, max_retries=0, timeout=20)


def get(server, path, headers=None):
    host, port, _proc = server
    c = http.client.HTTPConnection(host, port, timeout=5)
    c.request("GET", path, headers=headers or {})
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, body


def test_open_endpoints_and_auth(server):
    assert get(server, "/health")[0] == 200
    assert KEY not in server[2].log()  # the key never reaches the log
    st, body = get(server, "/version")
    assert st == 200 and json.loads(body) == {"version": "0.28.0"}
    assert json.loads(get(server, "/load")[1]) == {"server_load": 0}
    st, body = get(server, "/v1/models")
    assert st == 401 and "error" in json.loads(body)
    st, body = get(server, "/v1/models", {"Authorization": "Bearer wrong"})
    assert st == 401
    st, body = get(server, "/v1/models", {"Authorization": "Bearer " + KEY})
    card = json.loads(body)["data"][0]
    assert st == 200 and card["id"] == "kimi-k3" and card["max_model_len"] == 128000
    assert card["root"] == "moonshotai/Kimi-K3"


def test_sdk_rejects_bad_key(server):
    host, port, _proc = server
    bad = openai.OpenAI(base_url="http://%s:%d/v1" % (host, port), api_key="nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()


def test_streaming_with_usage_and_reasoning(client):
    stream = client.chat.completions.create(
        model="kimi-k3", messages=[{"role": "user", "content": "Tell me about latency."}], max_tokens=40,
        stream=True, stream_options={"include_usage": True}, reasoning_effort="low")
    reasoning, content, finish, usage, n_chunks = "", "", None, None, 0
    for ch in stream:
        n_chunks += 1
        if ch.usage is not None:
            assert ch.choices == []
            usage = ch.usage
            continue
        delta = ch.choices[0].delta
        extra = delta.model_extra or {}
        reasoning += extra.get("reasoning") or ""
        assert (extra.get("reasoning") or "") == (extra.get("reasoning_content") or "")
        content += delta.content or ""
        finish = ch.choices[0].finish_reason or finish
    assert reasoning and content
    assert usage.completion_tokens <= 40 and usage.prompt_tokens > 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert finish in ("stop", "length")


def test_thinking_off_and_bad_effort(client):
    r = client.chat.completions.create(model="kimi-k3", messages=[{"role": "user", "content": "hi"}], max_tokens=8,
                                       extra_body={"chat_template_kwargs": {"thinking": False}})
    assert (r.choices[0].message.model_extra or {}).get("reasoning") is None
    assert r.choices[0].message.content
    r = client.chat.completions.create(model="kimi-k3", messages=[{"role": "user", "content": "hi"}], max_tokens=8,
                                       reasoning_effort="none")
    assert (r.choices[0].message.model_extra or {}).get("reasoning") is None
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="kimi-k3", messages=[{"role": "user", "content": "hi"}],
                                       reasoning_effort="medium")
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="other", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.BadRequestError) as exc:
        client.chat.completions.create(model="kimi-k3", messages=[{"role": "user", "content": "hi"}],
                                       max_tokens=200000)
    assert "maximum context length is 128000" in str(exc.value)


def test_ocr_from_png_text_chunk(client):
    truth = "NORTHWIND GPU CAFE\nTOTAL 18.09"
    img = png_with_text("kimi-sim-ocr", truth)
    r = client.chat.completions.create(model="kimi-k3", max_tokens=500, reasoning_effort="none", messages=[
        {"role": "user", "content": [{"type": "text", "text": "Transcribe this receipt."},
                                     {"type": "image_url", "image_url": {"url": img}}]}])
    assert r.choices[0].message.content == truth
    for url in (png_with_text(None, ""), "http://127.0.0.1:9/receipt.png"):
        r = client.chat.completions.create(model="kimi-k3", max_tokens=500, reasoning_effort="none", messages=[
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}])
        assert "cannot read" in r.choices[0].message.content
        assert r.usage.prompt_tokens > 1000  # images cost tokens
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="kimi-k3", messages=[
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": img}}] * 3}])


def test_tool_call_non_streaming_picks_matching_tool(client):
    r = client.chat.completions.create(
        model="kimi-k3", tools=[STOCK, WEATHER], tool_choice="auto", max_tokens=400, reasoning_effort="low",
        messages=[{"role": "user", "content": "What's the weather in Paris, in celsius?"}])
    msg = r.choices[0].message
    assert r.choices[0].finish_reason == "tool_calls"
    assert len(msg.tool_calls) == 1 and msg.tool_calls[0].function.name == "get_weather"
    args = json.loads(msg.tool_calls[0].function.arguments)
    assert args == {"city": "Paris", "unit": "celsius"}
    # a tool result turns into a plain answer
    r2 = client.chat.completions.create(model="kimi-k3", tools=[WEATHER], max_tokens=400, reasoning_effort="none",
                                        messages=[{"role": "user", "content": "Weather in Paris?"},
                                                  {"role": "assistant", "tool_calls": [msg.tool_calls[0].model_dump()]},
                                                  {"role": "tool", "tool_call_id": msg.tool_calls[0].id,
                                                   "content": "18 degrees, sunny"}])
    assert not r2.choices[0].message.tool_calls and "18 degrees" in r2.choices[0].message.content


def test_tool_call_streaming_single_delta(client):
    stream = client.chat.completions.create(
        model="kimi-k3", tools=[WEATHER, STOCK], tool_choice="required", stream=True, max_tokens=400,
        stream_options={"include_usage": True}, reasoning_effort="none",
        messages=[{"role": "user", "content": "Look up the stock price for ticker NVDA"}])
    tool_deltas, finish = [], None
    for ch in stream:
        if ch.choices:
            if ch.choices[0].delta.tool_calls:
                tool_deltas.append(ch.choices[0].delta.tool_calls)
            finish = ch.choices[0].finish_reason or finish
    assert len(tool_deltas) == 1
    call = tool_deltas[0][0]
    assert call.index == 0 and call.id and call.function.name == "lookup_stock"
    assert json.loads(call.function.arguments)["ticker"]
    assert finish == "tool_calls"


def test_named_tool_choice(client):
    r = client.chat.completions.create(model="kimi-k3", tools=[WEATHER, STOCK], max_tokens=400,
                                       tool_choice={"type": "function", "function": {"name": "lookup_stock"}},
                                       messages=[{"role": "user", "content": "weather in Oslo"}])
    assert r.choices[0].message.tool_calls[0].function.name == "lookup_stock"


def test_metrics_parse(server, client):
    client.chat.completions.create(model="kimi-k3", messages=[{"role": "user", "content": "count"}], max_tokens=5)
    st, body = get(server, "/metrics")
    assert st == 200
    fams = {f.name: f for f in prom_parser.text_string_to_metric_families(body.decode())}
    info = fams["vllm:cache_config_info"].samples[0]
    assert info.labels["engine"] == "0" and int(info.labels["num_gpu_blocks"]) > 0
    kv_tokens = int(info.labels["kv_cache_size_tokens"])
    assert abs(float(info.labels["kv_cache_max_concurrency"]) - kv_tokens / 128000.0) < 0.01
    assert info.labels["cache_dtype"] == "fp8" and info.labels["block_size"]
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"):
        assert fams[name].type == "gauge"
        assert fams[name].samples[0].labels == {"model_name": "kimi-k3", "engine": "0"}
    gen = fams["vllm:generation_tokens"]
    assert gen.type == "counter" and gen.samples[0].name == "vllm:generation_tokens_total"
    assert gen.samples[0].value >= 5
    for h in ("vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
              "vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds"):
        assert fams[h].type == "histogram"
        count = [s for s in fams[h].samples if s.name == h + "_count"][0]
        assert count.value >= 1
    assert any(s.labels.get("finished_reason") == "length" and s.value >= 1
               for s in fams["vllm:request_success"].samples)
    assert "vllm:num_preemptions" in fams and "vllm:prompt_tokens" in fams
