"""argparse-like validation of `vllm serve` argv against a flag snapshot (data/vllm_flags/vllm-<version>.json).

Only stdlib; Python >= 3.9. Errors are raised as ArgError(message, exit_code) with argparse's wording.
"""
import json
import os
import re

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # sim/standin (or /opt/vllm-standin)
USAGE = "usage: vllm serve [model_tag] [options]"
PROG = "vllm serve"


class ArgError(Exception):
    def __init__(self, message, code=2):
        Exception.__init__(self, message)
        self.message = message
        self.code = code


def flags_dir():
    """Where the snapshots live: $VLLM_STANDIN_FLAGS_DIR, <standin>/flags (image), <repo>/data/vllm_flags."""
    env = os.environ.get("VLLM_STANDIN_FLAGS_DIR")
    if env:
        return env
    for cand in (os.path.join(HERE, "flags"),
                 os.path.join(os.path.dirname(os.path.dirname(HERE)), "data", "vllm_flags")):
        if os.path.isdir(cand):
            return cand
    return os.path.join(HERE, "flags")


def load_snapshot(version):
    path = os.path.join(flags_dir(), "vllm-%s.json" % version)
    if not os.path.isfile(path):
        raise ArgError("vllm-standin: no flag snapshot for version %s (looked for %s)" % (version, path), 1)
    with open(path) as fh:
        return json.load(fh)


def _stem(opt):
    return opt.lstrip("-")


def _polarity(name):
    """+1 for a positive spelling, -1 for a negation; counts leading no-/disable- prefixes."""
    s = _stem(name)
    sign = 1
    while True:
        if s.startswith("no-"):
            s, sign = s[3:], -sign
        elif s.startswith("disable-"):
            s, sign = s[8:], -sign
        elif s.startswith("enable-"):
            s = s[7:]
        else:
            return sign, s


# Flags whose values the stand-in interprets; the type is enforced like argparse's type=int/float.
INT_FLAGS = {
    "port", "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "data_parallel_size_local",
    "data_parallel_start_rank", "data_parallel_rank", "data_parallel_rpc_port", "nnodes", "node_rank",
    "master_port", "max_num_seqs", "max_num_batched_tokens", "api_server_count", "decode_context_parallel_size",
    "block_size", "seed",
}
FLOAT_FLAGS = {"gpu_memory_utilization"}


class Snapshot(object):
    def __init__(self, data):
        self.version = data.get("version")
        self.flags = data["flags"]
        self.aliases = data.get("aliases", {})
        self.tool_parsers = data.get("tool_parsers") or []
        self.reasoning_parsers = data.get("reasoning_parsers") or []
        # option string -> (key, sign)
        self.lookup = {}
        self.spellings = {}
        for key in self.flags:
            self.lookup[key] = (key, 1)
            self.spellings.setdefault(key, [key])
        for alias, key in self.aliases.items():
            if key not in self.flags:
                continue
            sign = 1
            if self.flags[key].get("nargs") == 0 and alias.startswith("--"):
                sa, ba = _polarity(alias)
                sk, bk = _polarity(key)
                sign = sa * sk if ba == bk else 1
            self.lookup[alias] = (key, sign)
            self.spellings[key].append(alias)

    def action_name(self, key):
        return "/".join(self.spellings.get(key, [key]))


def _norm_option(tok):
    """vLLM's FlexibleArgumentParser: underscores in long option names equal dashes (value part untouched)."""
    if tok.startswith("--"):
        name, eq, val = tok.partition("=")
        base, dot, sub = name.partition(".")  # dotted JSON keys keep their spelling
        return base.replace("_", "-") + dot + sub + eq + val
    return tok


def _convert(snap, key, spec, value):
    dest = spec["dest"]
    if spec.get("choices") is not None and value not in [str(c) for c in spec["choices"]]:
        choices = ", ".join(repr(str(c)) for c in spec["choices"])
        raise ArgError("argument %s: invalid choice: %r (choose from %s)" % (snap.action_name(key), value, choices))
    default = spec.get("default")
    kind = None
    if dest in INT_FLAGS or (isinstance(default, int) and not isinstance(default, bool) and spec.get("nargs") is None
                             and spec.get("action") == "_StoreAction" and dest not in FLOAT_FLAGS):
        kind = int
    elif dest in FLOAT_FLAGS or isinstance(default, float):
        kind = float
    if kind is not None:
        try:
            return kind(value)
        except ValueError:
            raise ArgError("argument %s: invalid %s value: %r" % (snap.action_name(key), kind.__name__, value))
    return value


def _is_value(tok):
    """A token argparse takes as a value, not an option: no leading '-', a lone '-', or a negative number."""
    return not tok.startswith("-") or tok == "-" or re.match(r"^-\d", tok) is not None


def _defaults(snap):
    values = {}
    for spec in snap.flags.values():
        d = spec.get("default")
        values[spec["dest"]] = None if d == "==SUPPRESS==" else d
    return values


