# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side helper: turn Ansible's lazy/tagged template results into plain Python values."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from collections.abc import Mapping


def to_plain(value):
    """Mappings -> dict (str keys), lists/tuples -> list, str subclasses -> str; other values unchanged."""
    if isinstance(value, dict) or hasattr(value, "items"):
        return dict((str(k), to_plain(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    if isinstance(value, str):
        return str(value)
    return value


class PlainView(Mapping):
    """Read-only view of a (lazy) mapping that converts only what is read: nested mappings become views, other
    values go through to_plain. For helpers that read a few keys of plan_result, whose full conversion walks every
    host's plan (quadratic in the number of nodes when done per host)."""

    def __init__(self, data):
        self._data = data

    def __getitem__(self, key):
        return plain_view(self._data[key])

    def __iter__(self):
        return (str(k) for k in self._data)

    def __len__(self):
        return len(self._data)


def plain_view(value):
    """PlainView for mappings, to_plain for everything else."""
    if isinstance(value, dict) or hasattr(value, "items"):
        return PlainView(value)
    return to_plain(value)
