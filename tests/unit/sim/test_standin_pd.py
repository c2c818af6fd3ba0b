"""Stand-in prefill/decode (--kv-transfer-config): the router's two-stage flow, and refusals of transfer
parameters no prefill instance issued."""
import http.client
import json

import pytest

from vllm_standin import kvtransfer, testing
from vllm_standin.config import StartupError

KEY = "sk-pd-test"


def kv_config(role):
    return json.dumps({"kv_connector": "NixlConnector", "kv_role": role, "kv_load_failure_policy": "fail"})


def start(host, role, side_port):
    port = testing.free_port(host)
    env = testing.fast_env(VLLM_NIXL_SIDE_CHANNEL_HOST=host, VLLM_NIXL_SIDE_CHANNEL_PORT=side_port,
                           VLLM_STANDIN_KV_TOKENS=200000)
    proc = testing.Proc(["serve", "moonshotai/Kimi-K3", "--host", host, "--port", str(port), "--api-key", KEY,
                         "--max-model-len", "32768", "--kv-transfer-config", kv_config(role)], env=env)
    assert testing.wait_status(host, port, 200, proc=proc), proc.log()
    return port, proc


@pytest.fixture(scope="module")
def pd():
    host = testing.loopback_ip()
    side = testing.free_port(host)
    p_port, prefill = start(host, "kv_producer", side)
    d_port, decode = start(host, "kv_consumer", testing.free_port(host))
    try:
        yield {"host": host, "prefill": p_port, "decode": d_port, "side": side, "procs": (prefill, decode)}
    finally:
        prefill.stop()
        decode.stop()


def chat(host, port, body, request_id=None):
    c = http.client.HTTPConnection(host, port, timeout=10)
    headers = {"Authorization": "Bearer " + KEY, "Content-Type": "application/json"}
    if request_id:
        headers["X-Request-Id"] = request_id
    c.request("POST", "/v1/chat/completions", json.dumps(body), headers)
    r = c.getresponse()
    data = json.loads(r.read() or b"{}")
    c.close()
    return r.status, data


def prefill_request(**extra):
    body = {"messages": [{"role": "user", "content": "x" * 8000}], "max_tokens": 1, "min_tokens": 1, "stream": False,
            "kv_transfer_params": {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
                                   "remote_block_ids": None, "remote_host": None, "remote_port": None}}
    body.update(extra)
    return body


def decode_request(params):
    return {"messages": [{"role": "user", "content": "x" * 8000}], "max_tokens": 4, "kv_transfer_params": params}


def metric(host, port, result):
    c = http.client.HTTPConnection(host, port, timeout=5)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    for line in text.splitlines():
        if line.startswith("kimi_sim_kv_transfers_total") and 'result="%s"' % result in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_prefill_issues_params_at_its_side_channel(pd):
    status, data = chat(pd["host"], pd["prefill"], prefill_request(), "___prefill_addr_a___decode_addr_b_1")
    assert status == 200, data
    params = data["kv_transfer_params"]
    assert params["do_remote_prefill"] is True and params["do_remote_decode"] is False
    assert params["remote_host"] == pd["host"] and params["remote_port"] == pd["side"]
    assert params["remote_request_id"] == "___prefill_addr_a___decode_addr_b_1"
    assert len(params["remote_block_ids"]) == 2  # 2003 prompt tokens -> two 1536-token blocks
    assert data["usage"]["completion_tokens"] == 1


def test_decode_consumes_issued_params_once(pd):
    _st, data = chat(pd["host"], pd["prefill"], prefill_request(), "rid-once")
    params = data["kv_transfer_params"]
    before = metric(pd["host"], pd["decode"], "read")
    status, out = chat(pd["host"], pd["decode"], decode_request(params), "rid-once")
    assert status == 200, out
    assert out["usage"]["completion_tokens"] >= 1
    assert metric(pd["host"], pd["decode"], "read") == before + 1
    # the blocks were handed over: the same parameters again are refused
    status, out = chat(pd["host"], pd["decode"], decode_request(params), "rid-once")
    assert status == 500
    assert "no such blocks were issued" in out["error"]["message"]


@pytest.mark.parametrize("forge", [
    {"remote_block_ids": [1, 2, 3]},
    {"remote_engine_id": "00000000-0000-0000-0000-000000000000"},
    {"remote_request_id": "someone-else"},
])
def test_decode_rejects_params_no_prefill_issued(pd, forge):
    _st, data = chat(pd["host"], pd["prefill"], prefill_request(), "rid-forge")
    params = dict(data["kv_transfer_params"], **forge)
    status, out = chat(pd["host"], pd["decode"], decode_request(params))
    assert status == 500, out
    assert out["error"]["message"].startswith("KV transfer failed (kv_load_failure_policy=fail)")


def test_decode_rejects_unreachable_side_channel(pd):
    params = {"do_remote_prefill": True, "remote_engine_id": "e", "remote_block_ids": [1], "remote_request_id": "r",
              "remote_host": pd["host"], "remote_port": testing.free_port(pd["host"])}
    status, out = chat(pd["host"], pd["decode"], decode_request(params))
    assert status == 500 and "unreachable" in out["error"]["message"]


def test_decode_rejects_incomplete_params(pd):
    status, out = chat(pd["host"], pd["decode"], decode_request({"do_remote_prefill": True, "remote_host": "x"}))
    assert status == 500 and "lack remote_engine_id, remote_block_ids, remote_port" in out["error"]["message"]


def test_request_without_params_is_served_locally(pd):
    status, out = chat(pd["host"], pd["decode"], {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    assert status == 200 and out["kv_transfer_params"] is None
    status, out = chat(pd["host"], pd["prefill"], {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    assert status == 200 and out["kv_transfer_params"] is None


@pytest.mark.parametrize("raw, fragment", [
    ("{not json", "not valid JSON"),
    ("[1]", "must be a JSON object"),
    ('{"kv_connector": "P2pNcclConnector", "kv_role": "kv_producer"}', "Unsupported kv_connector"),
    ('{"kv_connector": "NixlConnector", "kv_role": "prefill"}', "kv_role must be one of"),
])
def test_bad_kv_transfer_config_is_refused(raw, fragment):
    with pytest.raises(StartupError) as exc:
        kvtransfer.parse_config(raw)
    assert fragment in exc.value.message


def test_kv_role_maps_to_instance_role():
    assert kvtransfer.parse_config(kv_config("kv_producer")) == ("NixlConnector", "producer")
    assert kvtransfer.parse_config(kv_config("kv_consumer")) == ("NixlConnector", "consumer")
    assert kvtransfer.parse_config(None) is None


def test_side_channel_port_taken_fails_start():
    host = testing.loopback_ip()
    side = testing.free_port(host)
    port, first = start(host, "kv_producer", side)
    try:
        env = testing.fast_env(VLLM_NIXL_SIDE_CHANNEL_HOST=host, VLLM_NIXL_SIDE_CHANNEL_PORT=side,
                               VLLM_STANDIN_KV_TOKENS=200000)
        second = testing.Proc(["serve", "m", "--host", host, "--port", str(testing.free_port(host)),
                               "--max-model-len", "32768", "--kv-transfer-config", kv_config("kv_producer")], env=env)
        assert second.wait(20) == 1
        assert "cannot open the NIXL side channel on %s:%d" % (host, side) in second.log()
        second.stop()
    finally:
        first.stop()
