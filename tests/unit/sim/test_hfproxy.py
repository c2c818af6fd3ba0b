"""sim/kimisim/hfproxy.py, the HF mirror's fault proxy, against a local upstream on 127.0.0.1 (no olah, no
Docker): passthrough byte for byte, a tampered file keeps its size and changes in one byte (also when resumed), the
shared throttle's waits (exact, with an injected clock), the stats, and refused fault words."""
import json
import re
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kimisim import hfproxy

DATA = {"config.json": b'{"model_type": "kimi_k3_standin"}\n', "model-00001-of-00004.safetensors": bytes(range(256)) * 600}


class Upstream(object):
    def __init__(self):
        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                m = re.match(r"^/org/m/resolve/[0-9a-f]+/(streamed/)?(.+)$", self.path)
                if m and m.group(1):  # as olah serves some files: no length, the end of the body is the close
                    self.send_response(200)
                    self.send_header("Connection", "close")
                    self.end_headers()
                    self.wfile.write(DATA[m.group(2)])
                    self.close_connection = True
                    return
                m = re.match(r"^/org/m/resolve/[0-9a-f]+/(.+)$", self.path)
                if not m or m.group(1) not in DATA:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                data = DATA[m.group(1)]
                rng = re.match(r"bytes=(\d+)-$", self.headers.get("Range") or "")
                start = int(rng.group(1)) if rng else 0
                self.send_response(206 if rng else 200)
                if rng:
                    self.send_header("Content-Range", "bytes %d-%d/%d" % (start, len(data) - 1, len(data)))
                self.send_header("Content-Length", str(len(data) - start))
                self.end_headers()
                self.wfile.write(data[start:])

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.address = "127.0.0.1:%d" % self.server.server_address[1]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def proxy(tmp_path):
    up = Upstream()
    faults = tmp_path / "faults.json"
    faults.write_text(json.dumps({"throttle_bps": None, "tamper": []}))
    server = hfproxy.make_server("127.0.0.1:0", up.address, str(faults))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = "http://127.0.0.1:%d" % server.server_address[1]
    yield base, faults, server
    server.shutdown()
    server.server_close()
    up.close()


def _get(url, headers=None):
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=10) as r:
        return r.status, r.read()


URL = "/org/m/resolve/" + "a" * 40 + "/"


def test_passthrough_is_byte_for_byte_and_counted(proxy):
    base, _faults, _server = proxy
    for path, data in DATA.items():
        assert _get(base + URL + path) == (200, data)
    stats = json.loads(_get(base + "/_sim/stats")[1])
    assert stats["bytes"] == sum(len(d) for d in DATA.values()) and stats["by_path"]["config.json"] == len(
        DATA["config.json"])
    req = urllib.request.Request(base + "/_sim/stats", method="DELETE")
    urllib.request.urlopen(req, timeout=5).read()
    assert json.loads(_get(base + "/_sim/stats")[1])["bytes"] == 0


def test_a_tampered_file_keeps_its_size_and_differs_in_its_middle_byte(proxy):
    base, faults, _server = proxy
    faults.write_text(json.dumps({"throttle_bps": None, "tamper": ["config.json", "model-00001-of-00004.safetensors"]}))
    for path, data in DATA.items():
        code, got = _get(base + URL + path)
        diff = [i for i in range(len(data)) if got[i] != data[i]]
        assert code == 200 and len(got) == len(data) and diff == [len(data) // 2]
        assert got[len(data) // 2] == data[len(data) // 2] ^ 1
    # resumed past the middle: nothing to change; resumed before it: the same byte changes
    shard = DATA["model-00001-of-00004.safetensors"]
    mid = len(shard) // 2
    assert _get(base + URL + "model-00001-of-00004.safetensors", {"Range": "bytes=%d-" % (mid + 1)})[1] == shard[mid + 1:]
    code, tail = _get(base + URL + "model-00001-of-00004.safetensors", {"Range": "bytes=100-"})
    assert code == 206 and tail[mid - 100] == shard[mid] ^ 1 and tail[:mid - 100] == shard[100:mid]


def test_a_file_streamed_without_a_length_is_tampered_in_its_middle_byte_too(proxy):
    base, faults, _server = proxy
    faults.write_text(json.dumps({"throttle_bps": None, "tamper": ["streamed/config.json"]}))
    data = DATA["config.json"]
    code, got = _get(base + URL + "streamed/config.json")
    assert code == 200 and len(got) == len(data)
    assert [i for i in range(len(data)) if got[i] != data[i]] == [len(data) // 2]


def test_the_throttle_is_one_bucket_for_every_connection():
    now, slept = [0.0], []
    t = hfproxy.Throttle(clock=lambda: now[0], sleep=slept.append)
    assert t.take(1000, None) == 0.0
    assert t.take(1000, 1000) == 0.0            # the first second's bytes go at once
    assert t.take(500, 1000) == 1.0             # the next ones wait for the bucket
    now[0] = 0.5
    assert t.take(1000, 1000) == 1.0            # another connection queues behind both
    assert slept == [1.0, 1.0]


@pytest.mark.parametrize("words,want", [
    (["throttle=4000000"], {"throttle_bps": 4000000, "tamper": []}),
    (["tamper=/config.json", "tamper=a/b.py"], {"throttle_bps": None, "tamper": ["config.json", "a/b.py"]}),
    ([], {"throttle_bps": None, "tamper": []}),
])
def test_parse_faults(words, want):
    assert hfproxy.parse_faults(words) == want


@pytest.mark.parametrize("words,msg", [
    (["slow"], "unknown hf fault 'slow'"), (["throttle=fast"], "not a whole number"), (["throttle=0"], "positive"),
])
def test_parse_faults_refuses(words, msg):
    with pytest.raises(ValueError, match=msg):
        hfproxy.parse_faults(words)


def test_missing_upstream_file_passes_the_404_through(proxy):
    base, _f, _s = proxy
    with pytest.raises(urllib.error.HTTPError) as exc:
        _get(base + URL + "nope.json")
    assert exc.value.code == 404
