# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Plain-text and Markdown tables of the reports (pure functions). Shared by the smoke report, its full-profile
sections and the capacity curve, which is why they live outside module_utils/smoke: the sections are imported by the
report, and the capacity package builds on smoke, so a table helper inside either would close an import cycle."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


def markdown_table(header, rows):
    """A Markdown table; ``|`` in a cell is escaped and a newline becomes a space."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _col in header) + "|"]
    for r in rows:
        lines.append("| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in r) + " |")
    return "\n".join(lines)


def text_table(header, rows):
    """A plain-text table, columns padded to their widest cell."""
    cols = [header] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cols) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cols)
