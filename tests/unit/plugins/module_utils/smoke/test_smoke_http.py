"""smoke_server.http_get / scrape: plain GETs for /metrics, /version and /v1/models."""
import http.server
import ssl
import threading

import pytest

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import server as sc


def reply(handler, code, body):
    """Answer a BaseHTTPRequestHandler request with ``code`` and ``body`` (bytes)."""
    handler.send_response(code)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


class _Handler(http.server.BaseHTTPRequestHandler):
    seen = []

    def do_GET(self):  # noqa: N802
        _Handler.seen.append((self.path, self.headers.get("Authorization")))
        if self.path == "/metrics":
            body, code = b"vllm:num_requests_running{model_name=\"m\"} 3.0\n", 200
        else:
            body, code = b"no such page", 404
        reply(self, code, body)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    _Handler.seen = []
    yield "http://127.0.0.1:%d" % srv.server_address[1]
    srv.shutdown()
    srv.server_close()


def test_get_returns_status_and_text_and_sends_the_bearer_token(server):
    assert sc.http_get(server + "/metrics", api_key="k-123") == (200, 'vllm:num_requests_running{model_name="m"} 3.0\n')
    assert sc.http_get(server + "/nope") == (404, "no such page")
    assert _Handler.seen == [("/metrics", "Bearer k-123"), ("/nope", None)]


def test_the_tls_context_is_built_once_per_process_and_setting(server, monkeypatch):
    built = []
    monkeypatch.setattr(sc, "_TLS_CONTEXTS", {})
    monkeypatch.setattr(sc, "make_context", lambda **kw: built.append(kw) or ssl.create_default_context())
    for _call in range(5):
        sc.http_get(server + "/metrics")
        sc.http_get(server + "/metrics", tls=(False, None))
    assert built == [{"validate_certs": True, "cafile": None}, {"validate_certs": False, "cafile": None}]


def test_scrape_merges_and_lists_unreachable_urls(server):
    snap = sc.scrape([server + "/metrics", "http://127.0.0.1:9/metrics"], timeout=2)
    assert len(snap["errors"]) == 1 and "127.0.0.1:9" in snap["errors"][0]
    assert snap["engines"]["0"]["gauges"]["vllm:num_requests_running"] == 3.0
