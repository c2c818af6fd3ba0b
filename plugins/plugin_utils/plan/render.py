# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Output of a cluster plan (pure functions): problem lines, the ``docker run`` script, the summary table,
``plan.md`` and the ``<host>.json`` serialisation. Nothing here decides anything; plugin_utils.plan.topology builds the plan."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import shlex

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import redaction
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import sizing as plan_sizing
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import vllm_flags


API_ACCESS_TEXT = {
    "api_key": "API key required (kimi_k3_api_key)",
    "loopback": "no API key, loopback addresses only",
    "unauthenticated": "NO API KEY on a non-loopback address (kimi_k3_allow_unauthenticated_api: true)",
}


def format_problem(p):
    """One line an operator can act on: host, variable, what is wrong, what to do."""
    var = p["variable"] or "-"
    return "%s: %s: %s Fix: %s" % (p["host"], var, p["message"], p["fix"])


def _container_chunks(c, opt):
    chunks = ["docker run --detach", opt("--name", c["name"]), opt("--network", c["network_mode"]),
              opt("--ipc", c["ipc_mode"])]
    if c.get("ipc_mode") != "host" and c.get("shm_size"):
        chunks.append(opt("--shm-size", c["shm_size"]))
    for ulimit in c["ulimits"]:
        name, soft, hard = ulimit.split(":")
        chunks.append(opt("--ulimit", "%s=%s:%s" % (name, soft, hard)))
    for req in c["device_requests"]:
        if req.get("driver") == "nvidia":
            chunks.append(opt("--gpus", "all" if req.get("count") == -1 else req.get("count")))
    chunks += [opt("--device", d) for d in c["devices"]]
    chunks += [opt("--group-add", g) for g in c["groups"]]
    chunks += [opt("--security-opt", o) for o in c["security_opts"]]
    chunks += [opt("--cap-add", cap) for cap in c["capabilities"]]
    chunks += [opt("--volume", v) for v in c["volumes"]]
    chunks += [opt("--label", "%s=%s" % (k, c["labels"][k])) for k in sorted(c.get("labels", {}))]
    chunks.append(opt("--restart", c["restart_policy"]))
    return chunks


def docker_run_command(plan):
    """The ``docker run`` equivalent of a node plan, shell-quoted; secrets are named, never valued.

    Secret variables are passed as ``--env NAME`` (docker copies the value from the caller's environment).
    """
    q = shlex.quote

    def opt(name, value=None):
        return name if value is None else "%s %s" % (name, q(str(value)))

    chunks = _container_chunks(plan["container"], opt)
    chunks += [opt("--env", "%s=%s" % (k, plan["env"][k])) for k in sorted(plan["env"])]
    chunks += [opt("--env", k) for k in plan.get("secret_env", [])]
    chunks.append(q(plan["image"]))
    positional, units = vllm_flags.split_units(plan["vllm_args"])
    chunks.append(" ".join(q(p) for p in positional))
    chunks += [" ".join([q(name)] + [q(v) for v in values]) for name, values in units]
    lines = ["#!/bin/sh", "# %s (%s, node rank %d): equivalent of the planned container." %
             (plan["host"], plan["role"], plan["node_rank"])]
    if plan.get("secret_env"):
        lines.append("# Secrets are not written here: export %s before running." % " ".join(plan["secret_env"]))
    lines.append(" \\\n  ".join(chunks))
    return "\n".join(lines) + "\n"


