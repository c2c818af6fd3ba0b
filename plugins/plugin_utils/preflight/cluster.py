# -*- coding: utf-8 -*-
# Copyright: gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cluster-wide preflight judgement (pure): every host's checks, the checks across nodes, the summary.

Cross-node checks honour the per-host dependencies too: a host whose ``fabric`` check failed is ``skip`` in
``nvlink_domain``; a value a host could not measure (its ``gpu_tools`` failed) is left out of the drift table.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.preflight import checks as C
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.probe import parsers as P
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.preflight.fixes import FIX

CLUSTER = C.CLUSTER


def _attr(facts, name):
    if name == "engine_version":
        return (facts.get("engine") or {}).get("version")
    return facts.get(name)


def _drift_value(facts, attr):
    """A host's comparable value of ``attr`` (None: unknown, or not this vendor's attribute)."""
    v = _attr(facts, attr)
    if v is None or v == "unknown" or (attr == "gpu_count" and not v):
        return None
    if (attr == "cuda_version" and facts.get("vendor") != "nvidia") or \
            (attr == "rocm_version" and facts.get("vendor") != "amd"):
        return None
    return v


def drift_table(probes, hosts, states=None):
    """{attr: {value: [hosts]}} over hosts whose prerequisite for that attribute passed."""
    table = {}
    for attr, needs in C.DRIFT_ATTRS:
        values = {}
        for h in hosts:
            facts = probes.get(h)
            if not facts or (states and states.get(h, {}).get(needs) in ("fail", "skip")):
                continue
            v = _drift_value(facts, attr)
            if v is not None:
                values.setdefault(C._s(v), []).append(h)
        if values:
            table[attr] = values
    return table


def drifting_hosts(values, heads=()):
    """Hosts off the reference value: the value of most hosts, the head's on a tie (as for the NVLink domain)."""
    ref = max(sorted(values), key=lambda v: (len(values[v]), any(h in heads for h in values[v])))
    return sorted(h for v, hs in values.items() if v != ref for h in hs)


def check_drift(table, th, heads=()):
    out = []
    for attr, _needs in C.DRIFT_ATTRS:
        values = table.get(attr) or {}
        if len(values) <= 1:
            if values:
                out.append(C.finding(CLUSTER, "drift_" + attr, "pass", "all %s" % next(iter(values)), "identical"))
            continue
        obs = "; ".join("%s: %s" % (v, ", ".join(hs)) for v, hs in sorted(values.items(), key=lambda x: -len(x[1])))
        status = "fail" if attr in (th.get("drift_fatal") or []) else "warn"
        f = C.finding(CLUSTER, "drift_" + attr, status, obs, "identical on every node", FIX["drift"])
        f["hosts"] = drifting_hosts(values, heads)
        out.append(f)
    return out


def _nvlink_hosts(probes, expected, hosts):
    return [h for h in hosts if probes.get(h) and expected.get(h, {}).get("interconnect") == "nvlink"
            and (P.to_int(expected[h].get("nnodes")) or 1) > 1]


def _domain(facts):
    fab = facts.get("fabric") or {}
    return (fab.get("cluster_uuid"), fab.get("clique_id"))


def _reference_domain(probes, expected, nv_hosts):
    """The domain of most nodes with a registered fabric (the head's on a tie)."""
    groups = {}
    for h in nv_hosts:
        groups.setdefault(_domain(probes[h]), []).append(h)

    def rank(item):
        key, hs = item
        return (key[0] not in (None, P.ZERO_UUID), len(hs), any(C.role_of(expected[h]) == "head" for h in hs))

    return sorted(groups.items(), key=rank, reverse=True)[0]


def check_nvlink_domain(probes, expected, hosts, states):
    """Every NVLink node of the deployment in one fabric: same ClusterUUID and CliqueId (needs its ``fabric``)."""
    nv_hosts = _nvlink_hosts(probes, expected, hosts)
    judged = [h for h in nv_hosts if C.blocker_of(("fabric",), states.get(h, {})) is None]
    out = [C.skipped(h, "nvlink_domain", C.blocker_of(("fabric",), states.get(h, {})))
           for h in nv_hosts if h not in judged]
    if not judged:
        return out
    ref_key, ref_hosts = _reference_domain(probes, expected, judged)
    ref_txt = "ClusterUUID %s, CliqueId %s (%s)" % (ref_key[0], ref_key[1], ", ".join(ref_hosts))
    valid = ref_key[0] not in (None, P.ZERO_UUID)
    for h in judged:
        key = _domain(probes[h])
        ok = key == ref_key and valid
        out.append(C.finding(h, "nvlink_domain", "pass" if ok else "fail", "ClusterUUID %s, CliqueId %s" % key,
                             ref_txt, FIX["nvlink_domain"]))
    return out


