# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the fabric_wait action prints while the fabric job runs: the job's own ``FABRIC_PROGRESS`` lines read from
its container log, once each, and a still-running line when the job has said nothing new for a while. Pure: the
action feeds it the log tails it read."""
from __future__ import absolute_import, division, print_function

PROGRESS_PREFIX = "FABRIC_PROGRESS "  # roles/fabric/files/fabric_job.py prints these


def progress_lines(log_tail):
    """The job's progress lines in a log tail, without their prefix (docker may put a timestamp before them)."""
    out = []
    for row in log_tail or []:
        at = row.find(PROGRESS_PREFIX)
        if at >= 0:
            out.append(row[at + len(PROGRESS_PREFIX):].strip())
    return out


class Progress(object):
    """The lines to print for each look at the job: new progress lines, else a reminder every ``every`` seconds."""

    def __init__(self, every):
        self.every, self.shown, self.last_print, self.last = every, set(), 0.0, None

    def feed(self, elapsed, log_tail):
        # A line is printed once: the tail of the next look repeats the lines of this one.
        fresh = [row for row in progress_lines(log_tail) if row not in self.shown]
        self.shown.update(fresh)
        if fresh:
            self.last, self.last_print = fresh[-1], elapsed
            return ["%5.0fs  %s" % (elapsed, row) for row in fresh]
        if elapsed - self.last_print >= self.every:
            self.last_print = elapsed
            return ["%5.0fs  still running (last: %s)" % (elapsed, self.last or "the job has not started yet")]
        return []


def outcome(status, elapsed, last):
    """(failed, msg) once the job container is no longer running or ``timeout`` passed."""
    if status.get("running"):
        return True, "the fabric job still runs after %.0fs (its timeout plus the start grace); last progress: %s" % (
            elapsed, last or "none")
    return False, "the fabric job ended after %.0fs (%s, exit code %s); last progress: %s" % (
        elapsed, status.get("status"), status.get("exit_code"), last or "none")
