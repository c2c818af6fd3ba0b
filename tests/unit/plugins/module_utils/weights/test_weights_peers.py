"""Peers: the read-only server of verified blobs, the choice of source, and staging on several "nodes" of this
machine (each its own cache directory and peer server on 127.0.0.1, one local endpoint counting what it sends):
each file leaves the endpoint once, a tampered file is refused everywhere and never crosses to a peer, a dead or
lying peer is replaced by the endpoint, a second run neither transfers nor reads."""
import json
import os
import threading
import urllib.error
import urllib.request

import pytest

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.weights import hf_stage as hs
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.weights import integrity as ig
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.weights import peer
from tests.unit.plugins.module_utils.weights.test_hf_stage import FILES, REPO, REV, Hub, _tree

TOTAL = sum(len(d) for d in FILES.values())
CONFIG = "config.json"


@pytest.fixture
def hub():
    h = Hub()
    yield h
    h.close()


class Node(object):
    def __init__(self, root, name):
        self.name, self.cache = name, str(root / name)
        self.repo_dir = hs.repo_cache_dir(self.cache, REPO)
        os.makedirs(self.repo_dir)
        self.server = peer.make_server(self.repo_dir, "127.0.0.1", 0)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def nodes(tmp_path):
    made = [Node(tmp_path, "n%d" % i) for i in (1, 2, 3)]
    yield made
    for n in made:
        n.close()


def _peers(nodes, extra=()):
    return [{"name": n.name, "address": "127.0.0.1", "port": n.port} for n in nodes] + list(extra)


def _stage_all(nodes, hub, run="run-1", peers=None, **kw):
    peers = peers or _peers(nodes)
    out, errors = {}, []

    def one(n):
        try:
            out[n.name] = hs.stage(REPO, REV, n.cache, hub.url, node=n.name, peers=peers, run=run,
                                   peer_wait_s=kw.pop("peer_wait_s", 30), **kw)
        except Exception as exc:  # pylint: disable=broad-except
            errors.append(exc)
    threads = [threading.Thread(target=one, args=(n,)) for n in nodes]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    return out


def _get(url, headers=None):
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=5) as r:
            return r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)


def test_the_peer_server_serves_verified_blobs_only(tmp_path, hub):
    (n,) = [Node(tmp_path, "solo")]
    try:
        base = "http://127.0.0.1:%d" % n.port
        assert json.loads(_get(base + "/manifest")[1]) == {"verified": [], "refused": [], "state": None, "run": None}
        r = hs.stage(REPO, REV, n.cache, hub.url, run="r")
        etags = sorted(f["oid"] if "lfs" not in f else f["lfs"]["oid"] for f in r["files"])
        view = json.loads(_get(base + "/manifest")[1])
        assert view == {"verified": etags, "refused": [], "state": "done", "run": "r"}
        shard = [x for x in hs.parse_tree(_tree()) if x["path"] == "model-00002-of-00002.safetensors"][0]
        code, body, _h = _get(base + "/blobs/" + shard["etag"])
        assert code == 200 and body == FILES[shard["path"]]
        code, body, headers = _get(base + "/blobs/" + shard["etag"], {"Range": "bytes=1000-"})
        assert code == 206 and body == FILES[shard["path"]][1000:]
        assert headers["Content-Range"] == "bytes 1000-%d/%d" % (len(body) + 999, len(body) + 1000)
        # a blob changed after its verification is not served (nor listed); neither are other paths
        blob = os.path.join(n.repo_dir, "blobs", shard["etag"])
        os.utime(blob, ns=(1, 1))
        assert _get(base + "/blobs/" + shard["etag"])[0] == 404
        assert shard["etag"] not in json.loads(_get(base + "/manifest")[1])["verified"]
        for path in ("/blobs/" + shard["etag"] + ".incomplete", "/blobs/../" + ig.MANIFEST_NAME, "/etc/passwd", "/"):
            assert _get(base + path)[0] == 404, path
        req = urllib.request.Request(base + "/manifest", data=b"x", method="POST")
        with pytest.raises(urllib.error.HTTPError) as exc:
            urllib.request.urlopen(req, timeout=5)
        assert exc.value.code == 405
    finally:
        n.close()


def _f(etag="e" * 64):
    return {"path": "p", "etag": etag}