def check_imex_membership(probes, expected, hosts, states):
    """Warn when a deployment node's internal address is missing from another node's IMEX node list."""
    out = []
    nv_hosts = _nvlink_hosts(probes, expected, hosts)
    addrs = dict((h, expected[h].get("internal_address")) for h in nv_hosts)
    for h in nv_hosts:
        if C.blocker_of(("imex",), states.get(h, {})):
            continue
        listed = set(x.get("address") for x in (probes[h].get("imex") or {}).get("nodes") or [])
        missing = ["%s (%s)" % (o, a) for o, a in sorted(addrs.items()) if a and a not in listed]
        if listed and missing:
            out.append(C.finding(h, "imex_nodes", "warn", "IMEX node list lacks " + ", ".join(missing),
                                 "every deployment node in nodes_config.cfg", FIX["imex_nodes"]))
    return out


_CHECK_ORDER = dict((chk.name, i) for i, chk in enumerate(C.HOST_CHECKS))


def check_socket_mtu(probes, expected, hosts, states):
    """One MTU on the NCCL/Gloo interface of every node whose ``socket_ifname`` check passed."""
    values = {}
    for h in hosts:
        if states.get(h, {}).get("socket_ifname") != "pass":
            continue
        node = C.Node(h, probes.get(h), expected.get(h) or {}, {})
        name, info = C.socket_interface(node)
        values.setdefault(str(info.get("mtu")), []).append("%s" % h)
    if not values:
        return []
    if len(values) == 1:
        return [C.finding(CLUSTER, "socket_mtu", "pass", "all %s" % next(iter(values)), "identical")]
    heads = [h for h in hosts if C.role_of(expected.get(h) or {}) == "head"]
    obs = "; ".join("MTU %s: %s" % (v, ", ".join(hs)) for v, hs in sorted(values.items(), key=lambda x: -len(x[1])))
    f = C.finding(CLUSTER, "socket_mtu", "fail", obs, "one MTU on every node's socket interface", FIX["socket_mtu"])
    f["hosts"] = drifting_hosts(values, heads)
    return [f]


def _sort_key(order):
    """Failures first, then by host, then root causes before what depends on them (registry order)."""
    def key(f):
        return (C.STATUSES.index(f["status"]), order.get(f["host"], -1),
                _CHECK_ORDER.get(f["check"], len(_CHECK_ORDER)), f["check"])
    return key


def run_checks(probes, expected, thresholds=None, hosts=None):
    """Evaluate every check for every host; see preflight_checks' docstring."""
    th = C.merge_thresholds(thresholds)
    hosts = list(hosts or sorted(set(expected) | set(probes)))
    findings, states = [], {}
    for h in hosts:
        found, states[h] = C.check_host(h, probes.get(h), expected.get(h) or {}, th)
        findings.extend(found)
    findings.extend(check_nvlink_domain(probes, expected, hosts, states))
    findings.extend(check_imex_membership(probes, expected, hosts, states))
    findings.extend(check_socket_mtu(probes, expected, hosts, states))
    table = drift_table(probes, hosts, states)
    findings.extend(check_drift(table, th, [h for h in hosts if C.role_of(expected.get(h) or {}) == "head"]))
    order = dict((h, i) for i, h in enumerate([CLUSTER] + hosts))
    findings.sort(key=_sort_key(order))
    return {"findings": findings, "drift": table, "summary": summarize(findings, hosts)}


def charged_hosts(findings):
    """Hosts a failure is charged to: the host of a per-host failure, the drifting hosts of a cluster failure."""
    out = set()
    for f in findings:
        if f["status"] != "fail":
            continue
        if f["host"] == CLUSTER:
            out.update(f.get("hosts") or [])
        else:
            out.add(f["host"])
    return sorted(out)


def summarize(findings, hosts):
    counts = dict((s, sum(1 for f in findings if f["status"] == s)) for s in C.STATUSES)
    return {"hosts": len(hosts), "ok": counts["fail"] == 0, "fail": counts["fail"], "warn": counts["warn"],
            "skip": counts["skip"], "pass": counts["pass"], "failed_hosts": charged_hosts(findings),
            "failed_checks": sorted(set("%s:%s" % (f["host"], f["check"]) for f in findings
                                        if f["status"] == "fail"))}
