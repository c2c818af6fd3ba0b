# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The modes of the artifacts the collection writes on the controller, and making their directories.

Plans, the state record, reports and logs name the cluster's addresses, ports, secret file paths and what the nodes
answered: they are the operator's alone (issue #39), 0600 for files and 0700 for the directories the collection
makes. Here and not in plugin_utils: vllm_capacity_report is a module and writes its report itself.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

ARTIFACT_FILE_MODE = 0o600
ARTIFACT_DIR_MODE = 0o700


def make_dirs(path):
    """Make ``path`` and every missing parent with ARTIFACT_DIR_MODE (os.makedirs gives the parents the umask's
    mode); a directory that exists keeps its mode (it may be the operator's, /tmp say)."""
    path = os.path.abspath(path)
    if os.path.isdir(path):
        return
    make_dirs(os.path.dirname(path))
    try:
        os.mkdir(path, ARTIFACT_DIR_MODE)
    except OSError:
        if not os.path.isdir(path):  # made meanwhile by a parallel writer: fine
            raise
        return
    os.chmod(path, ARTIFACT_DIR_MODE)  # mkdir's mode passes the umask: a stricter one (0277) would leave it unwritable
