# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Value parsing shared by the collection (pure functions): booleans, integers, release versions.

One spelling of each rule, so the plan, preflight and the modules read ``"yes"`` or ``"0.28.0"`` the same way.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

TRUE_WORDS = ("true", "yes", "on", "1")
FALSE_WORDS = ("false", "no", "off", "0", "")


def to_bool(value):
    """``True``/``False`` for a YAML boolean, ``0``/``1`` or a boolean word; ValueError for anything else."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in TRUE_WORDS:
        return True
    if isinstance(value, str) and value.strip().lower() in FALSE_WORDS:
        return False
    if isinstance(value, int):
        return bool(value)
    raise ValueError("not a boolean: %r" % (value,))


def to_int(value):
    """``int(value)`` that refuses booleans (YAML ``yes`` is not a port number)."""
    if isinstance(value, bool):
        raise ValueError("boolean is not an integer")
    return int(value)


def version_key(version):
    """Sort key of a release string: ``'0.28.0'`` -> (0, 28, 0); non-numeric pieces count as 0."""
    parts = []
    for piece in str(version).split("."):
        m = re.match(r"(\d+)", piece)
        parts.append(int(m.group(1)) if m else 0)
    return tuple(parts)


def pick_versioned(mapping, version):
    """Value of ``mapping`` ({version: value}) for the greatest key <= ``version``; None below all keys."""
    best = None
    for key in sorted(mapping, key=version_key):
        if version_key(key) <= version_key(version):
            best = mapping[key]
    return best
