# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side: what the report actions (preflight_report, fabric_report) share - reading what every host
registered, the task's verdict line, and a run that judges once and writes the report files."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.plugins.action import ActionBase

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.actions.templated import to_plain
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import files as plan_files


def registered(hostvars, host, var, default=None):
    """``host``'s variable ``var`` in plain values; ``default`` when the host has no such variable (the task that
    sets it did not run there) or there is no such host.

    raw_get reads the value as stored: templating it again (``hostvars[host][var]``) walks every host's registered
    result once more per host, quadratic in nodes, and a registered result holds no template."""
    try:
        raw = hostvars.raw_get(host)[var] if hasattr(hostvars, "raw_get") else hostvars[host][var]
    except Exception:  # pylint: disable=broad-except  # undefined on this host, or no such host
        return default
    return to_plain(raw)


def verdict(what, summary):
    """The task's ``msg``: ``<what> passed`` or ``<what> failed on <the failed hosts>``."""
    if summary["ok"]:
        return "%s passed" % what
    return "%s failed on %s" % (what, ", ".join(summary["failed_hosts"]))


class ReportAction(ActionBase):
    """Judges every host once on the controller and writes the report files under ``dest``: a fresh observation of
    the nodes, so written in check mode too and never a change. A subclass names its argument spec (``SPEC``) and
    implements ``judge``."""

    TRANSFERS_FILES = False
    SPEC = {}

    def run(self, tmp=None, task_vars=None):
        result = super(ReportAction, self).run(tmp, task_vars)
        _valid, args = self.validate_argument_spec(self.SPEC)
        outputs, files = self.judge(args, task_vars or {})
        result.update(outputs)
        if args["dest"]:
            result["written"] = plan_files.write_files(args["dest"], files)
        result["changed"] = False
        return result

    def judge(self, args, task_vars):
        """``(result keys, {file name under dest: (text, mode)})`` for the validated task arguments ``args``."""
        raise NotImplementedError
