# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Stage a model revision on a node in rounds, printing progress between rounds.

Documentation lives in plugins/modules/hf_stage.py. Each round runs the hf_stage module on the node for up to
round_seconds; the file list of the first round is passed to the next ones, and byte counts are summed.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.weights.hf_stage import progress_line

display = Display()

SUMMED = ("bytes_transferred", "files_transferred", "files_linked")


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("repo", "revision", "cache_dir", "endpoint", "token", "margin_gb", "round_seconds",
                             "timeout", "max_rounds"))

    def _round(self, args, task_vars):
        return self._execute_module(module_name="gpufleet.kimi_k3.hf_stage", module_args=args, task_vars=task_vars)

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        host = task_vars.get("inventory_hostname")
        args = dict(self._task.args)
        max_rounds = int(args.pop("max_rounds", 100000))
        start, first, totals, restarted = time.monotonic(), None, dict((k, 0) for k in SUMMED), []
        for rounds in range(1, max_rounds + 1):
            res = self._round(args, task_vars)
            if res.get("failed"):
                result.update(failed=True, msg="%s: weight staging failed: %s" % (host, res.get("msg")),
                              rounds=rounds, bytes_transferred=totals["bytes_transferred"])
                return result
            first = first or res
            for k in SUMMED:
                totals[k] += int(res.get(k) or 0)
            restarted += [p for p in res.get("restarted") or [] if p not in restarted]
            args["files"] = res.get("files")
            elapsed = time.monotonic() - start
            done_bytes = first["bytes_present"] + totals["bytes_transferred"]
            if res.get("done"):
                break
            rate = totals["bytes_transferred"] / elapsed if elapsed > 0 else 0.0
            display.display("[%s] %s" % (host, progress_line(done_bytes, first["bytes_total"], rate, res.get("current"))))
        else:
            result.update(failed=True, rounds=max_rounds,
                          msg="%s: weight staging not finished after %d rounds; the partial files stay and the next "
                              "run resumes" % (host, max_rounds))
            return result
        return self._summary(result, host, first, res, totals, restarted, rounds, time.monotonic() - start)

    def _summary(self, result, host, first, last, totals, restarted, rounds, elapsed):
        verified = last.get("verified")
        result.update(dict((k, first.get(k)) for k in ("repo", "revision", "snapshot_dir", "files_total",
                                                       "bytes_total", "files_present", "bytes_present",
                                                       "bytes_needed", "free_bytes")))
        result.update(totals, restarted=restarted, verified=verified, rounds=rounds, elapsed_s=round(elapsed, 2),
                      changed=bool(totals["bytes_transferred"] or totals["files_transferred"]
                                   or totals["files_linked"] or (self._task.check_mode and last.get("changed"))))
        rate = totals["bytes_transferred"] / elapsed if elapsed > 0 else 0.0
        if self._task.check_mode:
            result["msg"] = "%s: %s: %d of %d files present; a real run would transfer %.2f GB" % (
                host, first.get("revision"), first.get("files_present"), first.get("files_total"),
                first.get("bytes_needed", 0) / 1e9)
        elif verified and not verified.get("ok"):
            result.update(failed=True, msg="%s: staged %s but the snapshot does not match the file list: %s" % (
                host, first.get("revision"), "; ".join(verified.get("problems") or [])))
        elif totals["bytes_transferred"] == 0 and not totals["files_linked"]:
            result["msg"] = "%s: %s already staged (%d files, %.2f GB verified): nothing transferred" % (
                host, first.get("revision"), first.get("files_total"), first.get("bytes_total", 0) / 1e9)
        else:
            result["msg"] = "%s: staged %s: %d files, %.2f GB transferred in %.1f s (%.1f MB/s), verified" % (
                host, first.get("revision"), totals["files_transferred"], totals["bytes_transferred"] / 1e9,
                elapsed, rate / 1e6)
        return result
