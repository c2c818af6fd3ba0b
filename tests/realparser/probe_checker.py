"""Differential probes: the plan's flag checker (plugins/plugin_utils/plan/vllm_flags.py) against the real parser.

For every flag and alias of a shipped snapshot, a few one-flag argvs are built from the snapshot's own data (the bare
switch, each choice, a choice in other case or with dashes, the `--flag=value` and underscore spellings, a value
given to a switch) and judged by check_argv here; parse_plans.py parses the same argvs with the real parser
(parse only, without the serve validation: cross-flag rules are not the checker's job). A probe the checker
accepts and the real parser refuses is an argv the plan would let through and `vllm serve` would reject.
Valued flags without choices get a value only when their default is a number (the snapshot has no types).
Informational: disagreements are listed in the report, they do not fail the stage.
"""
SKIP = ("--config",)  # reads a file named by its value
MODEL = "moonshotai/Kimi-K3"


def _value_for(spec):
    default = spec.get("default")
    if isinstance(default, bool) or not isinstance(default, (int, float)):
        return None
    return str(default)


def _is_switch(spec):
    return spec.get("nargs") == 0


def _variants(flag, spec):
    """(label, argv tail) pairs for one flag."""
    out = []
    if _is_switch(spec):
        out += [("switch", [flag]), ("switch with a value", [flag, "true"])]
    for choice in spec.get("choices") or []:
        out.append(("choice", [flag, choice]))
        out.append(("choice inline", ["%s=%s" % (flag, choice)]))
        if choice.upper() != choice:
            out.append(("choice in upper case", [flag, choice.upper()]))
        if "_" in choice:
            out.append(("choice with dashes", [flag, choice.replace("_", "-")]))
    value = None if spec.get("choices") or _is_switch(spec) else _value_for(spec)
    if value is not None and spec.get("nargs") in (None, "?", "+", "*"):
        out.append(("numeric value", [flag, value]))
    return out


def probes(snapshot):
    """[{"label", "argv"}] for every flag and alias of a snapshot."""
    out = []
    flags = snapshot.get("flags", {})
    for flag in sorted(flags):
        if flag in SKIP:
            continue
        for label, tail in _variants(flag, flags[flag]):
            out.append({"label": label, "argv": [MODEL] + tail})
            if label in ("switch", "choice", "numeric value") and "-" in flag[2:]:
                underscored = "--" + flag[2:].replace("-", "_")
                out.append({"label": "underscore spelling", "argv": [MODEL, underscored] + tail[1:]})
    for alias, target in sorted(snapshot.get("aliases", {}).items()):
        spec = flags.get(target, {})
        first = (spec.get("choices") or [None])[0]
        negation = alias.startswith(("--no-", "--disable-")) and not target.startswith("--disable-")
        if _is_switch(spec) or negation:
            out.append({"label": "alias", "argv": [MODEL, alias]})
        elif first is not None or _value_for(spec) is not None:
            out.append({"label": "alias", "argv": [MODEL, alias, first if first is not None else _value_for(spec)]})
    return out


def judged_probes(snapshot, check_argv):
    """The probes with the checker's verdict (accepted: no problem reported)."""
    out = []
    for probe in probes(snapshot):
        problems = check_argv(probe["argv"], snapshot)
        out.append(dict(probe, checker=not problems, checker_message=problems[0] if problems else None))
    return out


def disagreements(judged, parsed):
    """Probes on which the checker and the real parser disagree, the lax ones (real parser refuses) first."""
    verdicts = dict((tuple(p["vllm_args"]), p) for p in parsed)
    out = []
    for probe in judged:
        real = verdicts.get(tuple(probe["argv"]))
        if real is None or real["accepted"] == probe["checker"]:
            continue
        out.append({"label": probe["label"], "argv": probe["argv"], "checker": probe["checker"],
                    "real": real["accepted"], "message": real["message"] or probe["checker_message"]})
    return sorted(out, key=lambda d: (d["real"], d["argv"]))
