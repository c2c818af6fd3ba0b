# -*- coding: utf-8 -*-
"""Summary statistics of the smoke and capacity figures (``numpy.percentile``'s default interpolation). No I/O."""
from __future__ import annotations

import math


def percentile(values, pct):
    """Linear-interpolated percentile (same as ``numpy.percentile`` default); None for no values."""
    vals = sorted(v for v in values if v is not None)
    if not vals:
        return None
    rank = (len(vals) - 1) * (pct / 100.0)
    lo = int(math.floor(rank))
    hi = min(lo + 1, len(vals) - 1)
    return vals[lo] + (vals[hi] - vals[lo]) * (rank - lo)


def stats(values, digits=6):
    """``{"n", "mean", "p50", "p90", "p99", "min", "max"}`` of ``values`` (None when empty)."""
    vals = [v for v in values if v is not None]
    if not vals:
        return {"n": 0, "mean": None, "p50": None, "p90": None, "p99": None, "min": None, "max": None}
    return {"n": len(vals), "mean": round(sum(vals) / len(vals), digits),
            "p50": round(percentile(vals, 50), digits), "p90": round(percentile(vals, 90), digits),
            "p99": round(percentile(vals, 99), digits), "min": round(min(vals), digits),
            "max": round(max(vals), digits)}


def parse_number(text):
    """'1,234,567' / '1.18' / '2e3' -> int/float; None for anything else ('', 'None', 'nan', 'auto', None)."""
    s = str(text).replace(",", "").strip()
    try:
        f = float(s)
    except ValueError:
        return None
    if math.isnan(f):
        return None
    return int(f) if f.is_integer() and "." not in s and "e" not in s.lower() else f
