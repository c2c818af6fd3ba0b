"""Compare a shipped flag snapshot (data/vllm_flags/vllm-<v>.json) with one regenerated from the real parser.

Differences that are only ordering (mapping keys, the order of choices, of the parser registries or of list
defaults) do not count. Everything else is listed, one readable line per difference, from the point of view of
the real parser: "+" is in the real parser and missing from the snapshot, "-" is in the snapshot and unknown
to the real parser, "~" changed.
"""

FIELDS = ("dest", "choices", "nargs", "action", "default")
LISTS = ("tool_parsers", "reasoning_parsers")


def _order_free(value):
    """A comparable form of a JSON value in which list and key order do not matter."""
    if isinstance(value, dict):
        return tuple(sorted((k, _order_free(v)) for k, v in value.items()))
    if isinstance(value, list):
        return ("__list__",) + tuple(sorted((_order_free(v) for v in value), key=repr))
    return value


def _set_diff(name, shipped, real):
    shipped, real = set(shipped or ()), set(real or ())
    parts = []
    if real - shipped:
        parts.append("+%s" % sorted(real - shipped))
    if shipped - real:
        parts.append("-%s" % sorted(shipped - real))
    return "%s %s" % (name, " ".join(parts)) if parts else None


def _flag_changes(flag, shipped, real):
    changes = []
    for field in FIELDS:
        a, b = shipped.get(field), real.get(field)
        if _order_free(a) == _order_free(b):
            continue
        if field == "choices" and isinstance(a, list) and isinstance(b, list):
            changes.append(_set_diff("choices", a, b))
        else:
            changes.append("%s %s -> %s" % (field, _short(a), _short(b)))
    return "~ %s: %s" % (flag, "; ".join(changes)) if changes else None


def _short(value, limit=80):
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def diff_snapshots(shipped, real):
    """Readable differences between two snapshot documents ([] when they agree up to ordering)."""
    lines = []
    if shipped.get("version") != real.get("version"):
        lines.append("~ version: %s -> %s" % (shipped.get("version"), real.get("version")))
    sf, rf = shipped.get("flags", {}), real.get("flags", {})
    lines += ["+ flag %s (accepted by the real parser, missing from the snapshot)" % f
              for f in sorted(set(rf) - set(sf))]
    lines += ["- flag %s (in the snapshot, unknown to the real parser)" % f for f in sorted(set(sf) - set(rf))]
    lines += [c for c in (_flag_changes(f, sf[f], rf[f]) for f in sorted(set(sf) & set(rf))) if c]
    sa, ra = shipped.get("aliases", {}), real.get("aliases", {})
    lines += ["+ alias %s -> %s (missing from the snapshot)" % (a, ra[a]) for a in sorted(set(ra) - set(sa))]
    lines += ["- alias %s -> %s (unknown to the real parser)" % (a, sa[a]) for a in sorted(set(sa) - set(ra))]
    lines += ["~ alias %s: -> %s, real parser -> %s" % (a, sa[a], ra[a])
              for a in sorted(set(sa) & set(ra)) if sa[a] != ra[a]]
    lines += ["~ " + d for d in (_set_diff(name, shipped.get(name), real.get(name)) for name in LISTS) if d]
    for key in sorted((set(shipped) | set(real)) - {"version", "flags", "aliases"} - set(LISTS)):
        if _order_free(shipped.get(key)) != _order_free(real.get(key)):
            lines.append("~ %s: %s -> %s" % (key, _short(shipped.get(key)), _short(real.get(key))))
    return lines


def compare(shipped, real):
    """{"same": bool, "differences": [...], "counts": {...}}: same is True when only ordering differs."""
    differences = diff_snapshots(shipped, real)
    return {"same": not differences, "differences": differences,
            "counts": {"flags": len(real.get("flags", {})), "aliases": len(real.get("aliases", {})),
                       "tool_parsers": len(real.get("tool_parsers", [])),
                       "reasoning_parsers": len(real.get("reasoning_parsers", []))}}
