"""`simctl fault`'s disk read limit (slow_weights_disk): set on the node container's blkio cgroup and recorded in
the node's state directory, lifted from that record on clear; a fault call that neither asks for a limit nor has
one recorded leaves the container alone (no `docker inspect`). Its packet filter (fabric_port_blocked): every REJECT
for the node's address is the sim's and goes before the fault's own rule is set, a stale one without a record too."""

import shlex
import types

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


class _FakeIptables:
    """`iptables` as `simctl` calls it through `sh`: -S prints the rules as iptables does (the comment in double
    quotes), -D removes the rule given as tokens, -I adds one (as iptables lists it: /32 and `-m tcp`)."""

    def __init__(self, rules):
        self.rules = [shlex.split(r) for r in rules]

    @staticmethod
    def _printed(tokens):
        return " ".join('"%s"' % t if prev == "--comment" else t for prev, t in zip([""] + tokens, tokens))

    def __call__(self, cmd, check=True, **kwargs):
        assert cmd[0] == "iptables", cmd
        done = types.SimpleNamespace(returncode=0, stdout="", stderr="")
        if cmd[1] == "-S":
            done.stdout = "-P INPUT ACCEPT\n" + "".join("-A INPUT %s\n" % self._printed(r) for r in self.rules)
        elif cmd[1] == "-D":
            self.rules.remove(cmd[3:])
        else:
            spec = cmd[3:]
            spec[spec.index("-d") + 1] += "/32"
            self.rules.insert(0, spec[:spec.index("--dport")] + ["-m", "tcp"] + spec[spec.index("--dport"):])
        return done


STALE = "-d 127.0.0.61/32 -p tcp -m tcp --dport 29601 -j REJECT --reject-with tcp-reset"
OTHER = "-d 127.0.0.62/32 -p tcp -m tcp --dport 29601 -j REJECT --reject-with tcp-reset"
ACCEPT = "-d 127.0.0.61/32 -p tcp -m tcp --dport 22 -j ACCEPT"


@pytest.fixture
def iptables(monkeypatch):
    mod = _simctl("faults")
    monkeypatch.setattr(mod.shutil, "which", lambda name: "/usr/sbin/" + name)
    fake = _FakeIptables([STALE, OTHER, ACCEPT])
    monkeypatch.setattr(mod, "sh", fake)
    return mod, fake


def test_a_rule_left_without_its_record_is_removed_with_the_nodes_own(iptables):
    mod, fake = iptables
    mod.packet_filter("127.0.0.61", [29601])
    # the stale REJECT for the node's address went, the new one carries the sim's comment; another node's rule and
    # a rule that is not a REJECT stay
    assert [fake._printed(r) for r in fake.rules] == [
        '-p tcp -d 127.0.0.61/32 -m tcp --dport 29601 -m comment --comment "kimi-sim:fabric_port_blocked" -j REJECT '
        '--reject-with tcp-reset', OTHER, ACCEPT]
    mod.packet_filter("127.0.0.61", [])          # cleared: the quoted comment is matched too
    assert [fake._printed(r) for r in fake.rules] == [OTHER, ACCEPT]
