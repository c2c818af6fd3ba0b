# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Wait for the fabric job's container to end, printing the job's progress lines.

Documentation lives in plugins/modules/fabric_wait.py. Each round runs vllm_node_status on the node (the
container's state and log tail) and prints what plugin_utils/fabric/wait.py makes of it: one task, progress lines,
none of the ``FAILED - RETRYING`` lines of an ``until`` loop.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.actions import node_status
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.actions import specs as action_specs
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.fabric import wait as fabric_wait

display = Display()

# A node whose status cannot be read this many rounds in a row is given up (one miss is a busy engine).
UNREADABLE_ROUNDS = 3


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def _status(self, args, task_vars):
        module_args = {"container": args["container"], "docker_host": args["docker_host"],
                       "docker_client": args["docker_client"] or {}, "tail": args["tail"], "wait_s": 0}
        return node_status.read(self, module_args, task_vars)

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        _valid, args = self.validate_argument_spec(action_specs.FABRIC_WAIT)
        host = task_vars.get("inventory_hostname")
        progress = fabric_wait.Progress(args["progress_every"])
        start, status, misses = time.monotonic(), {}, 0
        while True:
            fresh, error = self._status(args, task_vars)
            elapsed = time.monotonic() - start
            misses = 0 if fresh else misses + 1
            status = fresh or status
            for line in progress.feed(elapsed, (fresh or {}).get("log_tail")):
                display.display("[%s] %s" % (host, line))
            if misses >= UNREADABLE_ROUNDS:
                result.update(failed=True, msg="%s: the fabric job's container cannot be read: %s" % (host, error))
                return result
            if fresh and not fresh.get("running") or elapsed >= args["timeout"]:
                break
            time.sleep(args["interval"])
        failed, msg = fabric_wait.outcome(status, elapsed, progress.last)
        result.update(changed=False, failed=failed, msg="%s: %s" % (host, msg), elapsed_s=round(elapsed, 1),
                      running=bool(status.get("running")), status=status.get("status"),
                      exit_code=status.get("exit_code"), progress=progress.last)
        return result
