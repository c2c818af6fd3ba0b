# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters used by the launch role (thin wrappers around module_utils)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Documentation: env_file.yml and launch_failure_report.yml beside this file (one page per filter).

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils import launch_status


def env_file(values, names):
    if not isinstance(values, dict):
        raise AnsibleFilterError("env_file expects a mapping")
    lines = []
    for name in sorted(set(names)):
        value = values.get(name)
        if value in (None, ""):
            continue
        value = str(value)
        if "\n" in value:
            raise AnsibleFilterError("env_file: the value of %s spans several lines" % name)
        lines.append("%s=%s" % (name, value))
    return "\n".join(lines) + ("\n" if lines else "")


def launch_failure_report(statuses, tail=40):
    """Failure text from ``{host: vllm_node_status result}``: which nodes are up and every node's log tail."""
    return launch_status.failure_report(dict(statuses), tail=int(tail))


class FilterModule(object):
    def filters(self):
        return {"env_file": env_file, "launch_failure_report": launch_failure_report}
