# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Wait until a node's vLLM container is ready, printing its start-up phase as it changes.

Documentation lives in plugins/modules/vllm_wait.py. Each round runs vllm_node_status on the node.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

display = Display()


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("container", "docker_host", "health_urls", "timeout", "interval", "tail",
                             "progress_every"))

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        args = self._task.args
        timeout = float(args.get("timeout", 3600))
        interval = float(args.get("interval", 10))
        every = float(args.get("progress_every", 30))
        host = task_vars.get("inventory_hostname")
        module_args = {"container": args.get("container", "vllm-kimi-k3"),
                       "docker_host": args.get("docker_host", "unix:///var/run/docker.sock"),
                       "health_urls": list(args.get("health_urls") or []),
                       "tail": int(args.get("tail", 200)), "wait_s": interval}
        start = time.monotonic()
        last_phase, last_print, rounds = None, 0.0, 0
        history = []
        while True:
            rounds += 1
            status = self._execute_module(module_name="gpufleet.kimi_k3.vllm_node_status",
                                          module_args=module_args, task_vars=task_vars)
            elapsed = time.monotonic() - start
            if status.get("failed"):
                result.update(failed=True, msg="%s: cannot read the container status: %s" % (host, status.get("msg")))
                return result
            phase = status.get("phase")
            if phase != last_phase:
                history.append({"t_s": round(elapsed, 1), "phase": phase, "detail": status.get("phase_detail")})
            if phase != last_phase or elapsed - last_print >= every:
                detail = (": " + status["phase_detail"]) if status.get("phase_detail") else ""
                display.display("[%s] %5.0fs  %s%s" % (host, elapsed, phase, detail))
                last_phase, last_print = phase, elapsed
            base = {k: status.get(k) for k in ("running", "status", "exit_code", "phase", "phase_detail",
                                               "health", "healthy", "log_tail", "image")}
            result.update(base, elapsed_s=round(elapsed, 1), rounds=rounds, phases=history, changed=False)
            if status.get("healthy"):
                result["msg"] = "%s: ready after %.0f s" % (host, elapsed)
                return result
            if not status.get("running"):
                result.update(failed=True, msg="%s: the vLLM container is %s (exit code %s) in phase %s; last log "
                              "lines:\n%s" % (host, status.get("status"), status.get("exit_code"), phase,
                                              "\n".join((status.get("log_tail") or [])[-30:])))
                return result
            if elapsed >= timeout:
                result.update(failed=True, msg="%s: not ready after %.0f s (phase %s); last log lines:\n%s"
                              % (host, elapsed, phase, "\n".join((status.get("log_tail") or [])[-30:])))
                return result