def _resolve(snap, name):
    """(option name, dotted sub-key or None): `--eplb-config.num_redundant_experts` names `--eplb-config`."""
    if name not in snap.lookup and name.startswith("--") and "." in name:
        base, _sep, dotted = name.partition(".")
        if base in snap.lookup:
            return base, dotted
    return name, None


def _store_dotted(snap, key, values, dotted, argv, i, inline):
    """--eplb-config.num_redundant_experts 32 -> merged into a JSON dict for --eplb-config; returns the next index."""
    if inline is not None:
        val = inline
    elif i < len(argv) and not (argv[i].startswith("-") and not re.match(r"^-\d", argv[i])):
        val = argv[i]
        i += 1
    else:
        raise ArgError("argument %s: expected one argument" % snap.action_name(key))
    dest = snap.flags[key]["dest"]
    cur = values.get(dest)
    cur = cur if isinstance(cur, dict) else {}
    try:
        cur[dotted] = json.loads(val)
    except ValueError:
        cur[dotted] = val
    values[dest] = cur
    return i


def _store_switch(snap, key, sign, values, inline):
    spec = snap.flags[key]
    if inline is not None:
        raise ArgError("argument %s: ignored explicit argument %r" % (snap.action_name(key), inline))
    values[spec["dest"]] = False if spec.get("action") == "_StoreFalseAction" else sign > 0


def _collect(argv, i, nargs, inline):
    """The values an option takes from argv[i:] (or its inline `=value`) and the next index."""
    if inline is not None:
        return [inline], i
    vals = []
    while i < len(argv):
        nxt = argv[i]
        if nxt.startswith("-") and not re.match(r"^-\d", nxt) and nxt != "-":
            break
        vals.append(nxt)
        i += 1
        if nargs in (None, "?"):
            break
    return vals, i


def _store_values(snap, key, values, vals):
    spec = snap.flags[key]
    nargs, dest = spec.get("nargs"), spec["dest"]
    if nargs is None and len(vals) != 1:
        raise ArgError("argument %s: expected one argument" % snap.action_name(key))
    if nargs == "+" and not vals:
        raise ArgError("argument %s: expected at least one argument" % snap.action_name(key))
    conv = [_convert(snap, key, spec, v) for v in vals]
    if nargs in ("+", "*"):
        values[dest] = conv
    elif spec.get("action") == "_AppendAction":
        values[dest] = list(values.get(dest) or []) + conv
    elif nargs == "?":
        values[dest] = conv[0] if conv else True
    else:
        values[dest] = conv[0]


def _option(snap, argv, i, values, explicit, extras):
    """Apply the option at argv[i]; returns the index after it and its values. Unknown options go to extras."""
    name, has_eq, inline = _norm_option(argv[i]).partition("=")
    inline = inline if has_eq else None
    if name in ("-h", "--help"):
        raise ArgError(None, 0)
    name, dotted = _resolve(snap, name)
    if name not in snap.lookup:
        extras.append(argv[i])
        return i + 1
    key, sign = snap.lookup[name]
    i += 1
    if dotted is not None:
        i = _store_dotted(snap, key, values, dotted, argv, i, inline)
    elif snap.flags[key].get("nargs") == 0:
        _store_switch(snap, key, sign, values, inline)
    else:
        vals, i = _collect(argv, i, snap.flags[key].get("nargs"), inline)
        _store_values(snap, key, values, vals)
    explicit.append(snap.flags[key]["dest"])
    return i


def parse_args(argv, snap):
    """Parse `serve` argv (without the leading 'serve'). Returns (model_tag, values_by_dest, explicit_dests).

    Raises ArgError(code=2) with argparse's message (caller prints usage + "vllm serve: error: ...").
    """
    values = _defaults(snap)
    explicit, positionals, extras = [], [], []
    argv = list(argv)
    only_positional = False
    i = 0
    while i < len(argv):
        tok = argv[i]
        if only_positional or _is_value(tok):
            # argparse keeps encounter order of leftovers
            (extras if positionals else positionals).append(tok)
            i += 1
        elif tok == "--":
            only_positional = True
            i += 1
        else:
            i = _option(snap, argv, i, values, explicit, extras)
    if extras:
        raise ArgError("unrecognized arguments: %s" % " ".join(extras))
    return (positionals[0] if positionals else None), values, explicit


def parse_human_int(value):
    """vLLM's human_readable_int: 1k=1000, 1K=1024, 25.6k, 1M=1048576; also -1/auto (returns -1)."""
    s = str(value).strip()
    if s.lower() == "auto" or s == "-1":
        return -1
    m = re.match(r"^(\d+(?:\.\d+)?)([kKmMgGtT])$", s)
    if m:
        num, suffix = m.group(1), m.group(2)
        exp = "kmgt".index(suffix.lower()) + 1
        if suffix.islower():
            return int(float(num) * 1000 ** exp)
        if "." in num:
            raise ValueError("Decimals are not allowed with binary suffixes like %s" % suffix)
        return int(num) * 1024 ** exp
    return int(s)
