# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The deployment state record and the decisions taken from it (pure functions; plan_files does the I/O).

The record (``<plan_dir>/state.json``)::

    {"version": 1,
     "deployed": {"plan_id": ..., "image": ..., "at": ...} | null,    # last plan that became ready
     "upgrade": {"from_image", "to_image", "from_plan_id", "to_plan_id", "stage", "started_at"} | null,
     "last_run": {"plan_id", "outcome": "ready" | "failed", "at", "reason"} | null}

``upgrade`` is set by upgrade.yml before it touches a node and cleared only when the new digest passed its smoke
gate or the rollback is serving again, so a record with ``upgrade`` set and no upgrade.yml running means the
upgrade was interrupted.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json

VERSION = 1
STAGES = ("pull", "launch", "smoke", "rollback")


def empty():
    return {"version": VERSION, "deployed": None, "upgrade": None, "last_run": None}


def normalise(record):
    """A record read from disk, with missing keys filled; anything unusable becomes an empty record."""
    out = empty()
    if isinstance(record, dict):
        for key in ("deployed", "upgrade", "last_run"):
            if isinstance(record.get(key), dict):
                out[key] = dict(record[key])
    return out


def plan_id(plans):
    """Cluster plan id: hash of every host's plan hash (``{host: plan}``), 16 hex digits."""
    material = json.dumps(sorted((h, p["container"]["labels"].get("io.gpufleet.kimi_k3.plan_hash", ""))
                                 for h, p in plans.items()))
    return hashlib.sha256(material.encode("utf-8")).hexdigest()[:16]


def mark_ready(record, plan, image, at):
    """Record ``plan`` on ``image`` as deployed at ``at``; a record that already says so is kept as it is (a second
    run that finds the same plan ready changes nothing, its time included)."""
    out = normalise(record)
    deployed, last = out.get("deployed") or {}, out.get("last_run") or {}
    if (deployed.get("plan_id"), deployed.get("image")) == (plan, image) \
            and (last.get("plan_id"), last.get("outcome")) == (plan, "ready"):
        return out
    out["deployed"] = {"plan_id": plan, "image": image, "at": at}
    out["last_run"] = {"plan_id": plan, "outcome": "ready", "at": at, "reason": ""}
    return out


def mark_failed(record, plan, at, reason):
    out = normalise(record)
    out["last_run"] = {"plan_id": plan, "outcome": "failed", "at": at, "reason": reason[:2000]}
    return out


def begin_upgrade(record, from_image, to_image, from_plan, to_plan, at):
    out = normalise(record)
    out["upgrade"] = {"from_image": from_image, "to_image": to_image, "from_plan_id": from_plan,
                      "to_plan_id": to_plan, "stage": "pull", "started_at": at}
    return out


def upgrade_stage(record, stage):
    if stage not in STAGES:
        raise ValueError("unknown upgrade stage %r (one of %s)" % (stage, ", ".join(STAGES)))
    out = normalise(record)
    if out["upgrade"] is not None:
        out["upgrade"]["stage"] = stage
    return out


def end_upgrade(record):
    out = normalise(record)
    out["upgrade"] = None
    return out


def interrupted(record):
    """Text describing an interrupted upgrade, or None."""
    up = normalise(record)["upgrade"]
    if not up:
        return None
    return ("An upgrade from %s to %s (started %s) was interrupted at the %s stage."
            % (up.get("from_image"), up.get("to_image"), up.get("started_at"), up.get("stage")))


def changed_fields(old, new):
    """Plan fields that differ between two node plans, as dotted names (values never shown: env may be secret)."""
    out = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict) and key in ("env", "container"):
            out += ["%s.%s" % (key, k) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)
                    and not k == "labels"]
        elif key == "vllm_args" and isinstance(a, list) and isinstance(b, list):
            flags = sorted(set(x for x in a if x.startswith("--")) ^ set(x for x in b if x.startswith("--")))
            out.append("vllm_args (%s)" % (", ".join(flags) if flags else "values"))
        else:
            out.append(key)
    return out


