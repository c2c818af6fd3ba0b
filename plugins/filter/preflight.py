# -*- coding: utf-8 -*-
# Copyright: gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the preflight role: thin wrappers over module_utils.preflight_checks / preflight_report."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: preflight_report
short_description: Judge every node's probe facts and build the preflight report
version_added: "0.1.0"
description:
  - Reads C(preflight_probe_result) (or C(ansible_facts['node_probe'])) and C(group_names) of each host from
    O(_input) through O(hostvars), runs all preflight checks and returns the report (summary, findings,
    drift table, nodes) with rendered C(table), C(markdown) and C(json) texts.
  - What the inventory expects is given once for the whole cluster (O(expected)); each host adds its role (head
    when in group C(vllm_head)) and its cluster-internal address (the address its probe checked the C(master)
    port on, else C(kimi_k3_internal_address) / C(ansible_host) / the host name). Nothing per host has to be
    recorded by a task of its own, which keeps the controller's work per node small.
author:
  - gpufleet maintainers
options:
  _input:
    description: Hosts to report on (normally C(ansible_play_hosts_all)).
    type: list
    elements: str
    required: true
  hostvars:
    description: The C(hostvars) magic variable.
    type: raw
    required: true
  thresholds:
    description: Threshold overrides (see C(preflight_checks.DEFAULT_THRESHOLDS) and the role defaults).
    type: dict
    default: {}
  show_pass:
    description: Include passing checks in the rendered C(table) (the JSON and Markdown always have all).
    type: bool
    default: true
  expected:
    description:
      - Cluster-wide expectations - accelerator, gpus_per_node, interconnect, nnodes, api_port, master_port,
        dp_rpc_port, model_cache_dir, memlock, shm_size (the plan requires these to agree on every node).
      - A host's own C(preflight_expected) variable, when set, is merged over it.
    type: dict
    default: {}
"""

EXAMPLES = r"""
- name: Build the report
  ansible.builtin.set_fact:
    preflight_report: >-
      {{ ansible_play_hosts_all | gpufleet.kimi_k3.preflight_report(hostvars, preflight_thresholds, true,
         preflight_cluster_expected) }}
"""

RETURN = r"""
_value:
  description:
    - C(ok) (no failing check), C(report) (schema, summary with ok/fail/warn/pass/failed_hosts/failed_checks,
      findings with host/check/status/observed/expected/fix, drift, nodes, thresholds), and the rendered
      C(table), C(markdown), C(json) texts and C(failure_message).
  type: dict
"""

import json

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils import preflight_report as R
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils import topology
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.templated import to_plain


def _get(mapping, key):
    try:
        return mapping[key]
    except (KeyError, TypeError):
        return None
    except Exception:  # pylint: disable=broad-except  # undefined/templating errors of a missing var
        return None


def _probed_address(facts):
    """The address the node's probe checked its ``master`` port on (the role passes the internal address)."""
    for p in (facts or {}).get("ports") or []:
        if p.get("name") == "master" and p.get("address"):
            return p["address"]
    return None


def _host_expected(host, hv, facts, common):
    """``common`` plus this host's groups and internal address (``_get`` answers None for a missing ``hv``)."""
    exp = dict(common)
    exp["groups"] = list(_get(hv, "group_names") or [])
    inventory = dict((k, _get(hv, k)) for k in (topology.PREFIX + "internal_address", "ansible_host"))
    exp["internal_address"] = _probed_address(facts) or topology.internal_address(host, inventory)
    own = _get(hv, "preflight_expected")
    if own:
        exp.update(to_plain(own))
    return exp


def preflight_report(hosts, hostvars, thresholds=None, show_pass=True, expected=None):
    if hosts is None or hostvars is None:
        raise AnsibleFilterError("preflight_report needs the host list and hostvars")
    hosts = [str(h) for h in hosts]
    common = to_plain(expected or {})
    probes, expected, failures = {}, {}, {}
    for h in hosts:
        hv = _get(hostvars, h)
        # The registered result is read first: it is strictly per host. (With ansible-core 2.21, after a
        # run_once + delegate_to task in an earlier play, hostvars[h].ansible_facts was seen to return another
        # host's module facts.)
        res = _get(hv, "preflight_probe_result") if hv is not None else None
        facts = _get(_get(res, "ansible_facts") or {}, "node_probe") if res is not None else None
        if not facts and hv is not None:
            facts = _get(_get(hv, "ansible_facts") or {}, "node_probe")
        probes[h] = to_plain(facts) if facts else None
        expected[h] = _host_expected(h, hv, probes[h], common)
        if res is not None and not facts:
            res = to_plain(res)
            failures[h] = (res.get("msg") or ("unreachable" if res.get("unreachable") else "probe failed"))[:500]
    report = R.build_report(hosts, probes, expected, to_plain(thresholds or {}), failures)
    return {
        "ok": report["summary"]["ok"],
        "report": report,
        "table": R.render_table(report, include_pass=bool(show_pass)),
        "markdown": R.render_markdown(report),
        "json": json.dumps(report, indent=2, sort_keys=True) + "\n",
        "failure_message": R.failure_message(report),
    }


class FilterModule(object):
    def filters(self):
        return {
            "preflight_report": preflight_report,
        }
