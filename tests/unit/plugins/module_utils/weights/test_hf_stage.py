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
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.weights import integrity

REPO = "sim-org/Tiny"
REV = "a" * 40
FILES = {"config.json": b'{"x": 1}\n', "model-00001-of-00002.safetensors": os.urandom(3 * 1024 * 1024 + 7),
         "model-00002-of-00002.safetensors": os.urandom(1024 * 1024), "sub/tokenizer.json": b"{}"}


def _tree():
    out = []
    for path, data in sorted(FILES.items()):
        e = {"type": "file", "path": path, "size": len(data), "oid": integrity.git_blob_id(data)}
        if path.endswith(".safetensors"):
            e["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
        out.append(e)
    return out + [{"type": "directory", "path": "sub", "oid": "b" * 40, "size": 0}]


class Hub(object):
    def __init__(self, ranges=True, token=None):
        self.ranges, self.token, self.requests = ranges, token, []
        self.tamper, self.sent, self.lock = {}, {}, threading.Lock()
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
                data = hub.tamper.get(m.group(1), FILES[m.group(1)])
                rng = re.match(r"bytes=(\d+)-$", self.headers.get("Range") or "")
                start = int(rng.group(1)) if rng and hub.ranges else 0
                with hub.lock:
                    hub.sent[m.group(1)] = hub.sent.get(m.group(1), 0) + len(data) - start
                if rng and hub.ranges:
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
    assert cfg["etag"] == integrity.git_blob_id(FILES["config.json"]) and cfg["size"] == len(FILES["config.json"])
    assert (cfg["algo"], shard["algo"]) == ("git-sha1", "sha256")


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


def _ticking(monkeypatch):
    ticks = iter(range(0, 10 ** 6))
    monkeypatch.setattr(hs, "_clock", lambda: next(ticks))   # every look at the clock costs one "second"


def test_a_round_ends_between_files_at_the_deadline_and_the_next_round_goes_on(hub, tmp_path, monkeypatch):
    _ticking(monkeypatch)
    first = hs.stage(REPO, REV, str(tmp_path), hub.url, max_seconds=4, concurrency=1)
    assert not first["done"] and 1 <= first["files_transferred"] < len(FILES) and first["current"]
    # a file is never left half done by the deadline: the next round would have to read it again to hash it
    assert not [n for n in os.listdir(os.path.join(_repo_dir(tmp_path), "blobs")) if n.endswith(".incomplete")]
    rest = hs.stage(REPO, REV, str(tmp_path), hub.url, files=first["files"])
    assert rest["done"] and rest["verified"]["ok"] and rest["restarted"] == []
    assert rest["bytes_transferred"] + first["bytes_transferred"] == sum(len(d) for d in FILES.values())
    assert rest["files_verified"] + first["files_verified"] == len(FILES)


def _part(tmp_path, path, data):
    f = [x for x in hs.parse_tree(_tree()) if x["path"] == path][0]
    blobs = os.path.join(_repo_dir(tmp_path), "blobs")
    os.makedirs(blobs, exist_ok=True)
    part = os.path.join(blobs, f["etag"] + ".incomplete")
    with open(part, "wb") as out:
        out.write(data)
    return f, part


def test_a_partial_file_is_resumed_with_range_and_its_bytes_are_hashed_first(hub, tmp_path):
    shard = "model-00001-of-00002.safetensors"
    have = 1024 * 1024 + 3
    _part(tmp_path, shard, FILES[shard][:have])
    r = hs.stage(REPO, REV, str(tmp_path), hub.url)
    assert r["done"] and r["verified"]["ok"] and r["restarted"] == [] and r["refused"] == []
    resumed = [h for p, h in hub.requests if p.endswith(shard)]
    assert [h.get("Range") for h in resumed] == ["bytes=%d-" % have]
    assert r["bytes_transferred"] == sum(len(d) for d in FILES.values()) - have


def test_a_corrupt_partial_file_is_refused_deleted_and_never_linked_then_fetched_whole(hub, tmp_path):
    shard = "model-00001-of-00002.safetensors"
    f, part = _part(tmp_path, shard, b"\0" * 1000)
    r = hs.stage(REPO, REV, str(tmp_path), hub.url, node="tray01", run="run-1")
    bad = integrity.ContentHash("sha256", f["size"])
    bad.update(b"\0" * 1000 + FILES[shard][1000:])
    (refusal,) = r["refused"]
    assert refusal["expected"] == f["etag"] and refusal["actual"] == bad.hexdigest() and refusal["node"] == "tray01"
    assert refusal["msg"] == (
        "tray01: %s refused: endpoint %s/%s/resolve/%s/%s sent content whose sha256 is %s, but %s lists %s for it "
        "at this revision; the bytes were deleted and never linked" % (
            shard, hub.url, REPO, REV, shard, bad.hexdigest(), hub.url, f["etag"]))
    assert not os.path.exists(part) and not os.path.lexists(os.path.join(r["snapshot_dir"], shard))
    assert r["done"] and not r["verified"]["ok"] and r["verified"]["problems"] == ["%s is missing" % shard]
    # the same run does not fetch it again; the next run does, whole, and verifies it
    again = hs.stage(REPO, REV, str(tmp_path), hub.url, node="tray01", run="run-1")
    assert again["bytes_transferred"] == 0 and not again["verified"]["ok"]
    fixed = hs.stage(REPO, REV, str(tmp_path), hub.url, node="tray01", run="run-2")
    assert fixed["verified"]["ok"] and fixed["bytes_from_endpoint"] == f["size"] and fixed["refused"] == []
    assert integrity.load_manifest(_repo_dir(tmp_path))["refused"] == {}


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
    req = urllib.request.Request("https://hub.example/a", headers={"Authorization": "Bearer t"})
    for elsewhere in ("https://cdn.example/b", "http://hub.example/c", "https://hub.example:8443/c",
                      "https://hub.example.evil.test/c"):
        new = handler.redirect_request(req, None, 302, "Found", {}, elsewhere)
        assert "Authorization" not in new.headers and "Authorization" not in new.unredirected_hdrs, elsewhere
    same = handler.redirect_request(req, None, 302, "Found", {}, "https://HUB.example/c")
    assert same.headers.get("Authorization") == "Bearer t"
    loop = urllib.request.Request("http://127.0.0.1:8090/a", headers={"Authorization": "Bearer t"})
    assert handler.redirect_request(loop, None, 302, "Found", {}, "http://127.0.0.1:8090/b").headers.get(
        "Authorization") == "Bearer t"