@pytest.mark.parametrize("origin,view,silent,endpoint_only,want", [
    ("me", None, 0, False, "endpoint"),                                                   # its own share
    (None, None, 0, False, "endpoint"),                                                   # no peers
    ("n2", {"verified": {"e" * 64}}, 0, False, "peer"),
    ("n2", {"verified": {"e" * 64}}, 0, True, "endpoint"),                                # the peer's copy failed
    ("n2", {"verified": set(), "refused": {"e" * 64}}, 0, False, "endpoint"),             # the origin refused it
    ("n2", {"verified": set(), "state": "staging", "run": "r"}, 10 ** 6, False, None),    # alive: wait
    ("n2", {"verified": set(), "state": "done", "run": "r"}, 0, False, "endpoint"),       # ended without it
    ("n2", {"verified": set(), "state": "failed", "run": "r"}, 0, False, "endpoint"),
    ("n2", {"verified": set(), "state": "done", "run": "old"}, 0, False, None),           # an earlier run's end
    ("n2", None, 599.9, False, None),                                                     # silent, not for long
    ("n2", None, 600, False, "endpoint"),                                                 # dead
])
def test_choose_source(origin, view, silent, endpoint_only, want):
    assert hs.choose_source(_f(), origin, "me", view, "r", silent, 600, endpoint_only) == want


def test_three_nodes_pull_each_file_once_from_the_endpoint(nodes, hub):
    out = _stage_all(nodes, hub)
    assert sum(hub.sent.values()) == TOTAL and all(hub.sent[p] == len(d) for p, d in FILES.items())
    origins = ig.assign_origins([{"path": p, "size": len(d)} for p, d in FILES.items()], ["n1", "n2", "n3"])
    for name, r in out.items():
        assert r["verified"]["ok"] and r["refused"] == [] and r["peer_fallbacks"] == [], (name, r)
        own = sum(len(FILES[p]) for p, o in origins.items() if o == name)
        assert (r["bytes_from_endpoint"], r["bytes_from_peers"]) == (own, TOTAL - own)
        assert r["files_verified"] == len(FILES)
    # second run: nothing transferred, nothing read again
    again = _stage_all(nodes, hub, run="run-2")
    assert sum(hub.sent.values()) == TOTAL
    for r in again.values():
        assert (r["bytes_transferred"], r["files_rehashed"], r["changed"], r["verified"]["ok"]) == (0, 0, False, True)


def test_a_tampered_file_is_refused_on_every_node_and_never_reaches_a_peer(nodes, hub):
    good = FILES[CONFIG]
    hub.tamper[CONFIG] = good.replace(b"1", b"2")  # same size
    out = _stage_all(nodes, hub)
    expected = ig.git_blob_id(good)
    actual = ig.git_blob_id(hub.tamper[CONFIG])
    for name, r in out.items():
        (refusal,) = r["refused"]
        assert (refusal["node"], refusal["path"], refusal["expected"], refusal["actual"]) == (
            name, CONFIG, expected, actual)
        assert refusal["source"].startswith("endpoint %s/" % hub.url) and refusal["algo"] == "git-sha1"
        assert expected in refusal["msg"] and actual in refusal["msg"] and name in refusal["msg"]
        assert not r["verified"]["ok"] and r["verified"]["problems"] == ["%s is missing" % CONFIG]
        n = [x for x in nodes if x.name == name][0]
        assert not os.path.exists(os.path.join(n.repo_dir, "blobs", expected))
        assert not os.path.lexists(os.path.join(r["snapshot_dir"], CONFIG))
        assert expected not in ig.load_manifest(n.repo_dir)["blobs"]
    # every node asked the endpoint itself (the origin's refusal sent them there), none got it from a peer
    assert hub.sent[CONFIG] == 3 * len(good)


def test_a_dead_peer_is_waited_for_then_replaced_by_the_endpoint(nodes, hub):
    n1 = nodes[0]
    dead = {"name": "n0-dead", "address": "127.0.0.1", "port": nodes[1].port + 0}
    nodes[1].close()   # its port now refuses connections
    dead["port"] = nodes[1].port
    peers = [{"name": n1.name, "address": "127.0.0.1", "port": n1.port}, dead]
    r = hs.stage(REPO, REV, n1.cache, hub.url, node=n1.name, peers=peers, run="r", peer_wait_s=0.5)
    origins = ig.assign_origins([{"path": p, "size": len(d)} for p, d in FILES.items()], [n1.name, "n0-dead"])
    theirs = sorted(p for p, o in origins.items() if o == "n0-dead")
    assert theirs and sorted(r["peer_fallbacks"]) == theirs
    assert r["verified"]["ok"] and r["bytes_from_endpoint"] == TOTAL and r["bytes_from_peers"] == 0


