# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters used by the launch role (thin wrappers around module_utils)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
name: env_file
short_description: Render C(NAME=value) lines for a Docker env file from selected keys of a mapping
version_added: 0.1.0
description:
  - Keeps only O(names) from the input mapping, drops empty values, and renders one C(NAME=value) line per key,
    sorted. Used to pass secrets to the container through a mode-0600 env file instead of argv or plan files.
options:
  _input:
    description: Mapping of variable name to value.
    type: dict
    required: true
  names:
    description: Keys to keep.
    type: list
    elements: str
    required: true
author:
  - gpufleet maintainers
"""

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
