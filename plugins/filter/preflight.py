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
  - Reads C(ansible_facts['node_probe']), C(preflight_expected) and C(preflight_probe_result) of each host from
    O(_input) through O(hostvars), runs all preflight checks and returns the report (summary, findings,
    drift table, nodes) with rendered C(table), C(markdown) and C(json) texts.
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
"""

EXAMPLES = r"""
- name: Build the report
  ansible.builtin.set_fact:
    preflight_report: "{{ ansible_play_hosts_all | gpufleet.kimi_k3.preflight_report(hostvars, preflight_thresholds) }}"
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
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.templated import to_plain


def _get(mapping, key):
    try:
        return mapping[key]
    except (KeyError, TypeError):
        return None
    except Exception:  # pylint: disable=broad-except  # undefined/templating errors of a missing var
        return None


def preflight_report(hosts, hostvars, thresholds=None, show_pass=True):
    if hosts is None or hostvars is None:
        raise AnsibleFilterError("preflight_report needs the host list and hostvars")
    hosts = [str(h) for h in hosts]
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
        expected[h] = to_plain(_get(hv, "preflight_expected") or {}) if hv is not None else {}
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
