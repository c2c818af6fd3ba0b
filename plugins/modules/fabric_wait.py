#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: fabric_wait
short_description: Wait for the fabric job's container to end, printing the job's progress
version_added: 0.1.0
description:
  - Action plugin, used by the fabric role. Runs M(gpufleet.kimi_k3.vllm_node_status) on the node every
    O(interval) seconds and prints each C(FABRIC_PROGRESS) line the job (C(roles/fabric/files/fabric_job.py)) wrote
    to its container log, once, as C([host] elapsed  line); with nothing new for O(progress_every) seconds, a
    still-running line with the last progress. One task, so none of the retry lines of an until loop.
  - Ends when the container no longer runs (whatever its exit code, the job's result file is the verdict) and fails
    when it still runs after O(timeout) seconds, or when its state cannot be read three rounds in a row.
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.kimi_k3.attributes
  - gpufleet.kimi_k3.attributes.action
  - gpufleet.kimi_k3.container_engine
options:
  timeout:
    description: Seconds to wait (the fabric role passes the job's timeout plus its start grace).
    type: float
    required: true
  interval:
    description: Seconds between two looks at the container.
    type: float
    default: 2
  progress_every:
    description: Print a still-running line when the job said nothing new for this many seconds.
    type: float
    default: 15
  tail:
    description: Log lines read per look (the job prints a few progress lines per phase).
    type: int
    default: 40
author:
  - gpufleet maintainers (@gpufleet)
attributes:
  check_mode:
    details: Only reads the container's state and log; the fabric role does not start the job in check mode.
"""

EXAMPLES = r"""
- name: Wait for the fabric job
  gpufleet.kimi_k3.fabric_wait:
    container: vllm-kimi-k3-fabric
    timeout: 120
"""

RETURN = r"""
elapsed_s:
  description: Seconds waited.
  returned: always
  type: float
running:
  description: Whether the container still ran when the wait ended (true only on a timeout).
  returned: always
  type: bool
status:
  description: Engine state of the container at the end (exited, absent, running, ...).
  returned: always
  type: str
exit_code:
  description: Exit code of the job's process.
  returned: always
  type: int
progress:
  description: The job's last progress line (null when it printed none).
  returned: always
  type: str
"""
