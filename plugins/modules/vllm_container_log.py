#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: vllm_container_log
short_description: Read a container's log (stdout and stderr) from the node's container engine
version_added: 0.1.0
description:
  - Reads C(GET /containers/<container>/logs) through community.docker's client (unix socket, C(tcp://) with or
    without TLS, C(ssh://)) and returns the log as text, the Docker stream demultiplexed. Changes nothing.
  - The smoke and capacity roles read the vLLM container's log with it on every node. A log that cannot be read
    fails the module with RV(rc) saying why (2 the engine answered an error, 3 no such container, 4 the engine
    cannot be reached, 64 bad options) and the reason in RV(stderr); the roles register the result with
    C(failed_when=false) and report such a log as not read, never as a clean one.
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.kimi_k3.attributes.read_only
  - gpufleet.kimi_k3.container_engine
options:
  since:
    description: Only lines logged at or after this time (seconds since the epoch); C(0) from the start.
    type: int
    default: 0
  tail:
    description: The last this many lines, or C(all).
    type: str
    default: all
author:
  - gpufleet maintainers (@gpufleet)
"""

EXAMPLES = r"""
- name: Read the vLLM container's log since the smoke window began
  gpufleet.kimi_k3.vllm_container_log:
    container: vllm-kimi-k3
    docker_host: ssh://root@10.0.0.11
    since: "{{ smoke_window_start }}"
  register: vllm_log
  failed_when: false
"""

RETURN = r"""
rc:
  description: 0 when the log was read; 2 the engine answered an error, 3 no such container, 4 the engine cannot be
    reached, 64 bad options.
  returned: always
  type: int
  sample: 0
stdout:
  description: The log (stdout and stderr of the container, in order); empty when it could not be read.
  returned: always
  type: str
stderr:
  description: Why the log could not be read (empty when it was).
  returned: always
  type: str
  sample: "no such container: vllm-kimi-k3"
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.engine import api as engine_api
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.engine import launch_status


def main():
    module = AnsibleModule(
        argument_spec=dict(
            engine_api.container_spec(),
            since=dict(type="int", default=0),
            tail=dict(type="str", default="all"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    problem = engine_api.options_problem(p)
    if problem:
        rc, text, why = launch_status.LOG_BAD_ARGS, "", "%s: %s" % problem
    else:
        api = launch_status.DockerAPI(p["docker_host"], timeout=60, docker_client=p["docker_client"])
        rc, text, why = launch_status.read_log(api, p["container"], p["since"], p["tail"])
    if rc:
        module.fail_json(msg=why, rc=rc, stdout="", stderr=why)
    module.exit_json(changed=False, rc=0, stdout=text, stderr="")


if __name__ == "__main__":
    main()
