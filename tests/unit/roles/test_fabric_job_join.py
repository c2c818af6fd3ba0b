"""The fabric job's join on a busy machine (roles/fabric/files/fabric_job.py, issue #35): the rendezvous is tried
again after a refused, reset or timed-out connection with backoff inside the deadline, the group's join waits for
slow peers up to it, and a rank that gives up (or is killed) names its phase and peer. Scripted failures on a fake
torch.distributed and a fake clock: no torch and no second process needed."""
import errno
import io
import json
import socket
import types

import pytest

from tests.unit.roles.test_fabric_job import job_module

SPEC = {"host": "n1", "node_rank": 1, "local_ranks": 1, "world_size": 2, "backend": "gloo",
        "master_host": "n0", "master_addr": "10.0.0.1", "master_port": 29501,
        "nodes": [{"host": "n0", "address": "10.0.0.1", "node_rank": 0, "ports": []},
                  {"host": "n1", "address": "10.0.0.2", "node_rank": 1, "ports": []}],
        "sizes": {"all_reduce": 64, "all_to_all": 64, "pair": 64, "iterations": 1}}
PEER = "n0 (10.0.0.1:29501)"
GROUP = "the group (n0 10.0.0.1, n1 10.0.0.2)"


@pytest.fixture(name="job", scope="module")
def fixture_job():
    return job_module()


class Clock(object):
    """Fake time: each attempt costs ``cost`` seconds, each sleep its length; the sleeps are recorded."""

    def __init__(self, cost=0.0):
        self.now, self.cost, self.sleeps = 1000.0, cost, []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


def scripted(outcomes, clock):
    """attempt(left): the next outcome (an exception is raised, anything else returned); the ``left`` seen."""
    seen = []

    def attempt(left):
        seen.append(round(left, 3))
        clock.now += clock.cost
        outcome = outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome
    return attempt, seen


def refused():
    return ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")


# ----------------------------------------------------------------------------- retries inside the deadline


def test_refused_and_reset_rendezvous_is_tried_again_with_backoff(job):
    clock, notes = Clock(cost=0.25), []
    attempt, seen = scripted([refused(), ConnectionResetError(errno.ECONNRESET, "Connection reset by peer"),
                              "store"], clock)
    assert job.retry_until(attempt, 1030.0, "rendezvous", PEER, clock, clock.sleep, notes.append) == ("store", 3)
    assert clock.sleeps == [0.5, 1.0]
    assert seen == [30.0, 29.25, 28.0]  # every attempt gets what is left of the deadline
    assert notes == [
        "rendezvous: attempt 1 with n0 (10.0.0.1:29501): ConnectionRefusedError: [Errno 111] Connection refused; "
        "again in 0.5s",
        "rendezvous: attempt 2 with n0 (10.0.0.1:29501): ConnectionResetError: [Errno 104] Connection reset by peer; "
        "again in 1.0s"]


def test_a_peer_that_never_answers_is_given_up_at_the_deadline_with_phase_and_peer(job):
    clock = Clock()
    attempt, _seen = scripted([refused()] * 10, clock)
    with pytest.raises(job.JoinFailure) as caught:
        job.retry_until(attempt, 1020.0, "rendezvous", PEER, clock, clock.sleep, lambda text: None)
    # 0.5 + 1 + 2 + 4 + 5 = 12.5 s slept; 7.5 s left is less than the next 5 s wait plus a 1 s attempt
    assert clock.sleeps == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
    exc = caught.value
    assert (exc.phase, exc.peer, exc.attempts, exc.waited_s) == ("rendezvous", PEER, 7, 17.5)
    assert str(exc) == ("rendezvous with n0 (10.0.0.1:29501) failed after 7 attempt(s) in 17.5s: "
                        "ConnectionRefusedError: [Errno 111] Connection refused")


def test_a_final_error_is_not_retried(job):
    clock = Clock()
    attempt, _seen = scripted([ValueError("unknown backend gloox")], clock)
    with pytest.raises(job.JoinFailure) as caught:
        job.retry_until(attempt, 1030.0, "rendezvous", PEER, clock, clock.sleep, lambda text: None)
    assert (caught.value.attempts, clock.sleeps) == (1, [])
    assert str(caught.value) == ("rendezvous with n0 (10.0.0.1:29501) failed after 1 attempt(s) in 0.0s: "
                                 "ValueError: unknown backend gloox")