def test_a_lying_peer_is_refused_and_the_endpoint_serves_the_file(nodes, hub):
    n1, n2 = nodes[0], nodes[1]
    hs.stage(REPO, REV, n2.cache, hub.url, run="r")
    # n2 is the origin of the second largest file (the largest goes to n1)
    shard = [x for x in hs.parse_tree(_tree()) if x["path"] == "model-00002-of-00002.safetensors"][0]
    blob = os.path.join(n2.repo_dir, "blobs", shard["etag"])
    st = os.stat(blob)
    with open(blob, "r+b") as f:   # bit rot that keeps size and mtime: the server still offers it
        f.write(b"\xff" * 16)
    os.utime(blob, ns=(st.st_atime_ns, st.st_mtime_ns))
    sent_before = dict(hub.sent)
    peers = [{"name": n.name, "address": "127.0.0.1", "port": n.port} for n in (n1, n2)]
    r = hs.stage(REPO, REV, n1.cache, hub.url, node=n1.name, peers=peers, run="r", peer_wait_s=5)
    (refusal,) = r["refused"]
    assert refusal["path"] == shard["path"] and refusal["source"].startswith("peer n2 (http://127.0.0.1:")
    assert r["verified"]["ok"] and refusal["expected"] == shard["etag"] != refusal["actual"]
    assert hub.sent[shard["path"]] - sent_before.get(shard["path"], 0) == shard["size"]


def test_reverification_reads_only_what_changed_and_full_reads_everything(hub, tmp_path):
    cache = str(tmp_path)
    hs.stage(REPO, REV, cache, hub.url, run="r1")
    quiet = hs.stage(REPO, REV, cache, hub.url, run="r2")
    assert (quiet["files_rehashed"], quiet["bytes_transferred"], quiet["changed"]) == (0, 0, False)
    repo_dir = hs.repo_cache_dir(cache, REPO)
    cfg = [x for x in hs.parse_tree(_tree()) if x["path"] == CONFIG][0]
    os.utime(os.path.join(repo_dir, "blobs", cfg["etag"]), ns=(10 ** 18, 10 ** 18))
    touched = hs.stage(REPO, REV, cache, hub.url, run="r3")
    assert (touched["files_rehashed"], touched["bytes_rehashed"], touched["changed"]) == (1, len(FILES[CONFIG]), False)
    full = hs.stage(REPO, REV, cache, hub.url, run="r4", verify="full")
    assert (full["files_rehashed"], full["bytes_rehashed"], full["bytes_transferred"]) == (len(FILES), TOTAL, 0)
    # the same run does not read them a second time (rounds of one full pass)
    assert hs.stage(REPO, REV, cache, hub.url, run="r4", verify="full")["files_rehashed"] == 0
    # check mode says what it would read, reads nothing
    os.utime(os.path.join(repo_dir, "blobs", cfg["etag"]), ns=(2 * 10 ** 18, 2 * 10 ** 18))
    check = hs.stage(REPO, REV, cache, hub.url, run="r5", check_mode=True)
    assert (check["files_to_rehash"], check["changed"], check["files_rehashed"]) == (1, False, 0)


def test_a_blob_corrupted_on_disk_is_refused_deleted_and_fetched_again(hub, tmp_path):
    cache = str(tmp_path)
    hs.stage(REPO, REV, cache, hub.url, run="r1")
    repo_dir = hs.repo_cache_dir(cache, REPO)
    cfg = [x for x in hs.parse_tree(_tree()) if x["path"] == CONFIG][0]
    with open(os.path.join(repo_dir, "blobs", cfg["etag"]), "r+b") as f:
        f.write(b"[")
    r = hs.stage(REPO, REV, cache, hub.url, run="r2", node="tray01")
    (refusal,) = r["refused"]
    assert refusal["source"].startswith("the blob on disk") and refusal["expected"] == cfg["etag"]
    assert r["verified"]["ok"] and r["bytes_from_endpoint"] == len(FILES[CONFIG]) and r["changed"]


@pytest.mark.parametrize("bad", ["garbage", "0" * 40 + "/../x"])
def test_peer_server_ignores_names_that_are_no_blob_ids(tmp_path, bad):
    assert peer.servable(str(tmp_path), bad) is None


def _free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_the_detached_server_starts_once_and_stops(tmp_path):
    repo_dir = str(tmp_path / "hub" / "models--o--m")
    port = _free_port()
    changed, rec = peer.start(repo_dir, "127.0.0.1", port, lifetime_s=120)
    try:
        assert changed and rec["port"] == port and peer.running(repo_dir)["pid"] == rec["pid"]
        assert _get("http://127.0.0.1:%d/manifest" % port)[0] == 200
        assert peer.start(repo_dir, "127.0.0.1", port)[0] is False        # already serving: left alone
    finally:
        assert peer.stop(repo_dir) is True
    assert peer.running(repo_dir) is None and peer.stop(repo_dir) is False
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen("http://127.0.0.1:%d/manifest" % port, timeout=2)
