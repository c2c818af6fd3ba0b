# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side: an operator site's files (the site_files action, roles/site) written in one pass.

A site is written once and then belongs to the operator: nothing that exists under it is ever replaced, rewritten
or re-moded - only missing paths are created. An inventory is copied as ansible.builtin.copy copies a directory
with its defaults (``local_follow``): a symlink to a file becomes a copy of that file (its mode), a symlink to a
directory is walked as that directory, and a symlink that cannot be followed (dangling, or a directory that
contains it: a loop) is written as the same symlink. Files keep their source's mode (``mode: preserve``);
directories inside an inventory get the default mode (the umask), as copy's do.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import collections
import os
import stat
import tempfile

FILE_MODE = 0o644   # the site's own files (rendered templates), as the role's template tasks wrote them
DIR_MODE = 0o755    # the site directory and its inventories/: operators' tools read them

# kind: "dir", "file" or "link"; rel: path under the site; source: the file to copy (a followed symlink's target),
# the link's target for "link", None for a rendered file or a directory; mode: the file's mode, else None
Entry = collections.namedtuple("Entry", "kind rel source mode")


def tree_entries(src_dir, rel_base):
    """The entries copying ``src_dir`` to ``rel_base`` makes (copy's local_follow walk), parents before children."""
    entries = [Entry("dir", rel_base, None, None)]
    real = os.path.realpath(src_dir)
    _walk(real, rel_base, {_ident(real)}, entries)
    return entries


def _ident(path):
    st = os.stat(path)
    return st.st_dev, st.st_ino


def _walk(directory, rel, ancestors, entries):
    """Append ``directory``'s entries; ``ancestors`` are the (device, inode) of the directories being walked, so a
    symlink back into one of them is kept as a symlink instead of being followed forever."""
    for name in sorted(os.listdir(directory)):
        path, sub = os.path.join(directory, name), os.path.join(rel, name)
        target = os.path.realpath(path)
        if os.path.isdir(target):
            if os.path.islink(path) and _ident(target) in ancestors:
                entries.append(Entry("link", sub, os.readlink(path), None))
                continue
            entries.append(Entry("dir", sub, None, None))
            _walk(target, sub, ancestors | {_ident(target)}, entries)
        elif os.path.isfile(target):
            entries.append(Entry("file", sub, target, stat.S_IMODE(os.stat(target).st_mode)))
        elif os.path.islink(path):
            entries.append(Entry("link", sub, os.readlink(path), None))
        # anything else (a socket, a FIFO) is no inventory file: left out


def missing(dest, entries):
    """The entries whose path does not exist under ``dest`` (a symlink, even a dangling one, exists)."""
    return [e for e in entries if not os.path.lexists(os.path.join(dest, e.rel))]


def site_entries(directories, rendered, copies):
    """The site's entries in writing order: ``directories`` (mode DIR_MODE), the ``rendered`` files (names, mode
    FILE_MODE), then the ``copies`` (tree_entries)."""
    return ([Entry("dir", d, None, DIR_MODE) for d in directories] + [Entry("file", n, None, FILE_MODE) for n in rendered]
            + list(copies))


def write(dest, entries, texts, check_mode=False):
    """Create the ``entries`` missing under ``dest``: a directory, a file (``texts[rel]`` for a rendered one, the
    source's bytes for a copy) or a symlink. Returns ``{"directories": [...], "written": [...]}``: what was created
    (or would be, in check mode), directories apart from files and symlinks. An existing path is never touched."""
    dest = os.path.abspath(os.path.expanduser(dest))
    done = {"directories": [], "written": []}
    for entry in missing(dest, entries):
        path = os.path.join(dest, entry.rel)
        done["directories" if entry.kind == "dir" else "written"].append(entry.rel or ".")
        if check_mode:
            continue
        if entry.kind == "dir":
            os.makedirs(path)  # with its parents: the site directory's may be missing too
            if entry.mode is not None:  # explicit: the umask may be stricter
                os.chmod(path, entry.mode)
        elif entry.kind == "link":
            os.symlink(entry.source, path)
        else:
            _create(path, texts[entry.rel] if entry.source is None else _read(entry.source), entry.mode)
    return done


def _read(path):
    with open(path, "rb") as handle:
        return handle.read()


def _create(path, data, mode):
    """Write ``data`` (text or bytes) to the new file ``path`` whole or not at all: a temporary file in the same
    directory hard-linked into place, which fails instead of replacing a file that appeared meanwhile (a file left
    half-written would be kept by every later run)."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".%s." % os.path.basename(path))
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.chmod(tmp, mode)
        os.link(tmp, path)
    finally:
        os.unlink(tmp)
