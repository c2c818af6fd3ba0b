"""module_utils.weights.hf_stage: planning, disk check, verification, and the HTTP side against a local server.

The local server (http.server on 127.0.0.1, started and stopped by the fixture) speaks the two Hub endpoints the
stager uses - the tree listing (paginated) and resolve with Range - so resume, restart and token handling are
exercised byte for byte. The real self-hosted mirror (olah) is exercised in tests/integration/test_weights.py.
"""
import hashlib
import json
import os
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.weights import hf_stage as hs

REPO = "sim-org/Tiny"
REV = "a" * 40
FILES = {"config.json": b'{"x": 1}\n', "model-00001-of-00002.safetensors": os.urandom(3 * 1024 * 1024 + 7),
         "model-00002-of-00002.safetensors": os.urandom(1024 * 1024), "sub/tokenizer.json": b"{}"}


def _tree():
    out = []
    for path, data in sorted(FILES.items()):
        e = {"type": "file", "path": path, "size": len(data), "oid": hashlib.sha1(data).hexdigest()}
        if path.endswith(".safetensors"):
            e["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
        out.append(e)
    return out + [{"type": "directory", "path": "sub", "oid": "b" * 40, "size": 0}]


class Hub(object):
    def __init__(self, ranges=True, token=None):
        self.ranges, self.token, self.requests = ranges, token, []
        hub = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                hub.requests.append((self.path, dict(self.headers)))
                if hub.token and self.headers.get("Authorization") != "Bearer " + hub.token:
                    return self._send(401, b"{}")
                m = re.match(r"^/api/models/%s/tree/%s\?recursive=true(&page=2)?$" % (REPO, REV), self.path)
                if m:
                    tree = _tree()
                    if m.group(1):
                        return self._send(200, json.dumps(tree[2:]).encode())
                    nxt = "<http://%s:%d%s&page=2>; rel=\"next\"" % (self.server.server_address + (self.path,))
                    return self._send(200, json.dumps(tree[:2]).encode(), {"Link": nxt})
                m = re.match(r"^/%s/resolve/%s/(.+)$" % (REPO, REV), self.path)
                if not m or m.group(1) not in FILES:
                    return self._send(404, b"not found")
                data = FILES[m.group(1)]
                rng = re.match(r"bytes=(\d+)-$", self.headers.get("Range") or "")
                if rng and hub.ranges:
                    start = int(rng.group(1))
                    return self._send(206, data[start:], {"Content-Range": "bytes %d-%d/%d" % (
                        start, len(data) - 1, len(data))})
                return self._send(200, data, {"Accept-Ranges": "bytes"} if hub.ranges else {})

            def _send(self, code, body, headers=None):
                self.send_response(code)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hub():
    h = Hub()
    yield h
    h.close()


def _repo_dir(tmp_path):
    return hs.repo_cache_dir(str(tmp_path), REPO)


def test_parse_tree_uses_the_lfs_sha256_as_blob_name_and_drops_directories():
    files = hs.parse_tree(_tree())
    assert [f["path"] for f in files] == sorted(FILES)
    shard = [f for f in files if f["path"] == "model-00002-of-00002.safetensors"][0]
    assert shard["etag"] == hashlib.sha256(FILES[shard["path"]]).hexdigest() and shard["lfs"]
    cfg = [f for f in files if f["path"] == "config.json"][0]
    assert cfg["etag"] == hashlib.sha1(FILES["config.json"]).hexdigest() and cfg["size"] == len(FILES["config.json"])


@pytest.mark.parametrize("entries,words", [
    ([], "empty"),
    ([{"type": "file", "path": "../etc/passwd", "size": 1, "oid": "a" * 40}], "unsafe path"),
    ([{"type": "file", "path": "/abs", "size": 1, "oid": "a" * 40}], "unsafe path"),
    ([{"type": "file", "path": "x", "size": 1, "oid": "zz"}], "no usable blob id"),
    ([{"type": "file", "path": "x", "size": float("inf"), "oid": "a" * 40}], "no integer size"),
    ([{"type": "file", "path": "x", "size": "12 GB", "oid": "a" * 40}], "no integer size"),
])
def test_parse_tree_refuses_unusable_lists(entries, words):
    with pytest.raises(hs.StageError, match=words):
        hs.parse_tree(entries)


@pytest.mark.parametrize("repo,rev,endpoint,words", [
    ("moonshotai/Kimi-K3", "main", "https://huggingface.co", "not a 40-hex commit hash"),
    ("moonshotai/Kimi-K3", None, "https://huggingface.co", "kimi_k3_model_revision"),
    ("Kimi-K3", REV, "https://huggingface.co", "not a Hugging Face repo id"),
    ("moonshotai/Kimi-K3", REV, "hf-mirror.example", "weights_hf_endpoint"),
])
def test_validate_request_names_the_variable(repo, rev, endpoint, words):
    assert words in hs.validate_request(repo, rev, endpoint)


def test_disk_problem_counts_needed_plus_margin_in_decimal_gb():
    assert hs.disk_problem(100, 200, 100, "/c") is None
    msg = hs.disk_problem(1_600_000_000_000, 1_000_000_000_000, 10_000_000_000, "/data/hf-cache")
    assert msg == ("staging needs 1600.0 GB more in /data/hf-cache (plus a 10.0 GB margin) but 1000.0 GB are free: "
                   "free space there or point kimi_k3_model_cache_dir at a larger volume")


def test_progress_line():
    assert hs.progress_line(250_000_000, 1_000_000_000, 50_000_000, "m.safetensors") == (
        "0.25 / 1.00 GB (25.0 %), 50.0 MB/s, ETA 0m15s, at m.safetensors")
    assert hs.progress_line(0, 0, 0) == "0.00 / 0.00 GB (100.0 %), 0.0 MB/s"


def test_full_staging_builds_the_hf_cache_layout_then_transfers_nothing(hub, tmp_path):
    r = hs.stage(REPO, REV, str(tmp_path), hub.url)
    total = sum(len(d) for d in FILES.values())
    assert r["done"] and r["changed"] and r["bytes_transferred"] == total and r["files_transferred"] == len(FILES)
    assert r["verified"] == {"ok": True, "problems": [], "extra": []}
    snap = os.path.join(_repo_dir(tmp_path), "snapshots", REV)
    for path, data in FILES.items():
        link = os.path.join(snap, path)
        assert os.path.islink(link) and not os.path.isabs(os.readlink(link))
        assert open(link, "rb").read() == data
    shard = os.path.join(snap, "model-00001-of-00002.safetensors")
    assert os.path.basename(os.readlink(shard)) == hashlib.sha256(FILES["model-00001-of-00002.safetensors"]).hexdigest()
    seen = len(hub.requests)
    again = hs.stage(REPO, REV, str(tmp_path), hub.url)
    assert again["done"] and not again["changed"] and again["bytes_transferred"] == 0
    assert again["bytes_present"] == total and again["files_present"] == len(FILES)
    assert not [p for p, _h in hub.requests[seen:] if "/resolve/" in p], "a second run downloaded"


def test_rounds_stop_at_the_deadline_and_resume_with_range(hub, tmp_path, monkeypatch):
    monkeypatch.setattr(hs, "CHUNK", 256 * 1024)
    ticks = iter(range(0, 10 ** 6))
    monkeypatch.setattr(hs.time, "monotonic", lambda: next(ticks))   # every chunk costs one "second"
    first = hs.stage(REPO, REV, str(tmp_path), hub.url, max_seconds=8)
    assert not first["done"] and first["current"] == "model-00001-of-00002.safetensors"
    part = os.path.join(_repo_dir(tmp_path), "blobs",
                        hashlib.sha256(FILES[first["current"]]).hexdigest() + ".incomplete")
    have = os.path.getsize(part)
    assert 0 < have < len(FILES[first["current"]])
    rest = hs.stage(REPO, REV, str(tmp_path), hub.url, files=first["files"])
    assert rest["done"] and rest["verified"]["ok"] and rest["restarted"] == []
    resumed = [h for p, h in hub.requests if p.endswith(first["current"]) and "Range" in h]
    assert resumed and resumed[-1]["Range"] == "bytes=%d-" % have
    assert rest["bytes_transferred"] + first["bytes_transferred"] == sum(len(d) for d in FILES.values())


def test_a_server_that_cannot_resume_gets_each_file_finished_within_the_round(tmp_path, monkeypatch):
    monkeypatch.setattr(hs, "CHUNK", 256 * 1024)
    ticks = iter(range(0, 10 ** 6))
    monkeypatch.setattr(hs.time, "monotonic", lambda: next(ticks))
    hub = Hub(ranges=False)
    try:
        first = hs.stage(REPO, REV, str(tmp_path), hub.url, max_seconds=3)
        # the deadline passed inside the big shard, yet it was completed (no partial that the next round would
        # have to throw away); the round stops before the next file
        assert not first["done"] and first["files_transferred"] >= 2 and first["restarted"] == []
        rest = hs.stage(REPO, REV, str(tmp_path), hub.url, files=first["files"])
        assert rest["done"] and rest["verified"]["ok"] and rest["restarted"] == []
        assert first["bytes_transferred"] + rest["bytes_transferred"] == sum(len(d) for d in FILES.values())
    finally:
        hub.close()


def test_a_server_ignoring_range_restarts_the_file(tmp_path):
    hub = Hub(ranges=False)
    try:
        shard = "model-00001-of-00002.safetensors"
        files = hs.parse_tree(_tree())
        f = [x for x in files if x["path"] == shard][0]
        blobs = os.path.join(_repo_dir(tmp_path), "blobs")
        os.makedirs(blobs)
        with open(os.path.join(blobs, f["etag"] + ".incomplete"), "wb") as out:
            out.write(b"garbage that must not survive")
        r = hs.stage(REPO, REV, str(tmp_path), hub.url)
        assert r["done"] and r["verified"]["ok"] and r["restarted"] == [shard]
        assert open(os.path.join(r["snapshot_dir"], shard), "rb").read() == FILES[shard]
    finally:
        hub.close()


def test_blob_present_but_link_missing_is_relinked_without_transfer(hub, tmp_path):
    hs.stage(REPO, REV, str(tmp_path), hub.url)
    link = os.path.join(_repo_dir(tmp_path), "snapshots", REV, "config.json")
    os.unlink(link)
    r = hs.stage(REPO, REV, str(tmp_path), hub.url)
    assert r["bytes_transferred"] == 0 and r["files_linked"] == 1 and r["changed"] and os.path.islink(link)


def test_verification_names_wrong_sizes_and_extra_files(hub, tmp_path):
    r = hs.stage(REPO, REV, str(tmp_path), hub.url)
    snap = r["snapshot_dir"]
    open(os.path.join(snap, "stray.bin"), "w").write("x")
    files = hs.parse_tree(_tree())
    os.unlink(os.path.join(snap, "config.json"))
    open(os.path.join(snap, "config.json"), "w").write("{}")
    v = hs.verify_snapshot(_repo_dir(tmp_path), REV, files)
    assert not v["ok"] and v["extra"] == ["stray.bin"]
    assert v["problems"] == ["config.json has 2 bytes, the repository lists %d" % len(FILES["config.json"])]


def test_check_mode_writes_nothing_and_reports_the_bytes_needed(hub, tmp_path):
    r = hs.stage(REPO, REV, str(tmp_path), hub.url, check_mode=True)
    assert r["changed"] and r["bytes_needed"] == sum(len(d) for d in FILES.values()) and r["bytes_transferred"] == 0
    assert not os.path.exists(_repo_dir(tmp_path))


def test_disk_check_refuses_before_any_transfer(hub, tmp_path):
    with pytest.raises(hs.StageError, match="staging needs .* GB more in"):
        hs.stage(REPO, REV, str(tmp_path), hub.url, margin_bytes=10 ** 18)
    assert not [p for p, _h in hub.requests if "/resolve/" in p]


def test_token_goes_in_the_header_only_and_a_wrong_one_is_explained(tmp_path):
    hub = Hub(token="hf_secret")
    try:
        r = hs.stage(REPO, REV, str(tmp_path), hub.url, token="hf_secret")
        assert r["done"]
        assert all("hf_secret" not in p for p, _h in hub.requests)
        with pytest.raises(hs.StageError) as exc:
            hs.stage(REPO, REV, str(tmp_path / "other"), hub.url, token="hf_wrong")
        assert "401" in str(exc.value) and "weights_hf_token" in str(exc.value) and "hf_wrong" not in str(exc.value)
    finally:
        hub.close()


def test_unreachable_endpoint_names_the_setting(tmp_path):
    with pytest.raises(hs.StageError, match="cannot reach http://127.0.0.1:9/api/models/.*weights_hf_endpoint"):
        hs.stage(REPO, REV, str(tmp_path), "http://127.0.0.1:9", timeout=2)


def test_redirect_to_another_host_drops_the_token():
    import urllib.request
    handler = hs._SameHostRedirect()
    req = urllib.request.Request("http://hub.example/a", headers={"Authorization": "Bearer t"})
    new = handler.redirect_request(req, None, 302, "Found", {}, "http://cdn.example/b")
    assert "Authorization" not in new.headers
    same = handler.redirect_request(req, None, 302, "Found", {}, "http://hub.example/c")
    assert same.headers.get("Authorization") == "Bearer t"
