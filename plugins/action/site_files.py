# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side action: an operator site's files in one task - the rendered site files, the playbook wrappers
and copies of the example inventories, each written only where nothing exists yet.

Documentation lives in plugins/modules/site_files.py; the walking and writing in plugin_utils/site/files.py. One
task instead of a template or copy module run per file: the role's loops cost a module execution per file (the
example inventories alone are over 50), most of a site_init run.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.actions import specs as action_specs
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.site import files as site_files

# the site directory itself and the one the inventories go to, made even when no inventory is copied
SITE_DIRECTORIES = ("", "inventories")


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        task_vars = task_vars or {}
        _valid, args = self.validate_argument_spec(action_specs.SITE_FILES)
        args = action_specs.null_is_default(args, action_specs.SITE_FILES)
        if not args["dest"]:  # present but empty: the spec's `required` lets it through
            raise AnsibleActionFail("site_files: dest is required (the site directory)")
        dest = os.path.abspath(os.path.expanduser(args["dest"]))
        sources = dict((name, (src, {})) for name, src in args["templates"].items())
        sources.update((name + ".yml", (args["playbook_template"], {"item": name})) for name in args["playbooks"])
        try:
            entries = site_files.site_entries(SITE_DIRECTORIES, sorted(sources), self._copies(args))
            lookup = self._shared_loader_obj.lookup_loader.get("ansible.builtin.template", loader=self._loader,
                                                               templar=self._templar)
            # only what will be written is rendered: a second run renders nothing
            texts = dict((e.rel, self._render(lookup, sources[e.rel], task_vars))
                         for e in site_files.missing(dest, entries) if e.rel in sources)
            done = site_files.write(dest, entries, texts, check_mode=self._task.check_mode)
        except (IOError, OSError) as exc:
            raise AnsibleActionFail("site_files: %s" % exc)
        result.update(done, dest=dest, inventories=list(args["inventories"]),
                      changed=bool(done["written"] or done["directories"]),
                      msg="%d file(s) %s under %s, %d directory(ies) %s" % (
                          len(done["written"]), "would be written" if self._task.check_mode else "written", dest,
                          len(done["directories"]), "to make" if self._task.check_mode else "made"))
        if self._task.diff and done["written"]:
            result["diff"] = _diffs(dest, entries, texts, done["written"])
        return result

    def _copies(self, args):
        """The entries of every inventory to copy (plugin_utils.site.files.tree_entries)."""
        if args["inventories"] and not args["inventory_root"]:
            raise AnsibleActionFail("site_files: inventories needs inventory_root (the directory that holds them)")
        entries = []
        for name in args["inventories"]:
            src = os.path.join(args["inventory_root"], name)
            if not os.path.isdir(src):
                raise AnsibleActionFail("site_files: no inventory %s under %s" % (name, args["inventory_root"]))
            entries += site_files.tree_entries(src, os.path.join("inventories", name))
        return entries

    def _render(self, lookup, source, task_vars):
        """A template of the role (its templates/ directory) rendered as ansible.builtin.template renders it, with
        the task's variables and ``template_vars`` (``item`` for a wrapper). Through ansible-core's template
        ``lookup`` on the action's templar: the way that is the same from ansible-core 2.17 on (trusted template
        text, ansible_managed and the search path are the lookup's business, and changed in 2.19)."""
        src, template_vars = source
        return lookup.run([self._find_needle("templates", src)], task_vars, template_vars=template_vars)[0]


def _diffs(dest, entries, texts, written):
    """--diff: a new text file against nothing (a symlink or a file that is not UTF-8 text shows no diff)."""
    by_rel = dict((e.rel, e) for e in entries)
    out = []
    for rel in written:
        entry = by_rel[rel]
        after = texts.get(rel) if entry.kind == "file" and entry.source is None else _text(entry)
        if after is not None:
            path = os.path.join(dest, rel)
            out.append(dict(before="", after=after, before_header=path, after_header=path))
    return out


def _text(entry):
    if entry.kind != "file":
        return None
    try:
        with open(entry.source, "rb") as handle:
            return handle.read().decode("utf-8")
    except (IOError, OSError, UnicodeDecodeError):
        return None
