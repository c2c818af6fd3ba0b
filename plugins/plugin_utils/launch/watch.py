# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Decisions of the group readiness watch (pure functions, no I/O; the vllm_wait action feeds them).

Every node of a group has its own watcher (one vllm_wait task per host, running in parallel on the controller).
Each round a watcher feeds its node's status to a :class:`NodeWatch`, publishes the verdict on a shared board
(``{host: record}``) and reads its peers' records back; :func:`group_verdict` then says whether the whole group
has failed and which node failed first.

Verdicts of one node:

- ``ready``      container running and every health URL answers 200;
- ``exited``     the container stopped (or vanished) after the wait began;
- ``peer_lost``  a health URL that had answered 200 stopped answering (a peer it needs went away);
- ``stalled``    no phase progress (phase or its detail line unchanged) for ``stall_s`` seconds;
- ``timeout``    not ready after ``timeout_s`` (the weight-load budget);
- ``unreachable`` the node's status could not be read ``unreachable_rounds`` rounds in a row;
- ``waiting``    none of the above yet.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

FAILED = ("exited", "peer_lost", "stalled", "timeout", "unreachable")
DONE = ("ready",) + FAILED

REASONS = {
    "exited": "its vLLM container stopped",
    "peer_lost": "a peer it needs stopped answering",
    "stalled": "no start-up progress",
    "timeout": "not ready within the readiness timeout",
    "unreachable": "its status could not be read",
    "group": "another node of the group failed first",
}


class NodeWatch(object):
    """Scripted-timeline friendly state of one node's wait; ``feed`` returns the verdict for that round."""

    def __init__(self, start, timeout_s, stall_s, unreachable_rounds=3):
        self.start = start
        self.timeout_s = float(timeout_s)
        self.stall_s = float(stall_s)
        self.unreachable_rounds = int(unreachable_rounds)
        self.progress_key = None
        self.progress_t = start
        self.up_urls = set()
        self.misses = 0
        self.history = []
        self.detail = ""

    def feed(self, now, status):
        """Verdict after reading ``status`` (a vllm_node_status result, or None when it could not be read)."""
        if status is None:
            self.misses += 1
            if self.misses >= self.unreachable_rounds:
                return self._done("unreachable", "%d status reads in a row failed" % self.misses)
            return "waiting"
        self.misses = 0
        key = (status.get("phase"), status.get("phase_detail"))
        if key != self.progress_key:
            if key[0] != (self.progress_key or (None,))[0]:
                self.history.append({"t_s": round(now - self.start, 1), "phase": key[0], "detail": key[1]})
            self.progress_key, self.progress_t = key, now
        if status.get("healthy"):
            return self._done("ready", "ready after %.0f s" % (now - self.start))
        if not status.get("running"):
            return self._done("exited", "container %s, exit code %s, in phase %s%s" % (
                status.get("status"), status.get("exit_code"), status.get("log_phase") or self.last_phase(),
                (": " + status["phase_detail"]) if status.get("phase_detail") else ""))
        lost = sorted(u for u, code in (status.get("health") or {}).items() if u in self.up_urls and code != 200)
        self.up_urls.update(u for u, code in (status.get("health") or {}).items() if code == 200)
        if lost:
            return self._done("peer_lost", "%s answered 200 earlier and now does not" % ", ".join(lost))
        if now - self.progress_t >= self.stall_s:
            return self._done("stalled", "no progress for %.0f s in phase %s (last line: %s)"
                              % (now - self.progress_t, key[0], key[1] or "-"))
        if now - self.start >= self.timeout_s:
            return self._done("timeout", "not ready after %.0f s (phase %s)" % (now - self.start, key[0]))
        return "waiting"

    def last_phase(self):
        """The last phase seen while the container ran (the log phase before it became ``exited``)."""
        for entry in reversed(self.history):
            if entry["phase"] not in ("exited", "absent"):
                return entry["phase"]
        return (self.progress_key or ("unknown",))[0]

    def _done(self, verdict, detail):
        self.detail = detail
        return verdict


def board_record(host, verdict, now, detail="", phase=None):
    """What one watcher publishes for its peers."""
    return {"host": host, "verdict": verdict, "t": now, "detail": detail, "phase": phase}


def group_verdict(host, board, now, stale_s):
    """``None`` while the group may still come up, else the record of the node that failed first.

    A peer whose record was not refreshed for ``stale_s`` seconds while still waiting counts as unreachable (its
    watcher or its node went away). Ties break on the host name, so every watcher names the same culprit.
    """
    failed = []
    for peer, rec in board.items():
        if rec.get("verdict") in FAILED:
            failed.append(rec)
        elif peer != host and rec.get("verdict") == "waiting" and now - rec.get("t", now) >= stale_s:
            failed.append(board_record(peer, "unreachable", rec.get("t", now),
                                       "its watcher published nothing for %.0f s" % (now - rec.get("t", now)),
                                       rec.get("phase")))
    if not failed:
        return None
    return min(failed, key=lambda r: (r.get("t", now), r["host"]))


def culprit(results):
    """Host whose failure came first among ``{host: vllm_wait result}`` (None when none failed)."""
    firsts = [(r.get("first_failure") or {}) for r in results.values() if not r.get("ready")]
    firsts = [f for f in firsts if f.get("host")]
    if not firsts:
        bad = sorted(h for h, r in results.items() if not r.get("ready"))
        return bad[0] if bad else None
    return min(firsts, key=lambda f: (f.get("t", 0), f["host"]))["host"]


def failure_summary(results, tail=40, log_dir=None):
    """One consolidated failure text from ``{host: vllm_wait result}``: the first failure, its log tail once,
    one state line per node."""
    first = culprit(results)
    if first is None:
        return "every node is ready"
    r = results[first]
    lines = ["The vLLM group failed: %s: %s (%s)." % (first, REASONS.get(r.get("verdict"), "failed"),
                                                      r.get("detail") or r.get("verdict"))]
    lines.append("Node states:")
    for host in sorted(results):
        s = results[host]
        why = s.get("verdict") or "unknown"
        if why == "group":
            why = "stopped waiting: %s failed first" % first
        lines.append("  %s: container %s (exit code %s), phase %s - %s" % (
            host, s.get("status"), s.get("exit_code"), s.get("phase"), why))
    log = (r.get("log_tail") or [])[-tail:] if tail > 0 else []
    if log:
        lines.append("Last %d log lines of %s:" % (len(log), first))
        lines += ["    " + line for line in log]
    if log_dir:
        lines.append("Every node's log tail: %s/launch-<host>.log" % log_dir)
    return "\n".join(lines)