@pytest.mark.parametrize("exc, again", [
    (ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"), True),
    (OSError(errno.EADDRINUSE, "Address already in use"), True),
    (socket.timeout("timed out"), True),
    (RuntimeError("The client socket has timed out after 30000ms while trying to connect to (10.0.0.1, 29501)."),
     True),
    (RuntimeError("The client socket has failed to connect to any network address of (10.0.0.1, 29501)."), True),
    (RuntimeError("[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
                  "[10.0.0.2]:48611"), False),
    (RuntimeError("NCCL error: unhandled system error"), False),
    (ValueError("bad address"), False),
])
def test_what_counts_as_a_busy_peer(job, exc, again):
    assert job.retryable(exc) is again


# ----------------------------------------------------------------------------- the join on a fake torch


class FakeStore(object):
    def __init__(self, keys=()):
        self.keys = dict((k, "x") for k in keys)

    def set(self, key, value):
        self.keys[key] = value

    def check(self, keys):
        return all(k in self.keys for k in keys)


class FakeDist(object):
    """torch.distributed as the join uses it: TCPStore answers from a script, init_process_group likewise."""

    def __init__(self, stores, init=None):
        self.stores, self.init, self.calls = list(stores), init, []

    def TCPStore(self, host, port, world, is_master, timeout, wait_for_workers):  # noqa: N802 - torch's name
        self.calls.append(("TCPStore", host, port, world, is_master, timeout.total_seconds(), wait_for_workers))
        outcome = self.stores.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def init_process_group(self, **kwargs):
        self.calls.append(("init_process_group", sorted(kwargs), kwargs["timeout"].total_seconds()))
        if self.init is not None:
            raise self.init

    def all_reduce(self, tensor):
        self.calls.append(("all_reduce", tensor))


FAKE_TORCH = types.SimpleNamespace(ones=lambda n, device=None: "ones(%d)" % n)
CPU = types.SimpleNamespace(type="cpu")


def test_a_slow_head_is_waited_for_and_the_group_joins(job, monkeypatch):
    clock, out = Clock(cost=0.0), io.StringIO()
    monkeypatch.setattr(job.sys, "stdout", out)
    monkeypatch.setattr(job, "_stderr_note", lambda text: None)
    store = FakeStore()
    dist = FakeDist([refused(), refused(), store])
    report = {}
    assert job._join(FAKE_TORCH, dist, SPEC, 1, 1030.0, CPU, report, clock, clock.sleep) == (1.5, 3)
    assert dist.calls == [("TCPStore", "10.0.0.1", 29501, 2, False, 30.0, False),
                          ("TCPStore", "10.0.0.1", 29501, 2, False, 29.5, False),
                          ("TCPStore", "10.0.0.1", 29501, 2, False, 28.5, False),
                          ("init_process_group", ["backend", "rank", "store", "timeout", "world_size"], 28.5),
                          ("all_reduce", "ones(1)")]
    assert store.keys == {"kimi-k3-fabric/joined/1": "n1"}
    assert out.getvalue() == ("FABRIC_STAGE rendezvous n0 (10.0.0.1:29501)\n"
                              "FABRIC_STAGE join the group (n0 10.0.0.1, n1 10.0.0.2)\n")
    assert (report["phase"], report["peer"]) == ("join", GROUP)


def test_a_join_that_times_out_names_the_node_that_never_came(job, monkeypatch):
    clock = Clock()
    monkeypatch.setattr(job.sys, "stdout", io.StringIO())
    # n0's rank 0 serves the store and waits; n1's rank never reached it
    dist = FakeDist([FakeStore()], init=RuntimeError("Timed out after 29 seconds waiting for clients. "
                                                     "1/2 clients joined."))
    with pytest.raises(job.JoinFailure) as caught:
        job._join(FAKE_TORCH, dist, dict(SPEC, host="n0", node_rank=0), 0, 1030.0, CPU, {}, clock, clock.sleep)
    assert (caught.value.phase, caught.value.peer, caught.value.attempts) == ("join", "n1 10.0.0.2 (rank 1)", 1)
    assert dist.calls[0] == ("TCPStore", "10.0.0.1", 29501, 2, True, 30.0, False)


def test_a_join_whose_store_is_gone_names_the_group(job, monkeypatch):
    class GoneStore(FakeStore):
        def check(self, keys):
            raise ConnectionResetError(errno.ECONNRESET, "Connection reset by peer")

    monkeypatch.setattr(job.sys, "stdout", io.StringIO())
    clock = Clock()
    dist = FakeDist([GoneStore()], init=RuntimeError("Connection reset by peer"))
    with pytest.raises(job.JoinFailure) as caught:
        job._join(FAKE_TORCH, dist, SPEC, 1, 1030.0, CPU, {}, clock, clock.sleep)
    assert (caught.value.phase, caught.value.peer) == ("join", GROUP)


def test_a_rank_reports_its_phase_peer_and_attempts(job, monkeypatch, capsys):
    fake_dist = FakeDist([ValueError("bad port")])
    fake_torch = types.SimpleNamespace(distributed=fake_dist, device=lambda kind: CPU)
    monkeypatch.setitem(job.sys.modules, "torch", fake_torch)
    monkeypatch.setitem(job.sys.modules, "torch.distributed", fake_dist)
    monkeypatch.setenv("KIMI_FABRIC_SPEC", json.dumps(SPEC))
    assert job.worker_main(0, job.time.time() + 30) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:2] == ["FABRIC_STAGE import", "FABRIC_STAGE rendezvous n0 (10.0.0.1:29501)"]
    report = json.loads(lines[-1][len("FABRIC_RESULT "):])
    assert report["error"].startswith("rendezvous with n0 (10.0.0.1:29501) failed after 1 attempt(s) in ")
    assert report["error"].endswith("s: ValueError: bad port")
    del report["error"]
    assert report == {"local_rank": 0, "rank": 1, "status": "failed", "stage": "rendezvous", "phase": "rendezvous",
                      "peer": PEER, "attempts": 1}


