"""Group readiness watch: exact verdicts on scripted timelines (plugin_utils/launch/watch.py)."""
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.launch import watch as lw

URL = "http://10.0.0.1:8000/health"


def st(phase="loading weights", detail="", running=True, healthy=False, health=None, status="running", code=0,
       log_phase=None):
    return {"phase": phase, "phase_detail": detail, "running": running, "healthy": healthy,
            "health": health if health is not None else {URL: None}, "status": status, "exit_code": code,
            "log_phase": log_phase or phase, "log_tail": ["line 1", "line 2"]}


def play(watch, timeline):
    """Feed ``[(t, status)]``; return ``[(t, verdict)]``."""
    return [(t, watch.feed(t, s)) for t, s in timeline]


def test_ready_after_progress():
    w = lw.NodeWatch(0.0, timeout_s=3600, stall_s=900)
    got = play(w, [(0, st("starting")), (5, st("loading weights", "checkpoint shards 50%")),
                   (10, st("serving", healthy=True, health={URL: 200}))])
    assert got == [(0, "waiting"), (5, "waiting"), (10, "ready")]
    assert w.detail == "ready after 10 s"
    assert [h["phase"] for h in w.history] == ["starting", "loading weights", "serving"]


def test_exit_is_seen_in_the_first_round_with_the_log_phase():
    w = lw.NodeWatch(100.0, 3600, 900)
    got = play(w, [(100.3, st("exited", "RuntimeError: CUDA error", running=False, status="exited", code=1,
                              log_phase="error"))])
    assert got == [(100.3, "exited")]
    assert w.detail == "container exited, exit code 1, in phase error: RuntimeError: CUDA error"


def test_stall_counts_from_the_last_change_of_phase_or_detail():
    w = lw.NodeWatch(0.0, 3600, stall_s=60)
    got = play(w, [(0, st("joining", "waiting for rank 1")), (50, st("joining", "waiting for rank 1")),
                   (55, st("loading weights", "checkpoint shards 10%")), (110, st("loading weights", "checkpoint shards 10%")),
                   (115, st("loading weights", "checkpoint shards 10%"))])
    assert got == [(0, "waiting"), (50, "waiting"), (55, "waiting"), (110, "waiting"), (115, "stalled")]
    assert w.detail == "no progress for 60 s in phase loading weights (last line: checkpoint shards 10%)"