def restart_reasons(new_plans, statuses, changed_hosts, kept=None):
    """Why a group restarts: one line per node whose container is not running or whose plan changed.

    ``statuses``: ``{host: vllm_node_status}`` read before the restart; ``changed_hosts``: hosts whose container
    differs from the plan; ``kept``: kept node plans by host and plan hash (``{host: {plan_hash: plan}}``), to find
    the plan a running container was started from by its plan-hash label.
    """
    kept = kept or {}
    old_plans = dict((h, kept[h][s.get("plan_hash")]) for h, s in statuses.items()
                     if s.get("plan_hash") in kept.get(h, {}))
    lines = []
    for host in sorted(new_plans):
        s = statuses.get(host) or {}
        if not s.get("exists"):
            lines.append("%s: no vLLM container" % host)
        elif not s.get("running"):
            lines.append("%s: container %s (exit code %s)" % (host, s.get("status"), s.get("exit_code")))
        elif host in changed_hosts:
            fields = changed_fields(old_plans[host], new_plans[host]) if host in old_plans else []
            want = new_plans[host]["container"]["labels"].get("io.gpufleet.kimi_k3.plan_hash")
            if fields:
                lines.append("%s: plan changed: %s" % (host, ", ".join(fields)))
            elif host in old_plans and s.get("plan_hash") == want:
                lines.append("%s: secret files changed, or the container differs from its plan" % host)
            elif s.get("plan_hash") != want:
                lines.append("%s: plan hash %s -> %s" % (host, s.get("plan_hash"), want))
            else:
                lines.append("%s: container differs from the plan" % host)
    return lines


def node_report(host, plan, status, kept=None):
    """One node's status line and drift from the inventory's plan (``plan``) for playbooks/status.yml."""
    want = plan["container"]["labels"].get("io.gpufleet.kimi_k3.plan_hash")
    have = status.get("plan_hash")
    drift = []
    if not status.get("exists"):
        drift.append("no vLLM container")
    elif have != want:
        old = (kept or {}).get(host, {}).get(have)
        fields = changed_fields(old, plan) if old else []
        drift.append("runs plan %s, the inventory plans %s%s" % (have, want,
                                                                 (" (" + ", ".join(fields) + ")") if fields else ""))
    elif status.get("image") != plan.get("image"):
        drift.append("image %s, the inventory plans %s" % (status.get("image"), plan.get("image")))
    health = "healthy" if status.get("healthy") else "not healthy"
    digests = status.get("repo_digests") or []
    return {"host": host, "container": status.get("status"), "image": status.get("image"),
            "digest": digests[0].split("@", 1)[-1] if digests else None, "plan_hash": have, "health": health,
            "drift": drift,
            "line": "%s: container %s, image %s, plan %s, %s, %s" % (
                host, status.get("status"), status.get("image"), have, health,
                ("DRIFT: " + "; ".join(drift)) if drift else "matches the inventory")}


def cluster_report(plans, statuses, kept, record):
    """Lines for every node plus the state record's summary (deployed plan, interrupted upgrade)."""
    rows = [node_report(h, plans[h], statuses.get(h) or {}, kept) for h in sorted(plans)]
    rec = normalise(record)
    dep = rec["deployed"] or {}
    if dep:
        lines = ["deployed (state record): plan %s, image %s, at %s"
                 % (dep.get("plan_id"), dep.get("image"), dep.get("at"))]
    else:
        lines = ["deployed (state record): none recorded"]
    if interrupted(rec):
        lines.append(interrupted(rec) + " The next deploy.yml or upgrade.yml rolls it back.")
    digests = set(r["image"] for r in rows if r["container"] == "running")
    if len(digests) > 1:
        lines.append("MIXED: the nodes run %d different images" % len(digests))
    lines += [r["line"] for r in rows]
    return {"nodes": rows, "lines": lines, "drift": any(r["drift"] for r in rows) or len(digests) > 1,
            "healthy": all(r["health"] == "healthy" for r in rows), "unhealthy": unhealthy(rows)}


def unhealthy(rows):
    """What is wrong with each node that is not healthy, and what to do. A follower's death is invisible from
    outside (vLLM's head keeps /health at 200 until the next request fails), so its container is what counts."""
    out = []
    for r in rows:
        if r["health"] == "healthy":
            continue
        if r["container"] != "running":
            why = "its vLLM container is %s" % (r["container"] or "absent")
        else:
            why = "its container runs but the health check fails"
        out.append("%s: %s; the deployment is degraded (run playbooks/recover.yml, or deploy.yml, to restart it)"
                   % (r["host"], why))
    return out
