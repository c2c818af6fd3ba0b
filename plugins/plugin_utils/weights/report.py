# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The weights report and the cluster's progress line, from each node's staging record (controller side, pure).

Each node's hf_stage action writes its record to ``<artifacts>/weights/<host>.json`` after every round; the
cluster line and ``weights-report.json`` / ``.md`` are made from the records of one run (the role's run id), so
a node of an earlier run never counts.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import files as plan_files

COUNTS = ("bytes_total", "bytes_done", "bytes_from_endpoint", "bytes_from_peers", "files_total", "files_verified",
          "files_rehashed", "bytes_rehashed", "files_transferred")


def node_record(host, run, first, totals, refused, fallbacks, elapsed_s, done, ok, msg=None):
    """One node's record: ``first`` its first round's result, ``totals`` the sums over its rounds."""
    rec = {"node": host, "run": run, "done": bool(done), "ok": bool(ok), "msg": msg, "wall_s": round(elapsed_s, 2),
           "bytes_total": int(first.get("bytes_total") or 0), "files_total": int(first.get("files_total") or 0),
           "refused": list(refused), "peer_fallbacks": list(fallbacks)}
    for key in ("bytes_from_endpoint", "bytes_from_peers", "files_verified", "files_rehashed", "bytes_rehashed",
                "files_transferred"):
        rec[key] = int(totals.get(key) or 0)
    rec["bytes_done"] = min(rec["bytes_total"], int(first.get("bytes_present") or 0) + rec["bytes_from_endpoint"]
                            + rec["bytes_from_peers"] + rec["bytes_rehashed"])
    return rec


def aggregate(records, run):
    """The report: per node (sorted) and in total; records of other runs are left out."""
    nodes = sorted((r for r in records if r.get("run") == run), key=lambda r: r["node"])
    total = dict((k, sum(int(r.get(k) or 0) for r in nodes)) for k in COUNTS)
    total["wall_s"] = max([r.get("wall_s") or 0 for r in nodes] or [0])
    total["refused"] = sum(len(r.get("refused") or []) for r in nodes)
    per_node = max([r["bytes_total"] for r in nodes] or [0])
    # how many copies of the checkpoint the endpoint served: ~1 when the peers did their part, N without them
    total["endpoint_copies"] = round(total["bytes_from_endpoint"] / float(per_node), 3) if per_node else 0.0
    return {"run": run, "nodes": nodes, "total": total, "ok": all(r.get("ok") for r in nodes) and bool(nodes)}


def _gb(n):
    return "%.2f GB" % (n / 1e9)


def _eta(remaining, rate):
    if rate <= 0 or remaining <= 0:
        return "-" if remaining > 0 else "0s"
    s = int(remaining / rate)
    return "%dm%02ds" % (s // 60, s % 60)


def cluster_line(records, run, elapsed_s):
    """One line for the whole cluster: endpoint and peer bytes, verified files, ETA."""
    rep = aggregate(records, run)
    t = rep["total"]
    moved = t["bytes_from_endpoint"] + t["bytes_from_peers"]
    rate = moved / elapsed_s if elapsed_s > 0 else 0.0
    return ("[cluster] %d node(s): %s from the endpoint, %s from peers, %d/%d files verified, %s / %s, ETA %s"
            % (len(rep["nodes"]), _gb(t["bytes_from_endpoint"]), _gb(t["bytes_from_peers"]), t["files_verified"],
               t["files_total"], _gb(t["bytes_done"]), _gb(t["bytes_total"]),
               _eta(t["bytes_total"] - t["bytes_done"], rate)))


def render_markdown(rep):
    t = rep["total"]
    verdict = "every node verified" if rep["ok"] else "**not every node verified**"
    lines = ["# Weights staging report", "", "Run `%s`: %s." % (rep["run"], verdict), "",
             "| node | from endpoint | from peers | files verified by hash | blobs re-read | wall (s) | refused |",
             "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in rep["nodes"]:
        refused = "; ".join("%s (expected %s, got %s, from %s)" % (x["path"], x["expected"], x["actual"], x["source"])
                            for x in r["refused"]) or "-"
        lines.append("| %s | %s | %s | %d / %d | %d | %.1f | %s |" % (
            r["node"], _gb(r["bytes_from_endpoint"]), _gb(r["bytes_from_peers"]), r["files_verified"],
            r["files_total"], r["files_rehashed"], r["wall_s"], refused))
    lines.append("| **total** | %s | %s | %d | %d | %.1f | %d |" % (
        _gb(t["bytes_from_endpoint"]), _gb(t["bytes_from_peers"]), t["files_verified"], t["files_rehashed"],
        t["wall_s"], t["refused"]))
    lines += ["", "The endpoint served %.2f copies of the checkpoint." % t["endpoint_copies"]]
    if rep["nodes"] and not (t["bytes_from_endpoint"] or t["bytes_from_peers"] or t["files_rehashed"] or t["refused"]):
        lines.append("Nothing was transferred and no blob was read again: every file was verified before.")
    lines.append("")
    return "\n".join(lines)


def records_dir(artifacts_dir):
    return os.path.join(artifacts_dir, "weights")


def write_record(artifacts_dir, rec):
    plan_files.write_files(records_dir(artifacts_dir), {"%s.json" % rec["node"]: (
        json.dumps(rec, indent=2, sort_keys=True) + "\n", plan_files.ARTIFACT_FILE_MODE)})


def read_records(artifacts_dir, hosts):
    out = []
    for host in hosts:
        try:
            with open(os.path.join(records_dir(artifacts_dir), "%s.json" % host)) as handle:
                rec = json.load(handle)
        except (IOError, OSError, ValueError):
            continue
        if isinstance(rec, dict) and rec.get("node") == host:
            out.append(rec)
    return out


def write_report(artifacts_dir, hosts, run):
    """weights-report.json and .md over the records of ``run``; the last node to finish writes the complete one."""
    rep = aggregate(read_records(artifacts_dir, hosts), run)
    plan_files.write_files(artifacts_dir, {
        "weights-report.json": (json.dumps(rep, indent=2, sort_keys=True) + "\n", plan_files.ARTIFACT_FILE_MODE),
        "weights-report.md": (render_markdown(rep), plan_files.ARTIFACT_FILE_MODE)})
    return rep
