# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Collective-library versions and settings known to fail with Kimi-K3 (controller side, pure).

The table is recipe data (``fabric.known_bad`` in data/recipes/kimi_k3.yml). ``findings(library, version, env,
rows, error_text)`` judges the NCCL / RCCL version the fabric job read in the image together with the plan's env
(and, for rows keyed on a symptom, the collective's own error text) and returns what matches: a ``warn`` or a
``refuse`` with its fix and source. A version that is not ``MAJOR.MINOR.PATCH`` is one finding saying the table
was not checked, never an exception.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

SEVERITIES = ("warn", "refuse")
LIBRARIES = ("nccl", "rccl")
ROW_KEYS = ("name", "library", "versions", "env", "env_not", "error", "severity", "message", "fix", "source")
_VERSION = re.compile(r"^\s*v?(\d+)\.(\d+)\.(\d+)")


def parse_version(text):
    """(major, minor, patch) of '2.30.7', '2.30.7+cuda13.0', 'v2.28.9'; None when it is not one."""
    match = _VERSION.match(text) if isinstance(text, str) else None
    return tuple(int(g) for g in match.groups()) if match else None


def _in_range(version, versions):
    low, high = (versions or {}).get("min"), (versions or {}).get("max")
    return (low is None or version >= parse_version(str(low))) and \
        (high is None or version <= parse_version(str(high)))


def _env_holds(row, env):
    equal = all(str(env.get(k)) == str(v) for k, v in (row.get("env") or {}).items())
    differs = all(str(env.get(k)) != str(v) for k, v in (row.get("env_not") or {}).items())
    return equal and differs


def _matches(row, library, version, env, error_text):
    if row["library"] != library or not _in_range(version, row.get("versions")) or not _env_holds(row, env):
        return False
    return not row.get("error") or re.search(row["error"], error_text or "") is not None


def findings(library, version, env, rows, error_text=""):
    """``[{name, severity, message, fix, source}]`` of every row that applies (empty when none does)."""
    if library not in LIBRARIES:
        return [_unreadable("the collective library %r is none of %s" % (library, ", ".join(LIBRARIES)))]
    parsed = parse_version(version)
    if parsed is None:
        return [_unreadable("the %s version read in the image, %r, is not MAJOR.MINOR.PATCH" % (
            library.upper(), version))]
    text = "%s %s" % (library.upper(), ".".join(str(p) for p in parsed))
    out = []
    for row in rows or []:
        if _matches(row, library, parsed, dict(env or {}), error_text):
            out.append({"name": row["name"], "severity": row["severity"], "version": text,
                        "message": "%s: %s" % (text, row["message"]), "fix": row["fix"], "source": row["source"]})
    return out


def _unreadable(why):
    return {"name": "unreadable_version", "severity": "warn", "version": None,
            "message": why + ": the known-bad versions table was not checked",
            "fix": "read the library's version in the image (python3 -c 'import torch; "
                   "print(torch.cuda.nccl.version())') and compare it with fabric.known_bad in the recipe",
            "source": "plugins/plugin_utils/fabric/known_bad.py"}


def table_problems(rows):
    """What is wrong with the table itself (one line per problem; empty when it is sound)."""
    problems = []
    for i, row in enumerate(rows or []):
        where = "fabric.known_bad[%d] (%s)" % (i, row.get("name") if isinstance(row, dict) else row)
        if not isinstance(row, dict):
            problems.append("%s: not a mapping" % where)
            continue
        problems += ["%s: unknown key %s" % (where, k) for k in sorted(set(row) - set(ROW_KEYS))]
        required = ("name", "library", "severity", "message", "fix", "source")
        problems += ["%s: %s is missing" % (where, k) for k in required if not row.get(k)]
        if row.get("library") not in LIBRARIES or row.get("severity") not in SEVERITIES:
            problems.append("%s: library must be one of %s and severity one of %s" % (
                where, "/".join(LIBRARIES), "/".join(SEVERITIES)))
        for bound in ("min", "max"):
            value = (row.get("versions") or {}).get(bound)
            if value is not None and parse_version(str(value)) is None:
                problems.append("%s: versions.%s %r is not MAJOR.MINOR.PATCH" % (where, bound, value))
        if row.get("error"):
            try:
                re.compile(row["error"])
            except re.error as exc:
                problems.append("%s: error is not a regular expression (%s)" % (where, exc))
    return problems
