"""module_utils.weights.integrity: content hashes (exact values), the verified manifest, the token rule and the
origin planner (hypothesis properties)."""
import hashlib
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.weights import hf_stage as hs
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.weights import integrity as ig


def test_git_blob_ids_are_gits():
    assert ig.git_blob_id(b"hello\n") == "ce013625030ba8dba906f756967f9e9ca394464a"
    assert ig.git_blob_id(b"") == "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"


def test_streamed_hash_equals_one_shot_hash_in_any_chunking():
    data = bytes(range(256)) * 1000
    for algo, want in ((ig.SHA256, hashlib.sha256(data).hexdigest()), (ig.GIT_SHA1, ig.git_blob_id(data))):
        h = ig.ContentHash(algo, len(data))
        for i in range(0, len(data), 4093):
            h.update(data[i:i + 4093])
        assert h.hexdigest() == want and h.fed == len(data)


def test_hash_path_continues_a_hasher_and_counts_bytes(tmp_path):
    p = tmp_path / "part"
    p.write_bytes(b"hel")
    seen = []
    h = ig.hash_path(str(p), ig.GIT_SHA1, 6, on_bytes=seen.append, chunk=2)
    h.update(b"lo\n")
    assert h.hexdigest() == "ce013625030ba8dba906f756967f9e9ca394464a" and seen == [2, 1]


@pytest.mark.parametrize("entry,want", [
    ({"path": "config.json", "oid": "ce013625030ba8dba906f756967f9e9ca394464a"},
     ("git-sha1", "ce013625030ba8dba906f756967f9e9ca394464a")),
    ({"path": "m.safetensors", "oid": "a" * 40, "lfs": {"oid": "b" * 64, "size": 3}}, ("sha256", "b" * 64)),
    ({"path": "m.safetensors", "oid": "a" * 40, "lfs": {"oid": "sha256:" + "c" * 64, "size": 3}}, ("sha256", "c" * 64)),
])
def test_expected_hash(entry, want):
    assert ig.expected_hash(entry) == want


@pytest.mark.parametrize("entry,words", [
    ({"path": "m.safetensors", "oid": "a" * 40, "lfs": {"oid": "a" * 40}}, r"an LFS file\) no sha256"),
    ({"path": "config.json", "oid": "b" * 64}, "no git blob id"),
    ({"path": "config.json"}, "no git blob id"),
])
def test_expected_hash_refuses_a_hash_of_the_wrong_kind(entry, words):
    with pytest.raises(ig.IntegrityError, match=words):
        ig.expected_hash(entry)


def test_manifest_round_trip_and_what_it_vouches_for(tmp_path):
    repo = str(tmp_path)
    m = ig.load_manifest(repo)
    assert m == {"version": 1, "blobs": {}, "refused": {}, "state": {}}
    ig.record(m, "e" * 64, "sha256", 10, 123456789012345678, run="r1")
    ig.save_manifest(repo, m)
    back = ig.load_manifest(repo)
    assert back["blobs"] == {"e" * 64: {"algo": "sha256", "hash": "e" * 64, "size": 10,
                                        "mtime_ns": 123456789012345678, "run": "r1"}}
    key = (10, 123456789012345678)
    assert ig.trusted(back, "e" * 64, "sha256", key)
    assert not ig.trusted(back, "e" * 64, "sha256", (10, 123456789012345679))  # touched
    assert not ig.trusted(back, "e" * 64, "sha256", (11, 123456789012345678))  # size
    assert not ig.trusted(back, "e" * 64, "git-sha1", key)
    assert not ig.trusted(back, "e" * 64, "sha256", None)                      # gone
    assert ig.trusted(back, "e" * 64, "sha256", key, verify="full", run="r1")
    assert not ig.trusted(back, "e" * 64, "sha256", key, verify="full", run="r2")


@pytest.mark.parametrize("text", ["not json", "[]", '{"version": 99, "blobs": {}}', '{"version": 1, "blobs": []}'])
def test_an_unreadable_manifest_vouches_for_nothing(tmp_path, text):
    (tmp_path / ig.MANIFEST_NAME).write_text(text)
    assert ig.load_manifest(str(tmp_path))["blobs"] == {}


@pytest.mark.parametrize("url,ok", [
    ("https://huggingface.co", True), ("https://10.0.0.5:8443", True), ("http://127.0.0.1:8090", True),
    ("http://127.3.4.5", True), ("http://[::1]:8090", True), ("http://localhost:8090", True),
    ("http://LOCALHOST.", True), ("http://hf-mirror.corp", False), ("http://10.0.0.5:8090", False),
    ("http://127.0.0.1.evil.example", False), ("http://[::2]", False), ("ftp://127.0.0.1", False), ("", False),
])
def test_where_a_token_may_go(url, ok):
    assert ig.token_allowed(url) is ok


def test_the_token_refusal_names_the_variable_and_not_the_path():
    msg = ig.token_transport_problem("http://hf-mirror.corp:8090/some/path")
    assert msg.startswith("weights_hf_endpoint http://hf-mirror.corp:8090 is plain http to a host that is not loopback")
    assert "https" in msg and "/some/path" not in msg
    assert ig.token_transport_problem("https://hf-mirror.corp") is None


