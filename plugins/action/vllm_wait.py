# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Wait until a node's vLLM container is ready while watching the whole group; print the start-up phase.

Documentation lives in plugins/modules/vllm_wait.py. Each round runs vllm_node_status on the node, feeds the
status to launch_watch.NodeWatch and exchanges verdicts with the other hosts' watchers through a board directory
on the controller (one JSON file per host; every watcher of one task in one ansible-playbook run shares it).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import shutil
import stat
import tempfile
import time

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.actions import node_status
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.actions import specs as action_specs
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.launch import watch as launch_watch

display = Display()

STATUS_KEYS = ("running", "status", "exit_code", "phase", "phase_detail", "health", "healthy", "log_tail", "image",
               "plan_hash")


def private_dir(path):
    """Make ``path`` a directory only this user can enter, or accept the one there only if it already is: a real
    directory (not a symlink), owned by this user, with no access for group or others. The boards live under the
    shared temporary directory at a predictable name, so another local user could create it first and read or
    forge the verdicts that stop a launch. Returns ``path``; raises AnsibleActionFail naming what is wrong."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        # every host's watcher creates the board at about the same moment (one forked worker each)
        pass
    st = os.lstat(path)
    fix = "remove it, or point TMPDIR at a directory only this user can write (vllm_wait keeps its boards there)"
    if not stat.S_ISDIR(st.st_mode):
        raise AnsibleActionFail("vllm_wait: %s is not a directory (%s): %s" % (
            path, "a symlink" if stat.S_ISLNK(st.st_mode) else "a file", fix))
    if st.st_uid != os.geteuid():
        raise AnsibleActionFail("vllm_wait: %s belongs to uid %d, not to this user (uid %d): %s" % (
            path, st.st_uid, os.geteuid(), fix))
    if st.st_mode & 0o022:
        raise AnsibleActionFail("vllm_wait: %s is open to other users (mode %04o, must be 0700): %s" % (
            path, stat.S_IMODE(st.st_mode), fix))
    if st.st_mode & 0o077:
        # ours and writable by nobody else (an earlier release made its boards 0755): nothing in it can be forged
        os.chmod(path, 0o700)
    return path


class Board(object):
    """Per-run directory of ``<host>.json`` verdict records (atomic writes), private to the controller's user."""

    def __init__(self, path):
        self.path = private_dir(path)

    def publish(self, record):
        fd, tmp = tempfile.mkstemp(dir=self.path, prefix=".tmp.")
        with os.fdopen(fd, "w") as handle:
            json.dump(record, handle)
        os.replace(tmp, os.path.join(self.path, record["host"] + ".json"))

    def read(self, peers):
        out = {}
        for peer in peers:
            try:
                with open(os.path.join(self.path, peer + ".json")) as handle:
                    out[peer] = json.load(handle)
            except (IOError, OSError, ValueError):
                continue
        return out


def board_dir(name):
    """The board ``name`` (one per group start, chosen by the caller) under a per-user temporary directory, which
    is made private first (private_dir); boards older than a day are removed on the way."""
    root = private_dir(os.path.join(tempfile.gettempdir(), "kimi-k3-wait-%d" % os.geteuid()))
    for old in os.listdir(root):
        path = os.path.join(root, old)
        try:
            if time.time() - os.stat(path).st_mtime > 86400:
                shutil.rmtree(path, ignore_errors=True)
        except OSError:
            continue
    return os.path.join(root, os.path.basename(str(name)))


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def _options(self):
        _valid, args = self.validate_argument_spec(action_specs.VLLM_WAIT)
        args = action_specs.null_is_default(args, action_specs.VLLM_WAIT)
        opts = {"timeout": args["timeout"], "interval": args["interval"], "every": args["progress_every"],
                "stall": args["stall_timeout"], "peers": args["peers"], "board": args["board"]}
        opts["module_args"] = {"container": args["container"], "docker_host": args["docker_host"],
                               "docker_client": args["docker_client"] or {},
                               "health_urls": args["health_urls"], "tail": args["tail"], "wait_s": args["interval"],
                               "validate_certs": args["validate_certs"]}
        if args["ca_path"]:
            opts["module_args"]["ca_path"] = args["ca_path"]
        return opts

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        opts = self._options()
        host = task_vars.get("inventory_hostname")
        peers = sorted(set(opts["peers"]) | {host})
        board = Board(board_dir(opts["board"] or "%d-%s" % (os.getppid(), self._task._uuid)))
        start = time.monotonic()
        wall0 = time.time()
        watch = launch_watch.NodeWatch(start, opts["timeout"], opts["stall"])
        stale = max(60.0, 3 * opts["interval"] + 30)
        last_print, status, rounds, error = -opts["every"], {}, 0, None
        while True:
            rounds += 1
            fresh, error = node_status.read(self, opts["module_args"], task_vars)
            now = time.monotonic()
            status = fresh or status
            verdict = watch.feed(now, fresh)
            wall = wall0 + (now - start)
            board.publish(launch_watch.board_record(host, verdict, wall, watch.detail or error or "",
                                                    status.get("phase")))
            first = launch_watch.group_verdict(host, board.read(peers), wall, stale)
            last_print = self._progress(host, now - start, status, watch, last_print, opts["every"])
            if verdict in launch_watch.DONE or first is not None:
                break
        if verdict not in launch_watch.DONE:
            verdict = "group"
            watch.detail = "%s failed first: %s" % (first["host"], first.get("detail"))
        return self._result(result, host, verdict, watch, status, first, now - start, rounds)

    def _progress(self, host, elapsed, status, watch, last_print, every):
        changed = watch.history and watch.history[-1]["t_s"] >= round(elapsed, 1) - 0.05
        if not changed and elapsed - last_print < every:
            return last_print
        detail = (": " + status["phase_detail"]) if status.get("phase_detail") else ""
        display.display("[%s] %5.0fs  %s%s" % (host, elapsed, status.get("phase"), detail))
        return elapsed

    def _result(self, result, host, verdict, watch, status, first, elapsed, rounds):
        result.update({k: status.get(k) for k in STATUS_KEYS})
        result.update(elapsed_s=round(elapsed, 1), rounds=rounds, phases=watch.history, changed=False,
                      verdict=verdict, detail=watch.detail, ready=verdict == "ready", first_failure=first)
        if verdict == "ready":
            result["msg"] = "%s: %s" % (host, watch.detail)
            return result
        result["failed"] = True
        if verdict == "group":
            result["msg"] = "%s: stopped waiting (phase %s): %s" % (host, status.get("phase"), watch.detail)
        else:
            result["msg"] = "%s: %s (%s); last log lines:\n%s" % (
                host, launch_watch.REASONS[verdict], watch.detail, "\n".join((status.get("log_tail") or [])[-30:]))
        return result
