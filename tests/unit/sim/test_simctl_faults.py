"""`simctl fault`'s disk read limit (slow_weights_disk): set on the node container's blkio cgroup and recorded in
the node's state directory, lifted from that record on clear; a fault call that neither asks for a limit nor has
one recorded leaves the container alone (no `docker inspect`)."""

import pytest

from tests.unit.sim.test_simctl_router import _simctl

CLUSTER = {"name": "gb300", "models_dir": "/var/lib/kimi-sim/models"}
NODE = "gb300-node02"
LIMIT = 16 * 1024 * 1024


@pytest.fixture
def faults(tmp_path, monkeypatch):
    mod = _simctl("faults")
    monkeypatch.setattr(mod, "node_state_dir", lambda node: str(tmp_path / "state" / node))
    monkeypatch.setattr(mod, "_models_device", lambda cluster: "8:16")
    calls = []

    def no_docker(*args, **kwargs):
        calls.append(args)
        raise AssertionError("docker asked: %r" % (args,))
    monkeypatch.setattr(mod, "dk", no_docker)
    mod.docker_calls = calls
    return mod


def _cgroup(tmp_path, name="cg1"):
    blkio = tmp_path / "blkio" / name
    blkio.mkdir(parents=True)
    (blkio / "blkio.throttle.read_bps_device").write_text("")
    return blkio


def _record(tmp_path):
    return tmp_path / "state" / NODE / "disk_throttle.json"


def test_no_limit_asked_and_none_set_touches_nothing(faults, tmp_path):
    for bps in (None, 0):
        faults.disk_throttle(CLUSTER, NODE, bps)
    assert faults.docker_calls == [] and not _record(tmp_path).exists()


def test_a_limit_is_set_recorded_and_lifted_from_the_record(faults, tmp_path, monkeypatch):
    blkio = _cgroup(tmp_path)
    asked = []
    monkeypatch.setattr(faults, "_blkio_dir", lambda node: asked.append(node) or str(blkio))
    faults.disk_throttle(CLUSTER, NODE, LIMIT)
    assert (blkio / "blkio.throttle.read_bps_device").read_text() == "8:16 16777216\n"
    assert faults.read_json(str(_record(tmp_path))) == {"blkio": str(blkio), "device": "8:16", "bps": LIMIT}
    assert asked == [NODE]
    faults.disk_throttle(CLUSTER, NODE, None)
    assert (blkio / "blkio.throttle.read_bps_device").read_text() == "8:16 0\n"
    assert not _record(tmp_path).exists() and asked == [NODE]
    faults.disk_throttle(CLUSTER, NODE, None)
    assert asked == [NODE] and faults.docker_calls == []


def test_a_new_limit_replaces_the_recorded_one(faults, tmp_path, monkeypatch):
    old, new = _cgroup(tmp_path, "old"), _cgroup(tmp_path, "new")
    monkeypatch.setattr(faults, "_blkio_dir", lambda node: str(old))
    faults.disk_throttle(CLUSTER, NODE, LIMIT)
    monkeypatch.setattr(faults, "_blkio_dir", lambda node: str(new))
    faults.disk_throttle(CLUSTER, NODE, 2 * LIMIT)
    assert (old / "blkio.throttle.read_bps_device").read_text() == "8:16 0\n"
    assert (new / "blkio.throttle.read_bps_device").read_text() == "8:16 33554432\n"
    assert faults.read_json(str(_record(tmp_path)))["blkio"] == str(new)


def test_clearing_after_the_container_was_made_again_forgets_the_gone_cgroup(faults, tmp_path, monkeypatch):
    blkio = _cgroup(tmp_path)
    monkeypatch.setattr(faults, "_blkio_dir", lambda node: str(blkio))
    faults.disk_throttle(CLUSTER, NODE, LIMIT)
    (blkio / "blkio.throttle.read_bps_device").unlink()
    blkio.rmdir()
    faults.disk_throttle(CLUSTER, NODE, 0)
    assert not blkio.exists() and not _record(tmp_path).exists() and faults.docker_calls == []


def test_a_limit_without_blkio_is_refused(faults, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(faults, "_blkio_dir", lambda node: None)
    with pytest.raises(SystemExit):
        faults.disk_throttle(CLUSTER, NODE, LIMIT)
    assert "fault slow_weights_disk needs cgroup v1 blkio for the node container (none found for %s)" % NODE \
        in capsys.readouterr().err
    assert not _record(tmp_path).exists()