def test_the_stager_refuses_a_token_over_plain_http_before_any_request():
    problem = hs.validate_request("o/m", "a" * 40, "http://hf-mirror.corp", token="hf_secret")
    assert "weights_hf_endpoint http://hf-mirror.corp is plain http" in problem and "hf_secret" not in problem
    assert hs.validate_request("o/m", "a" * 40, "http://hf-mirror.corp") is None
    assert hs.validate_request("o/m", "a" * 40, "http://127.0.0.1:8090", token="t") is None


def test_assign_origins_exact():
    files = [{"path": "a", "size": 50}, {"path": "b", "size": 40}, {"path": "c", "size": 30},
             {"path": "d", "size": 20}, {"path": "e", "size": 10}, {"path": "config.json", "size": 1}]
    assert ig.assign_origins(files, ["n1", "n2", "n3"]) == {
        "a": "n1", "b": "n2", "c": "n3", "d": "n3", "e": "n2", "config.json": "n1"}
    assert ig.assign_origins(files, []) == {}
    assert set(ig.assign_origins(files, ["solo"]).values()) == {"solo"}


FILES = st.lists(st.tuples(st.text("abcdefgh/._-", min_size=1, max_size=12), st.integers(0, 10 ** 12)),
                 max_size=40, unique_by=lambda t: t[0]).map(lambda xs: [{"path": p, "size": s} for p, s in xs])
NODES = st.lists(st.text("abcdefghij0123456789-", min_size=1, max_size=8), min_size=1, max_size=9, unique=True)


@settings(max_examples=200, deadline=None)
@given(FILES, NODES, st.randoms())
def test_assign_origins_properties(files, nodes, rnd):
    got = ig.assign_origins(files, nodes)
    # every file exactly once, to a node of the cluster
    assert set(got) == set(f["path"] for f in files) and set(got.values()) <= set(nodes)
    # the same on every node: the listing's order does not matter
    shuffled = list(files)
    rnd.shuffle(shuffled)
    assert ig.assign_origins(shuffled, nodes) == got
    # balanced: no node carries more than the average plus the largest file
    load = dict((n, 0) for n in nodes)
    for f in files:
        load[got[f["path"]]] += f["size"]
    biggest = max([f["size"] for f in files] or [0])
    assert max(load.values()) <= sum(load.values()) / float(len(nodes)) + biggest


@pytest.mark.parametrize("address,etag,want", [
    ("10.0.0.5", "", "http://10.0.0.5:29780/manifest"),
    ("fd00::5", "ab" * 20, "http://[fd00::5]:29780/blobs/" + "ab" * 20),
])
def test_peer_url(address, etag, want):
    assert ig.peer_url(address, 29780, etag) == want


def test_save_manifest_is_atomic(tmp_path):
    m = ig.empty_manifest()
    ig.save_manifest(str(tmp_path), m)
    assert os.listdir(str(tmp_path)) == [ig.MANIFEST_NAME]


JUNK = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                    max_leaves=8)
ENTRY = st.fixed_dictionaries({"type": st.sampled_from(["file", "directory", 3, None]),
                               "path": st.one_of(st.text("ab/._", max_size=10), JUNK),
                               "size": st.one_of(st.integers(-5, 10 ** 15), JUNK),
                               "oid": st.one_of(st.text("0123456789abcdef", min_size=40, max_size=40), JUNK)},
                              optional={"lfs": st.one_of(JUNK, st.fixed_dictionaries({
                                  "oid": st.one_of(st.text("0123456789abcdef", min_size=64, max_size=64), JUNK),
                                  "size": st.one_of(st.integers(0, 10 ** 15), JUNK)}))})


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(ENTRY, JUNK), max_size=6))
def test_the_tree_parser_accepts_or_refuses_by_name_never_crashes(entries):
    try:
        files = hs.parse_tree(entries)
    except hs.StageError as exc:
        assert str(exc)
        return
    for f in files:
        assert f["algo"] in ("sha256", "git-sha1") and ig.HEX[f["algo"]].match(f["etag"]) and f["size"] >= 0
        assert not f["path"].startswith("/") and ".." not in f["path"].split("/")


VALID = st.lists(st.tuples(st.text("abcxyz_-.", min_size=1, max_size=6).filter(lambda p: p not in (".", "..")),
                           st.integers(0, 10 ** 13), st.booleans(), st.binary(min_size=20, max_size=32)),
                 min_size=1, max_size=8, unique_by=lambda t: t[0])


@settings(max_examples=150, deadline=None)
@given(VALID)
def test_the_list_a_round_hands_the_next_one_parses_to_the_same_files(spec):
    entries = []
    for path, size, lfs, seed in spec:
        e = {"type": "file", "path": path, "size": size, "oid": hashlib.sha1(seed).hexdigest()}
        if lfs:
            e["lfs"] = {"oid": hashlib.sha256(seed).hexdigest(), "size": size, "pointerSize": 130}
        entries.append(e)
    files = hs.parse_tree(entries)
    assert hs.parse_tree(hs.listing_of(files)) == files
