# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Check a ``vllm serve`` argv against a snapshot of vLLM's argument parser (pure functions).

A snapshot is the JSON document of ``data/vllm_flags/vllm-<version>.json``:
``{"version", "flags": {"--flag": {"dest", "choices", "nargs", "action", "default"}},
"aliases": {"--other": "--flag"}, "tool_parsers": [...], "reasoning_parsers": [...]}``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

_SHORT_FLAG = re.compile(r"^-[A-Za-z]")
_NEGATION_PREFIXES = ("--no-", "--disable-")


def is_flag(token):
    """True when ``token`` is an option string (``--x`` or ``-x``), not a value such as ``-1``."""
    return token.startswith("--") or bool(_SHORT_FLAG.match(token))


def canonical_flag(option, snapshot):
    """Map any spelling of an option to the key of ``snapshot['flags']``; None when unknown.

    Underscores equal dashes after the leading ``--`` (vLLM's FlexibleArgumentParser), and a dotted key
    (``--eplb-config.num_redundant_experts``) belongs to its JSON flag (``--eplb-config``).
    """
    name = option.split("=", 1)[0]
    if name.startswith("--"):
        name = "--" + name[2:].replace("_", "-")
    flags = snapshot["flags"]
    aliases = snapshot.get("aliases", {})
    if name in flags:
        return name
    if name in aliases:
        return aliases[name]
    if name.startswith("--") and "." in name:
        base = name.split(".", 1)[0]
        return canonical_flag(base, snapshot)
    return None


def _is_negation(option, canonical):
    name = option.split("=", 1)[0]
    return name != canonical and name.startswith(_NEGATION_PREFIXES)


def split_units(argv):
    """Split an argv (model first) into ``(positional, [(option, [values])])``.

    Values are the tokens following an option up to the next option; ``--x=v`` carries its value inline.
    """
    positional = []
    units = []
    for token in argv:
        if is_flag(token):
            if "=" in token and token.startswith("--"):
                name, value = token.split("=", 1)
                units.append((name, [value]))
            else:
                units.append((token, []))
        elif units:
            units[-1][1].append(token)
        else:
            positional.append(token)
    return positional, units


def _arity(spec, negated):
    """(min, max) number of values an option takes; max None = unbounded."""
    if negated:
        return 0, 0
    nargs = spec.get("nargs")
    action = spec.get("action") or ""
    if nargs == 0 or action in ("_StoreTrueAction", "_StoreFalseAction", "_StoreConstAction", "_CountAction"):
        return 0, 0
    if nargs is None:
        return 1, 1
    if nargs == "?":
        return 0, 1
    if nargs == "*":
        return 0, None
    if nargs == "+":
        return 1, None
    return int(nargs), int(nargs)


# Flags whose argparse ``type`` normalises the value before argparse compares it with the choices (vLLM's
# EngineArgs: --moe-backend is lower-cased with '-' turned into '_'; reference kimi-k3-on-vllm.md 9.2). Every
# other flag is compared exactly, as argparse does: the real parser refuses ``--scheduling-policy PRIORITY``.
NORMALISED_CHOICE_FLAGS = ("--moe-backend",)


def normalised_choice(flag, value):
    """``value`` as vLLM's parser hands it to the choices check of ``flag`` (canonical name)."""
    if flag in NORMALISED_CHOICE_FLAGS:
        return value.lower().replace("-", "_")
    return value


def choice_ok(value, choices, flag=None):
    """argparse's own test: the (type-converted) value is one of the choices exactly."""
    return normalised_choice(flag, value) in [str(c) for c in choices]


def option_name(option):
    """The option string of an argv item as it may be shown: without an inline value or a value written after a
    space in the same item (either may be a secret)."""
    return re.split(r"[=\s]", option, maxsplit=1)[0]


def _value_problems(option, canonical, values, snapshot):
    """Choice and registry problems of an option's values; values are never quoted (one may be a secret)."""
    spec, version, problems = snapshot["flags"][canonical], snapshot.get("version", "?"), []
    choices = spec.get("choices")
    if choices and not _is_negation(option, canonical) and "." not in option_name(option):
        if any(not choice_ok(value, choices, canonical) for value in values):
            problems.append("%s got an invalid choice for vllm serve %s (choose from %s)"
                            % (option, version, ", ".join(str(c) for c in choices)))
    for flag, registry, what in (("--tool-call-parser", "tool_parsers", "tool parser"),
                                 ("--reasoning-parser", "reasoning_parsers", "reasoning parser")):
        if canonical == flag and snapshot.get(registry) and any(v not in snapshot[registry] for v in values):
            problems.append("%s names a %s that is not registered in vllm %s" % (flag, what, version))
    return problems


def _arity_problem(option, canonical, values, snapshot):
    low, high = _arity(snapshot["flags"][canonical], _is_negation(option, canonical))
    if "." in option.split("=", 1)[0]:
        low, high = 1, 1
    if len(values) < low or (high is not None and len(values) > high):
        want = "no value" if high == 0 else ("%d value(s)" % low if low == high else "at least %d value(s)" % low)
        return "%s takes %s in vllm serve %s, got %d" % (option, want, snapshot.get("version", "?"), len(values))
    return None


def check_argv(argv, snapshot, model_positional=True):
    """Return a list of problems (strings) for ``argv``; empty when argparse would accept it.

    ``argv`` is everything after ``vllm serve``; with ``model_positional`` the first token is the model. A problem
    starts with the option it is about and quotes no value.
    """
    problems = []
    positional, units = split_units(argv)
    if model_positional and len(positional) != 1:
        problems.append("expected exactly one positional argument (the model), got %d" % len(positional))
    elif not model_positional and positional:
        problems.append("unexpected positional arguments (%d)" % len(positional))
    version = snapshot.get("version", "?")
    for option, values in units:
        name = option_name(option)
        if re.search(r"\s", option.split("=", 1)[0]):
            problems.append("%s and its value are one item; vllm serve %s reads it as one unrecognized argument"
                            % (name, version))
            continue
        canonical = canonical_flag(option, snapshot)
        if canonical is None:
            problems.append("%s is not accepted by vllm serve %s (unrecognized argument)" % (name, version))
            continue
        arity = _arity_problem(option, canonical, values, snapshot)
        problems += [arity] if arity else _value_problems(option, canonical, values, snapshot)
    return problems


def dedupe_args(argv, snapshot=None):
    """Collapse repeated options to their last occurrence (the recipe's ``dedupeArgs``: later layers win).

    With a snapshot, spellings of the same option (``--enable-x`` / ``--no-enable-x``, ``-tp``) count as one.
    The positional model stays first.
    """
    positional, units = split_units(argv)
    keyed = []
    for option, values in units:
        key = option
        if snapshot is not None:
            key = canonical_flag(option, snapshot) or option
        elif key.startswith("--"):
            key = "--" + key[2:].replace("_", "-")
        keyed.append((key, option, values))
    last = {}
    for index, (key, _option, _values) in enumerate(keyed):
        last[key] = index
    out = list(positional)
    for index, (key, option, values) in enumerate(keyed):
        if last[key] == index:
            out.append(option)
            out.extend(values)
    return out


def flag_value(argv, option, snapshot=None):
    """The values given to ``option`` in ``argv`` (last occurrence), or None when absent."""
    _positional, units = split_units(argv)
    want = canonical_flag(option, snapshot) if snapshot else option
    found = None
    for name, values in units:
        key = canonical_flag(name, snapshot) if snapshot else name
        if key == want:
            found = values
    return found
