# -*- coding: utf-8 -*-
# Copyright: gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the preflight role (thin wrappers around plugin_utils.preflight.expect).

Documentation: preflight_ports.yml, preflight_interfaces.yml and preflight_probe_args.yml beside this file.
The cluster-wide judgement is the preflight_report action.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.preflight import expect as preflight_expect
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.actions.templated import to_plain


def preflight_ports(plan):
    try:
        return preflight_expect.probe_ports(to_plain(plan))
    except (KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError("preflight_ports needs a host plan with api_host, api_port, master_port, "
                                 "dp_rpc_port and internal_address (%s)" % exc)


def preflight_interfaces(plan):
    return preflight_expect.socket_ifnames(to_plain(plan or {}))


def probe_args(plan):
    """node_probe's plan-derived arguments for one host plan (model_revision None when unset: omitted)."""
    return {"docker_host": plan["docker_host"], "docker_client": plan.get("docker_client") or {},
            "model_cache_dir": plan["model_cache_dir"], "model": plan["model"],
            "model_revision": plan.get("model_revision") or None, "ports": preflight_ports(plan),
            "interfaces": preflight_interfaces(plan), "deployment_container": (plan.get("container") or {})["name"],
            "all_interfaces": bool(preflight_expect.exposed_listeners(to_plain(plan)))}


def preflight_probe_args(plan_result, hosts):
    """{host: node_probe's plan-derived arguments} for every host, computed once on the controller: what the probe
    task read from the plan (ports, interfaces as preflight_ports / preflight_interfaces) without templating a filter
    per host (a filter in a per-host task loads the filter plugins again in every worker process)."""
    plans = (plan_result or {}).get("plans") or {}
    out = {}
    for host in hosts:
        host = str(host)
        if host not in plans:
            raise AnsibleFilterError("preflight_probe_args: the plan has no entry for %s" % host)
        try:
            out[host] = probe_args(to_plain(plans[host]))
        except (AnsibleFilterError, KeyError, TypeError) as exc:
            raise AnsibleFilterError("preflight_probe_args: %s: %s" % (host, exc))
    return out


class FilterModule(object):
    def filters(self):
        return {"preflight_ports": preflight_ports, "preflight_interfaces": preflight_interfaces,
                "preflight_probe_args": preflight_probe_args}