def router_run_command(plan):
    """The ``docker run`` equivalent of the router host's plan; the API key is named, never valued."""
    q = shlex.quote
    c = plan["container"]
    chunks = ["docker run --detach", "--name %s" % q(c["name"]), "--network %s" % q(c["network_mode"])]
    chunks += ["--label %s" % q("%s=%s" % (k, c["labels"][k])) for k in sorted(c.get("labels", {}))]
    chunks.append("--restart %s" % q(c["restart_policy"]))
    chunks += ["--volume %s" % q(v) for v in c.get("volumes", [])]
    chunks += ["--env %s" % q("%s=%s" % (k, plan["env"][k])) for k in sorted(plan["env"])]
    chunks += ["--env %s" % q(k) for k in plan.get("secret_env", [])]
    chunks.append(q(plan["image"]))
    _positional, units = vllm_flags.split_units(plan["router"]["argv"][1:])
    chunks.append(q(plan["router"]["argv"][0]))
    chunks += [" ".join([q(name)] + [q(v) for v in values]) for name, values in units]
    lines = ["#!/bin/sh", "# %s (vllm-router, %s mode): equivalent of the planned container." %
             (plan["host"], plan["router"]["mode"])]
    if plan.get("secret_env"):
        lines.append("# Secrets are not written here: export %s before running." % " ".join(plan["secret_env"]))
    lines.append(" \\\n  ".join(chunks))
    return "\n".join(lines) + "\n"


def run_script(plan):
    """The ``<host>.sh`` of any host's plan (vLLM node or router)."""
    return router_run_command(plan) if plan.get("role") == "router" else docker_run_command(plan)


def _deployment_lines(c):
    if len(c.get("deployments", [])) < 2:
        return []
    lines = ["%s: %d deployments%s" % (c["mode"], len(c["deployments"]),
                                       (", router %s" % c["router"]["api_url"]) if c.get("router") else "")]
    for d in c["deployments"]:
        lines.append("  %s (%s): %s on %d nodes, TP %d x PP %d x DP %d, head %s"
                     % (d["name"], d["kind"], d["strategy"], d["nnodes"], d["tensor_parallel_size"],
                        d["pipeline_parallel_size"], d["data_parallel_size"], d["head"]))
    return lines


def _host_row(p):
    if p["role"] == "router":
        return (p["host"], "-", "router", p["internal_address"], p["api_url"], str(len(p["router"]["argv"]) - 1))
    return (p["host"], str(p["node_rank"]), p["role"], p["internal_address"], p["api_url"] or "headless",
            str(len(p["vllm_args"]) - 1))


def summary_table(result):
    """A short human table of the plan (or of the problems)."""
    if not result["ok"]:
        lines = ["Plan refused: %d problem(s)" % len(result["errors"])]
        lines += ["  - " + format_problem(p) for p in result["errors"]]
        return "\n".join(lines)
    c = result["cluster"]
    lines = _headline(c)
    header = ("host", "rank", "role", "address", "http", "args")
    rows = [header] + [_host_row(result["plans"][host]) for host in c["order"]]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for r in rows:
        lines.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(r)).rstrip())
    for d in _sized_deployments(c):
        lines += plan_sizing.capacity_lines(d["name"], d.get("capacity"), d.get("timeouts"))
    for w in result["warnings"]:
        lines.append("warning: " + format_problem(w))
    return "\n".join(lines)


def _headline(c):
    """The plan's first lines: strategy and sizes, image, API access, deployments, auto strategy choices."""
    lines = ["Kimi-K3 plan: %s on %d x %s (%d GPUs), TP %d x PP %d x DP %d%s, vLLM %s"
             % (c["strategy"], c["nnodes"], c["accelerator"], c["total_gpus"], c["tensor_parallel_size"],
                c["pipeline_parallel_size"], c["data_parallel_size"],
                (", LB %s" % c["dp_lb_mode"]) if c["dp_lb_mode"] else "", c["vllm_version"]),
             "image %s" % c["image"], "API access: %s" % API_ACCESS_TEXT.get(c.get("api_access"), "?")]
    lines += _deployment_lines(c)
    for choice in c.get("strategy_choice") or []:
        what = "layout" if choice.get("deployment") is None else "strategy %s" % choice["deployment"]
        lines.append("%s: auto chose %s for %s: %s" % (what, choice["layout"], choice["objective"], choice["reason"]))
    return lines


