"""The HF mirror's repositories (sim/kimisim/hfmirror.py): the default stand-in keeps its bytes and commit, a larger
one is made beside it in pieces, and a model snapshot is published with its safetensors as LFS objects."""
import hashlib
import os
import subprocess

import pytest

from kimisim import hfmirror

# The default stand-in's commit (fixed bytes, fixed dates): the weights tests and recorded runs name it.
DEFAULT_COMMIT = "fa8b2b65cceedf37c68537b27034deca9cb21e30"


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setattr(hfmirror, "STATE", str(tmp_path))
    return tmp_path


def _ls(repo_dir):
    return subprocess.run(["git", "-C", str(repo_dir), "ls-files"], capture_output=True, text=True,
                          check=True).stdout.split()


def test_the_default_stand_in_keeps_its_bytes_and_commit(state):
    rec = hfmirror.ensure_hf_repo()
    assert (rec["repo"], rec["revision"], rec["bytes_total"]) == ("kimi-sim/Kimi-K3-standin", DEFAULT_COMMIT, 67109281)
    assert (state / "hf" / "repo.json").exists()


def test_a_larger_stand_in_is_made_in_pieces_beside_it(state):
    spec = dict(hfmirror.big_repo(2, 1), shard_bytes=20 * 1024 * 1024 + 7)  # more than one 16 MiB piece, odd size
    assert hfmirror.big_repo(8, 256) == {"repo": "kimi-sim/Kimi-K3-standin-8x256m", "shards": 8,
                                         "shard_bytes": 268435456, "record": "repo-8x256m.json"}
    rec = hfmirror.ensure_hf_repo(spec)
    shards = sorted(n for n in rec["files"] if n.endswith(".safetensors"))
    assert shards == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    assert [rec["files"][n]["size"] for n in shards] == [20 * 1024 * 1024 + 7] * 2
    assert (state / "hf" / "repo-2x1m.json").exists()
    # the mirror serves the content: the LFS object under its sha256, a pointer in git
    repo_dir = state / "hf" / "mirrors" / "models" / "kimi-sim" / "Kimi-K3-standin-2x1m"
    oid = rec["files"][shards[0]]["sha256"]
    with open(repo_dir / ".git" / "lfs" / "objects" / oid[:2] / oid[2:4] / oid, "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == oid
    assert "oid sha256:%s" % oid in (repo_dir / shards[0]).read_text()


def test_a_snapshot_is_published_with_its_safetensors_as_lfs_objects(state, tmp_path):
    snap = tmp_path / "snap"
    (snap / "sub").mkdir(parents=True)
    (snap / "config.json").write_text('{"a": 1}\n')
    blob = tmp_path / "blob"
    blob.write_bytes(b"\x01" * 1000)
    os.symlink(str(blob), str(snap / "model-00001-of-00001.safetensors"))  # HF snapshots link to their blobs
    (snap / "sub" / "t.txt").write_text("x\n")
    rec = hfmirror.ensure_hf_repo(hfmirror.model_repo(str(snap), "moonshotai/Kimi-K3"))
    assert rec["repo"] == "moonshotai/Kimi-K3" and rec["bytes_total"] == 9 + 1000 + 2
    assert rec["files"]["model-00001-of-00001.safetensors"] == {
        "size": 1000, "sha256": hashlib.sha256(b"\x01" * 1000).hexdigest()}
    repo_dir = state / "hf" / "mirrors" / "models" / "moonshotai" / "Kimi-K3"
    assert sorted(_ls(repo_dir)) == ["config.json", "model-00001-of-00001.safetensors", "sub/t.txt"]
    assert (repo_dir / "model-00001-of-00001.safetensors").read_text().startswith("version https://git-lfs")
    assert (repo_dir / "config.json").read_text() == '{"a": 1}\n'
    assert (state / "hf" / "repo-moonshotai--Kimi-K3.json").exists()
