# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side helper: turn Ansible's lazy/tagged template results into plain Python values."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


def to_plain(value):
    """Mappings -> dict (str keys), lists/tuples -> list, str subclasses -> str; other values unchanged."""
    if isinstance(value, dict) or hasattr(value, "items"):
        return dict((str(k), to_plain(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    if isinstance(value, str):
        return str(value)
    return value
