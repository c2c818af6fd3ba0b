# -*- coding: utf-8 -*-
# Copyright: gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Operator access on a node: who the modules run as, and whether that identity can do what a deployment does.

A deployment runs its node-side tasks as root, either by logging in as root or,
the usual site setup, as a named user with sudo and ``ansible_become: true``. A user who is only in the ``docker``
group (no sudo) is REFUSED: the engine socket alone is not enough - the launch role writes the secret files
under /etc/kimi-k3 (root, 0400 in a 0700 directory), the weights step writes the model cache, and teardown removes both.

- ``observe_access(docker_host, paths)`` runs ON THE NODE (standard library only): effective user, groups, whether
  the engine socket is readable/writable, and whether each path (or its nearest existing parent) is writable.
- ``check_access(host, obs)`` is pure: one preflight finding ``{host, check, status, observed, expected, fix}`` in
  the format of plugin_utils.preflight.checks.

Registering it in preflight (engineer roles / the lead): node_probe adds ``observe_access(docker_host,
[env_dir, model_cache_dir])`` to its facts as ``access``; run_checks appends ``check_access(host, facts['access'])``
per host (check name ``access``). Unit tests: tests/unit/plugins/module_utils/probe/test_preflight_access.py.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.engine.api import DEFAULT_DOCKER_HOST

CHECK = "access"
FIX_BECOME = ("Connect as a user with sudo and set ansible_become: true for the vllm_cluster group (passwordless "
              "sudo, or run with --ask-become-pass), or connect as root. A docker-group user without sudo is not "
              "supported: the deployment also writes %s (root-owned) and the model cache.")


def _socket_path(docker_host):
    text = str(docker_host or DEFAULT_DOCKER_HOST)
    if text.startswith("unix://"):
        return text[len("unix://"):]
    return text if text.startswith("/") else None


def _writable(path):
    """The path is writable, or (absent) its nearest existing parent is: what mkdir -p + write would need."""
    p = os.path.abspath(path)
    while not os.path.exists(p) and p != os.path.dirname(p):
        p = os.path.dirname(p)
    return os.access(p, os.W_OK)


def observe_access(docker_host, paths=()):
    """Node side: {user, euid, groups, socket, socket_rw, paths: {path: writable}}."""
    import grp
    import pwd
    euid = os.geteuid()
    try:
        user = pwd.getpwuid(euid).pw_name
    except KeyError:
        user = str(euid)
    groups = []
    for gid in os.getgroups():
        try:
            groups.append(grp.getgrgid(gid).gr_name)
        except KeyError:
            groups.append(str(gid))
    sock = _socket_path(docker_host)
    socket_rw = None if sock is None else bool(os.path.exists(sock) and os.access(sock, os.R_OK | os.W_OK))
    return {"user": user, "euid": euid, "groups": sorted(set(groups)), "socket": sock, "socket_rw": socket_rw,
            "paths": dict((str(p), _writable(p)) for p in paths if p)}


def _finding(host, status, observed, fix):
    return {"host": host, "check": CHECK, "status": status, "observed": observed,
            "expected": "root (login or become) on the node", "fix": fix}


def check_access(host, obs):
    """One finding for ``host`` from observe_access()'s ``obs`` (None: the node was not observed)."""
    if not isinstance(obs, dict) or "euid" not in obs:
        return _finding(host, "fail", "not observed", "Re-run preflight; the node's access was not probed.")
    who = "%s (uid %s)" % (obs.get("user"), obs.get("euid"))
    if obs.get("euid") == 0:
        return _finding(host, "pass", "modules run as %s" % who, None)
    blocked = sorted(p for p, ok in (obs.get("paths") or {}).items() if not ok)
    parts = ["modules run as %s without become" % who]
    if obs.get("socket_rw") is False:
        parts.append("engine socket %s not usable" % obs.get("socket"))
    elif obs.get("socket_rw"):
        parts.append("engine socket usable (groups: %s)" % ", ".join(obs.get("groups") or []))
    if blocked:
        parts.append("not writable: %s" % ", ".join(blocked))
    where = ", ".join(blocked) or ", ".join(sorted(obs.get("paths") or {})) or "/etc/kimi-k3"
    return _finding(host, "fail", "; ".join(parts), FIX_BECOME % where)