# ----------------------------------------------------------------------------- killed ranks and the merge


def test_a_rank_killed_at_the_deadline_says_where_it_was(job):
    out = b"FABRIC_STAGE import\nFABRIC_STAGE rendezvous n0 (10.0.0.1:29501)\n"
    err = b"rendezvous: attempt 1 with n0 (10.0.0.1:29501): ConnectionRefusedError: refused; again in 0.5s\n"
    assert job.killed_report(out, err, 0) == {
        "local_rank": 0, "status": "timeout", "stage": "killed at the deadline", "phase": "rendezvous",
        "peer": PEER, "stderr": "rendezvous: attempt 1 with n0 (10.0.0.1:29501): ConnectionRefusedError: refused; "
                                "again in 0.5s"}
    assert job.killed_report(b"", b"", 1)["phase"] is None


def test_the_merge_keeps_the_phase_and_peer_of_the_first_failed_rank(job):
    reports = [{"local_rank": 0, "status": "failed", "stage": "rendezvous", "phase": "rendezvous", "peer": PEER,
                "attempts": 7, "error": "rendezvous with n0 (10.0.0.1:29501) failed after 7 attempt(s) in 17.5s: "
                                        "ConnectionRefusedError: [Errno 111] Connection refused"}]
    merged = job._merge_workers(SPEC, reports)
    assert (merged["status"], merged["phase"], merged["peer"]) == ("failed", "rendezvous", PEER)
    assert merged["reason"] == ("local rank 0: rendezvous with n0 (10.0.0.1:29501) failed after 7 attempt(s) in "
                                "17.5s: ConnectionRefusedError: [Errno 111] Connection refused")
    assert merged["ranks"] == [dict(reports[0])]
    killed = job._merge_workers(SPEC, [job.killed_report(b"FABRIC_STAGE join " + GROUP.encode() + b"\n", b"", 0)])
    assert (killed["reason"], killed["phase"], killed["peer"]) == ("local rank 0: killed at the deadline", "join",
                                                                   GROUP)


def test_progress_lines_are_flushed_with_their_prefix(job):
    stream = io.StringIO()
    job.progress("ports: 1 of 2 peer ports answered", stream)
    assert stream.getvalue() == "FABRIC_PROGRESS ports: 1 of 2 peer ports answered\n"
    pairs = [{"to": "n0", "port": 29501, "name": "master", "status": "refused"},
             {"to": "n0", "port": 29550, "name": "dp_rpc", "status": "ok"}]
    assert job.ports_summary(pairs) == "ports: 1 of 2 peer ports answered (n0:29501 master: refused)"
    assert job.ports_summary([]) == "ports: 0 of 0 peer ports answered"