def test_shard_progress_is_progress():
    w = lw.NodeWatch(0.0, 3600, stall_s=60)
    tl = [(t, st("loading weights", "checkpoint shards %d%%" % (t // 50))) for t in range(0, 1000, 50)]
    assert all(v == "waiting" for _t, v in play(w, tl))


def test_timeout_stays_for_slow_loads():
    w = lw.NodeWatch(0.0, timeout_s=100, stall_s=900)
    got = play(w, [(0, st(detail="a")), (99, st(detail="b")), (100, st(detail="c"))])
    assert got == [(0, "waiting"), (99, "waiting"), (100, "timeout")]
    assert w.detail == "not ready after 100 s (phase loading weights)"


def test_peer_lost_only_after_it_answered():
    w = lw.NodeWatch(0.0, 3600, 900)
    got = play(w, [(0, st("joining", health={URL: None})), (5, st("joining", "x", health={URL: 503})),
                   (10, st("joining", "y", health={URL: 200}, healthy=False)),
                   (15, st("joining", "z", health={URL: None}))])
    assert got == [(0, "waiting"), (5, "waiting"), (10, "waiting"), (15, "peer_lost")]
    assert w.detail == URL + " answered 200 earlier and now does not"


def test_unreachable_after_three_failed_reads_in_a_row():
    w = lw.NodeWatch(0.0, 3600, 900)
    got = play(w, [(0, None), (5, None), (10, st()), (15, None), (20, None), (25, None)])
    assert [v for _t, v in got] == ["waiting", "waiting", "waiting", "waiting", "waiting", "unreachable"]
    assert w.detail == "3 status reads in a row failed"


def rec(host, verdict, t, detail=""):
    return lw.board_record(host, verdict, t, detail, "joining")


def test_group_verdict_names_the_earliest_failure():
    board = {"w1": rec("w1", "waiting", 100), "head": rec("head", "exited", 90.3, "exit 1"),
             "w2": rec("w2", "exited", 95)}
    assert lw.group_verdict("w1", board, 101, stale_s=60)["host"] == "head"
    assert lw.group_verdict("w1", {"w1": rec("w1", "waiting", 100), "head": rec("head", "ready", 99)},
                            101, 60) is None


def test_group_verdict_ties_break_on_host_name():
    board = {"b": rec("b", "exited", 5.0), "a": rec("a", "stalled", 5.0)}
    assert lw.group_verdict("c", board, 6, 60)["host"] == "a"


def test_a_silent_watcher_is_unreachable_but_not_oneself():
    board = {"me": rec("me", "waiting", 10), "peer": rec("peer", "waiting", 30)}
    assert lw.group_verdict("me", board, 89, 60) is None
    got = lw.group_verdict("me", board, 90, 60)
    assert (got["host"], got["verdict"], got["detail"]) == ("peer", "unreachable",
                                                            "its watcher published nothing for 60 s")
    assert lw.group_verdict("peer", {"peer": rec("peer", "waiting", 0)}, 500, 60) is None


def result(verdict, t=None, host=None, status="running", phase="joining", detail=""):
    r = {"verdict": verdict, "ready": verdict == "ready", "status": status, "exit_code": 0, "phase": phase,
         "detail": detail, "log_tail": ["a", "b", "c"]}
    r["first_failure"] = {"host": host, "t": t} if host else None
    return r


def test_summary_names_the_first_failure_and_its_tail_once():
    results = {"head": result("exited", 10.0, "head", "exited", "exited", "container exited, exit code 1"),
               "w1": result("group", 10.0, "head", detail="head failed first")}
    results["head"]["log_tail"] = ["h1", "h2", "h3"]
    assert lw.culprit(results) == "head"
    text = lw.failure_summary(results, tail=2, log_dir="/art")
    assert text == "\n".join([
        "The vLLM group failed: head: its vLLM container stopped (container exited, exit code 1).",
        "Node states:",
        "  head: container exited (exit code 0), phase exited - exited",
        "  w1: container running (exit code 0), phase joining - stopped waiting: head failed first",
        "Last 2 log lines of head:",
        "    h2",
        "    h3",
        "Every node's log tail: /art/launch-<host>.log"])
    assert text.count("h3") == 1


def test_summary_without_tail_and_all_ready():
    results = {"a": result("stalled", 3.0, "a", detail="no progress")}
    assert "log lines" not in lw.failure_summary(results, tail=0)
    assert lw.failure_summary({"a": result("ready")}) == "every node is ready"
    assert lw.culprit({"a": result("ready")}) is None


def _https_server(tmp_path):
    import shutil
    import ssl
    import subprocess
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    import pytest
    if not shutil.which("openssl"):
        pytest.skip("openssl is needed to make a test certificate")
    cert, key = str(tmp_path / "cert.pem"), str(tmp_path / "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)

    class Health(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Health)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, cert


def test_https_health_honours_validate_certs_and_ca_path(tmp_path):
    from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.engine import launch_status as ls
    server, cert = _https_server(tmp_path)
    try:
        url = "https://127.0.0.1:%d/health" % server.server_address[1]
        assert ls.check_health(url, context=ls.tls_context()) is None          # self-signed: refused
        assert ls.check_health(url, context=ls.tls_context(ca_path=cert)) == 200
        assert ls.check_health(url, context=ls.tls_context(validate_certs=False)) == 200
        assert ls.check_health(url.replace("/health", "/nope"), context=ls.tls_context(False)) == 404
    finally:
        server.shutdown()