def _sized_deployments(c):
    """Each deployment's name, capacity and timeouts (a single deployment's are the cluster's)."""
    return c.get("deployments") or [{"name": "main", "capacity": c.get("capacity"), "timeouts": c.get("timeouts")}]


def _md_cell(text):
    """A Markdown table cell: code, with the table's separator escaped (a value may hold '|')."""
    return "`%s`" % str(text).replace("|", "\\|") if text != "" else ""


def _md_table(header, rows):
    lines = ["| %s |" % " | ".join(header), "|" + "---|" * len(header)]
    return lines + ["| %s |" % " | ".join(row) for row in rows]


def _argv_table(argv):
    """``vllm serve`` (or ``vllm-router``) argv as rows of option and value, the positional words first."""
    positional, units = vllm_flags.split_units(argv)
    rows = [["(positional)", _md_cell(" ".join(positional))]] if positional else []
    return rows + [[_md_cell(name), _md_cell(" ".join(values))] for name, values in units]


def _node_section(p):
    if p["role"] == "router":
        title, argv = "%s (vllm-router, %s mode)" % (p["host"], p["router"]["mode"]), p["router"]["argv"]
    else:
        title, argv = "%s (%s, node rank %d)" % (p["host"], p["role"], p["node_rank"]), p["vllm_args"]
    lines = ["### " + title, ""] + _md_table(("option", "value"), _argv_table(argv))
    if p.get("secret_env"):
        lines += ["", "Secrets passed by name only: %s." % ", ".join("`%s`" % k for k in p["secret_env"])]
    return lines + [""]


def plan_markdown(result, secrets=()):
    """``plan.md``: the accepted plan for people - argv per node, capacity prediction, timeouts and warnings as
    tables. ``secrets``: the inventory's secret values (topology.inventory_secrets); the text passes the plan's
    one redaction path, so neither a secret value nor a URL's userinfo reaches the file or a --diff of it."""
    c = result["cluster"]
    lines = ["# Kimi-K3 plan", ""] + ["- %s" % line.strip() for line in _headline(c)] + ["", "## Nodes", ""]
    header = ("host", "rank", "role", "address", "http", "args")
    lines += _md_table(header, [[_md_cell(cell) for cell in _host_row(result["plans"][h])] for h in c["order"]])
    lines += ["", "## Arguments per node", ""]
    for host in c["order"]:
        lines += _node_section(result["plans"][host])
    lines += ["## Capacity", ""]
    for d in _sized_deployments(c):
        cap = plan_sizing.capacity_lines(d["name"], d.get("capacity"))
        lines += (["```"] + cap + ["```"]) if cap else ["%s: no capacity prediction (see docs/capacity.md)" % d["name"]]
        lines.append("")
    lines += ["## Timeouts", ""]
    lines += _md_table(("deployment", "engine ready (s)", "launch ready (s)", "stall (s)", "basis"), [
        [d["name"], str(t["engine_ready_timeout_s"]), str(t["launch_ready_timeout_s"]), str(t["stall_timeout_s"]), t["basis"]]
        for d in _sized_deployments(c) for t in [d.get("timeouts")] if t])
    lines += ["", "## Warnings", ""]
    lines += ["- " + format_problem(w) for w in result["warnings"]] or ["none"]
    return redaction.redact("\n".join(lines) + "\n", secrets)


def plan_hash(plan):
    """Short hash of what the container runs (image, env, secret names, container settings, argv)."""
    container = dict(plan["container"])
    container["labels"] = dict((k, v) for k, v in container.get("labels", {}).items()
                               if not k.endswith(".plan_hash"))
    material = json.dumps([plan["image"], plan["env"], plan["secret_env"], container, plan["vllm_args"]],
                          sort_keys=True)
    return hashlib.sha256(material.encode("utf-8")).hexdigest()[:16]


def plan_json(plan):
    """Serialise one node plan (stable key order) for ``<host>.json``."""
    return json.dumps(plan, indent=2, sort_keys=True) + "\n"
