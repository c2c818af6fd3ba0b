# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Stage a model revision on a node in rounds, printing progress between rounds.

Documentation lives in plugins/modules/hf_stage.py. Each round runs the hf_stage module on the node for up to
round_seconds; the file list of the first round is passed to the next ones, and byte counts are summed. With
``artifacts_dir``, the node's record goes to ``<artifacts>/weights/<host>.json`` after every round; the first node
of ``cluster`` prints the cluster's line from the records, and every node rewrites ``weights-report.{json,md}``
when it ends (the last one to end writes the complete report). Report logic: plugin_utils/weights/report.py.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.weights.hf_stage import progress_line
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.weights import report as weights_report

display = Display()

SUMMED = ("bytes_transferred", "files_transferred", "files_linked", "bytes_from_endpoint", "bytes_from_peers",
          "files_from_endpoint", "files_from_peers", "files_verified", "files_rehashed", "bytes_rehashed")
ACTION_ONLY = ("max_rounds", "artifacts_dir", "cluster", "peer_port")


def peers_of(cluster, plans, port):
    """[{name, address, port}] of the nodes staging together, from their plans' internal addresses (the address the
    nodes use between them); none without a port or with fewer than two planned nodes."""
    peers = [{"name": h, "address": (plans.get(h) or {}).get("internal_address"), "port": int(port)}
             for h in cluster] if port else []
    peers = [p for p in peers if p["address"]]
    return peers if len(peers) > 1 else None


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("repo", "revision", "cache_dir", "endpoint", "token", "margin_gb", "round_seconds",
                             "timeout", "max_rounds", "verify", "run", "node", "peers", "concurrency", "peer_wait_s",
                             "artifacts_dir", "cluster", "peer_port"))

    def _round(self, args, task_vars):
        return self._execute_module(module_name="gpufleet.kimi_k3.hf_stage", module_args=args, task_vars=task_vars)

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        host = task_vars.get("inventory_hostname")
        args = dict(self._task.args)
        max_rounds = int(args.get("max_rounds") or 100000)
        artifacts, cluster = args.get("artifacts_dir"), [str(h) for h in args.get("cluster") or [host]]
        plans = (task_vars.get("plan_result") or {}).get("plans") or {}
        peers = peers_of(cluster, plans, args.get("peer_port"))
        for key in ACTION_ONLY:
            args.pop(key, None)
        if peers:
            args["peers"] = peers
        args.setdefault("node", host)
        start, first, totals, refused, fallbacks, restarted = time.monotonic(), None, dict((k, 0) for k in SUMMED), [], [], []
        ctx = {"host": host, "artifacts": artifacts, "cluster": cluster, "run": args.get("run"), "start": start}
        res, rounds = {}, 0
        for rounds in range(1, max_rounds + 1):
            args["elapsed_s"] = round(time.monotonic() - start, 3)
            res = self._round(args, task_vars)
            if res.get("failed"):
                msg = "%s: weight staging failed: %s" % (host, res.get("msg"))
                self._record(ctx, first or {}, totals, refused, fallbacks, False, msg)
                result.update(failed=True, msg=msg, rounds=rounds, bytes_transferred=totals["bytes_transferred"],
                              refused=refused)
                return result
            first = first or res
            for k in SUMMED:
                totals[k] += int(res.get(k) or 0)
            restarted += [p for p in res.get("restarted") or [] if p not in restarted]
            fallbacks += [p for p in res.get("peer_fallbacks") or [] if p not in fallbacks]
            refused += res.get("refused") or []
            args["files"] = res.get("files")
            args["peer_seen"] = res.get("peer_seen")
            if res.get("done"):
                break
            self._record(ctx, first, totals, refused, fallbacks, False)
            elapsed = time.monotonic() - start
            # blobs read again count as done: with weights_verify=full that is the whole pass's progress
            done_bytes = first["bytes_present"] + totals["bytes_transferred"] + totals["bytes_rehashed"]
            rate = totals["bytes_transferred"] / elapsed if elapsed > 0 else 0.0
            display.display("[%s] %s" % (host, progress_line(done_bytes, first["bytes_total"], rate, res.get("current"))))
            self._cluster_line(ctx)
        else:
            msg = ("%s: weight staging not finished after %d rounds; the partial files stay and the next run resumes"
                   % (host, max_rounds))
            self._record(ctx, first or {}, totals, refused, fallbacks, False, msg)
            result.update(failed=True, rounds=max_rounds, msg=msg)
            return result
        return self._summary(result, ctx, first, res, totals, restarted, refused, fallbacks, rounds)

    def _record(self, ctx, first, totals, refused, fallbacks, ok, msg=None, done=False):
        """Write this node's record (and, when it ended, the report); no artifacts directory: nothing."""
        if not ctx["artifacts"] or self._task.check_mode:
            return None
        rec = weights_report.node_record(ctx["host"], ctx["run"], first, totals, refused, fallbacks,
                                         time.monotonic() - ctx["start"], done, ok, msg)
        weights_report.write_record(ctx["artifacts"], rec)
        if done or msg:
            return weights_report.write_report(ctx["artifacts"], ctx["cluster"], ctx["run"])
        return None

    def _cluster_line(self, ctx):
        if ctx["artifacts"] and not self._task.check_mode and ctx["host"] == ctx["cluster"][0] and len(ctx["cluster"]) > 1:
            records = weights_report.read_records(ctx["artifacts"], ctx["cluster"])
            display.display(weights_report.cluster_line(records, ctx["run"], time.monotonic() - ctx["start"]))

    def _summary(self, result, ctx, first, last, totals, restarted, refused, fallbacks, rounds):
        host, elapsed = ctx["host"], time.monotonic() - ctx["start"]
        verified = last.get("verified")
        result.update(dict((k, first.get(k)) for k in ("repo", "revision", "snapshot_dir", "files_total",
                                                       "bytes_total", "files_present", "bytes_present",
                                                       "bytes_needed", "free_bytes", "files_to_rehash",
                                                       "bytes_to_rehash")))
        result.update(totals, restarted=restarted, refused=refused, peer_fallbacks=fallbacks, verified=verified,
                      rounds=rounds, elapsed_s=round(elapsed, 2),
                      changed=bool(totals["bytes_transferred"] or totals["files_transferred"]
                                   or totals["files_linked"] or refused
                                   or (self._task.check_mode and last.get("changed"))))
        rate = totals["bytes_transferred"] / elapsed if elapsed > 0 else 0.0
        ok = True
        if self._task.check_mode:
            result["msg"] = "%s: %s: %d of %d files present and verified; a real run would transfer %.2f GB" % (
                host, first.get("revision"), first.get("files_present"), first.get("files_total"),
                first.get("bytes_needed", 0) / 1e9)
            if first.get("files_to_rehash"):
                result["msg"] += " and read %d changed blob(s) again (%.2f GB)" % (
                    first["files_to_rehash"], first.get("bytes_to_rehash", 0) / 1e9)
        elif verified and not verified.get("ok"):
            ok = False
            why = [r["msg"] for r in refused] or verified.get("problems") or []
            result.update(failed=True, msg="%s: staged %s but the snapshot does not match the file list: %s" % (
                host, first.get("revision"), "; ".join(why)))
        elif totals["bytes_transferred"] == 0 and not totals["files_linked"] and not refused:
            result["msg"] = ("%s: %s already staged (%d files, %.2f GB verified): nothing transferred, %s" % (
                host, first.get("revision"), first.get("files_total"), first.get("bytes_total", 0) / 1e9,
                "%d blob(s) read again" % totals["files_rehashed"] if totals["files_rehashed"] else "nothing re-read"))
        else:
            result["msg"] = ("%s: staged %s: %d files, %.2f GB transferred (%.2f GB from the endpoint, %.2f GB from "
                             "peers) in %.1f s (%.1f MB/s), %d verified by content hash" % (
                                 host, first.get("revision"), totals["files_transferred"],
                                 totals["bytes_transferred"] / 1e9, totals["bytes_from_endpoint"] / 1e9,
                                 totals["bytes_from_peers"] / 1e9, elapsed, rate / 1e6, totals["files_verified"]))
            if refused:
                result["msg"] += "; refused and fetched again: " + "; ".join(r["msg"] for r in refused)
        report = self._record(ctx, first, totals, refused, fallbacks, ok, None if ok else result["msg"], done=True)
        if report is not None and ctx["host"] == ctx["cluster"][0]:
            display.display(weights_report.cluster_line(report["nodes"], ctx["run"], elapsed))
        return result
