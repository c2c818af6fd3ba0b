# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where a node is reached and where its API binds (pure functions over a node of the plan).

A node is ``{"host", "vars", "settings", "rank"}`` as plugin_utils.plan.resolve orders it; the renderer, the TLS
and transport checks and preflight read addresses through these functions only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import variables as plan_variables
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan.variables import PREFIX

LOOPBACK_NAMES = ("localhost", "ip6-localhost", "ip6-loopback")


def internal_address(host, host_vars):
    """A node's cluster-internal address: kimi_k3_internal_address, else ansible_host, else the inventory name."""
    return host_vars.get(PREFIX + "internal_address") or host_vars.get("ansible_host") or host


def node_address(node):
    """internal_address() of a node whose variables the table checked."""
    checked = node.get("settings", {}).get("internal_address")
    return checked or node["vars"].get("ansible_host") or node["host"]


def api_host(node):
    """Where the node's API binds (kimi_k3_api_host, default all addresses)."""
    return node.get("settings", {}).get("api_host") or "0.0.0.0"


def is_loopback(address):
    """True for 127.0.0.0/8, ::1 and the loopback host names."""
    text = str(address).lower()
    return text in LOOPBACK_NAMES or text == "::1" or re.match(r"^127\.\d+\.\d+\.\d+\Z", text) is not None


def serves_http(ctx, node):
    """Whether ``node`` runs an API server (head always; followers in hybrid/external DP)."""
    if node["rank"] == 0:
        return True
    return ctx["launch"] == "dp" and ctx["lb_mode"] in ("hybrid", "external")


def fallback_refusal(node):
    """``(message, fix)`` when ansible_host stands in for an unset kimi_k3_internal_address but is no address,
    else None (the node's address then falls back to its inventory name)."""
    if node["settings"].get("internal_address") or node["vars"].get("ansible_host") is None:
        return None
    decl = plan_variables.declared(PREFIX + "internal_address")
    _checked, refusal = plan_variables.check_value(decl, node["vars"]["ansible_host"], {}, {})
    return refusal
