# -*- coding: utf-8 -*-
# Copyright: gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the preflight role (thin wrappers around module_utils.preflight_expect).

Documentation: preflight_ports.yml and preflight_interfaces.yml beside this file. The cluster-wide judgement is the preflight_report action.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils import preflight_expect
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.templated import to_plain


def preflight_ports(plan):
    try:
        return preflight_expect.probe_ports(to_plain(plan))
    except (KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError("preflight_ports needs a host plan with api_host, api_port, master_port, "
                                 "dp_rpc_port and internal_address (%s)" % exc)


def preflight_interfaces(plan):
    return preflight_expect.socket_ifnames(to_plain(plan or {}))


class FilterModule(object):
    def filters(self):
        return {"preflight_ports": preflight_ports, "preflight_interfaces": preflight_interfaces}
