# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Write plan files on the controller: only when content changed, atomically, honouring check mode."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import tempfile


def write_files(dest, files, check_mode=False):
    """Write ``{name: (text, mode)}`` under ``dest``; return the sorted names that changed (or would)."""
    dest = os.path.abspath(os.path.expanduser(dest))
    changed = []
    for name, (text, mode) in sorted(files.items()):
        path = os.path.join(dest, name)
        try:
            with open(path) as handle:
                same = handle.read() == text and (os.stat(path).st_mode & 0o777) == mode
        except (IOError, OSError):
            same = False
        if same:
            continue
        changed.append(name)
        if check_mode:
            continue
        if not os.path.isdir(dest):
            os.makedirs(dest, 0o755)
        fd, tmp = tempfile.mkstemp(dir=dest, prefix=".%s." % name)
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    return changed
