# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Plan files and the deployment state record on the controller (atomic writes, honouring check mode).

Layout under ``plan_dir``::

    <host>.json, <host>.sh      the latest rendering (what plan.yml shows; not necessarily running)
    plan.md                     the latest rendering for people (plugin_utils.plan.render.plan_markdown)
    plans/<plan_id>/<host>.*    every rendered plan, kept by id (never rewritten: same id = same content)
    deployed -> plans/<id>      symlink to the plan that last became ready (see state.json)
    state.json                  the deployment state record (plugin_utils/rollout/state.py)
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import tempfile

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.common import artifacts
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.rollout import state as deploy_state

KEEP_PLANS = 20
# the modes of every controller-side artifact (module_utils.common.artifacts says why)
ARTIFACT_FILE_MODE = artifacts.ARTIFACT_FILE_MODE


def _atomic_write(path, text, mode):
    directory = os.path.dirname(path)
    artifacts.make_dirs(directory)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".%s." % os.path.basename(path))
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def _read_text(path):
    try:
        with open(path) as handle:
            return handle.read()
    except (IOError, OSError, UnicodeDecodeError):
        return None


def file_diffs(dest, files, hide):
    """--diff of ``{name: (text, mode)}`` against what is under ``dest`` now (nothing for a new file), one entry per
    file whose text differs, as ansible's file modules return it; ``hide``: text -> text as it may be shown."""
    dest = os.path.abspath(os.path.expanduser(dest))
    out = []
    for name, (text, _mode) in sorted(files.items()):
        path = os.path.join(dest, name)
        before = _read_text(path) or ""
        if before != text:
            out.append(dict(before=hide(before), after=hide(text), before_header=path, after_header=path))
    return out


def write_files(dest, files, check_mode=False):
    """Write ``{name: (text, mode)}`` under ``dest``; return the sorted names that changed (or would)."""
    dest = os.path.abspath(os.path.expanduser(dest))
    changed = []
    for name, (text, mode) in sorted(files.items()):
        path = os.path.join(dest, name)
        try:
            same = _read_text(path) == text and (os.stat(path).st_mode & 0o777) == mode
        except (IOError, OSError):
            same = False
        if same:
            continue
        changed.append(name)
        if not check_mode:
            _atomic_write(path, text, mode)
    return changed


def write_plan(dest, files, plans, check_mode=False):
    """Write the latest rendering and keep a copy by plan id; return ``(plan_id, changed names)``."""
    pid = deploy_state.plan_id(plans)
    changed = write_files(dest, files, check_mode)
    kept = write_files(os.path.join(dest, "plans", pid), files, check_mode)
    if not check_mode:
        prune(dest)
    return pid, changed + ["plans/%s/%s" % (pid, n) for n in kept]


def prune(dest, keep=KEEP_PLANS):
    """Remove the oldest kept plans beyond ``keep``, never the deployed one or one an upgrade names."""
    root = os.path.join(os.path.abspath(dest), "plans")
    if not os.path.isdir(root):
        return []
    record = read_state(dest)
    protect = set(filter(None, [(record["deployed"] or {}).get("plan_id"), (record["upgrade"] or {}).get(
        "from_plan_id"), (record["upgrade"] or {}).get("to_plan_id")]))
    ids = sorted(os.listdir(root), key=lambda n: os.stat(os.path.join(root, n)).st_mtime, reverse=True)
    gone = [i for i in ids[keep:] if i not in protect]
    for pid in gone:
        for name in os.listdir(os.path.join(root, pid)):
            os.unlink(os.path.join(root, pid, name))
        os.rmdir(os.path.join(root, pid))
    return gone


def state_path(dest):
    return os.path.join(os.path.abspath(os.path.expanduser(dest)), "state.json")


def read_state(dest):
    try:
        with open(state_path(dest)) as handle:
            return deploy_state.normalise(json.load(handle))
    except (IOError, OSError, ValueError):
        return deploy_state.empty()


def write_state(dest, record):
    """Write the record and point ``deployed`` at its deployed plan's directory."""
    _atomic_write(state_path(dest), json.dumps(record, indent=2, sort_keys=True) + "\n", ARTIFACT_FILE_MODE)
    pid = (record.get("deployed") or {}).get("plan_id")
    link = os.path.join(os.path.abspath(dest), "deployed")
    if pid and os.path.isdir(os.path.join(os.path.abspath(dest), "plans", pid)):
        tmp = link + ".tmp"
        if os.path.lexists(tmp):
            os.unlink(tmp)
        os.symlink(os.path.join("plans", pid), tmp)
        os.replace(tmp, link)


def read_plans(dest, pid):
    """``{host: plan}`` of a kept plan (empty when it is not kept)."""
    root = os.path.join(os.path.abspath(dest), "plans", pid or "-")
    out = {}
    if not os.path.isdir(root):
        return out
    for name in os.listdir(root):
        if name.endswith(".json"):
            try:
                with open(os.path.join(root, name)) as handle:
                    out[name[:-5]] = json.load(handle)
            except (IOError, OSError, ValueError):
                continue
    return out


def plans_by_hash(dest):
    """``{host: {plan_hash: plan}}`` over every kept plan (to say what a running container's plan was)."""
    out = {}
    root = os.path.join(os.path.abspath(dest), "plans")
    for pid in (os.listdir(root) if os.path.isdir(root) else []):
        for host, plan in read_plans(dest, pid).items():
            label = ((plan.get("container") or {}).get("labels") or {}).get("io.gpufleet.kimi_k3.plan_hash")
            out.setdefault(host, {})[label] = plan
    return out
