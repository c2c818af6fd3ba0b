#!/usr/bin/env python3
"""Dump `vllm serve`'s argument parser to data/vllm_flags/vllm-<version>.json.

Run with the Python of an environment where the target vLLM release is installed (PyPI's wheels suffice; the
parser touches no GPU):   python scripts/dump_vllm_flags.py [--out data/vllm_flags]
scripts/realparser.sh does this for every supported release in its own cached venv and diffs the result against
the shipped snapshot.

The parser is the one `vllm serve` itself builds: a FlexibleArgumentParser with the `serve` subcommand of
vllm/entrypoints/cli/serve.py (ServeSubcommand.subparser_init -> make_arg_parser). On a machine without an
accelerator vLLM resolves no platform and building the parser fails ("Failed to infer device type",
vllm/config/device.py): force_cpu_platform() selects the CPU platform first, the way vLLM does it itself
(VLLM_TARGET_DEVICE=cpu in vllm/platforms/__init__.py cpu_platform_plugin since 0.28; for older releases the
CpuPlatform assignment of `vllm bench` in vllm/entrypoints/cli/main.py).

Schema: {"version", "flags": {"--flag": {"dest", "choices", "nargs", "action", "default"}},
"aliases": {"--other-spelling": "--flag"}, "tool_parsers": [...], "reasoning_parsers": [...]}.
Aliases are every option string the parser has registered for an action other than the flag's key, including
spellings hidden from --help (0.33.0's `--no-enable-*` of EnableDisableAction, vllm/utils/argparse_utils.py).
"""
import argparse
import json
import os
import sys


def force_cpu_platform():
    """Make vLLM resolve the CPU platform on a machine without an accelerator (see the module docstring)."""
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    from vllm import platforms
    if platforms.current_platform.is_unspecified():
        from vllm.platforms.cpu import CpuPlatform
        platforms.current_platform = CpuPlatform()
    return type(platforms.current_platform).__name__


def _flexible_parser_class():
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # older releases
        from vllm.utils import FlexibleArgumentParser
    return FlexibleArgumentParser


def build_serve_cli():
    """(top-level parser, serve sub-parser, ServeSubcommand) as `vllm serve` builds them.

    Parse `["serve", MODEL, *flags]` with the top-level parser (FlexibleArgumentParser.parse_args rewrites
    underscores, `--model` and `-O` only there), then call the subcommand's validate(args) as `vllm` does before
    it dispatches. Never call its cmd(): that starts the engine.
    """
    force_cpu_platform()
    parser_class = _flexible_parser_class()
    from vllm.entrypoints.cli.serve import ServeSubcommand
    top = parser_class(prog="vllm", description="vLLM CLI")
    subparsers = top.add_subparsers(required=False, dest="subparser")
    command = ServeSubcommand()
    serve = command.subparser_init(subparsers)
    return top, serve, command


def build_serve_parser():
    """The `vllm serve` sub-parser alone (its actions are what the snapshot lists)."""
    return build_serve_cli()[1]


def parser_registries():
    tools, reasoning = [], []
    try:
        from vllm.tool_parsers import ToolParserManager
    except ImportError:
        try:
            from vllm.entrypoints.openai.tool_parsers import ToolParserManager
        except ImportError:
            ToolParserManager = None
    if ToolParserManager is not None:
        tools = sorted(getattr(ToolParserManager, "list_registered", lambda: ToolParserManager.tool_parsers)())
    try:
        from vllm.reasoning import ReasoningParserManager
        reasoning = sorted(getattr(ReasoningParserManager, "list_registered",
                                   lambda: ReasoningParserManager.reasoning_parsers)())
    except ImportError:
        pass
    return list(tools), list(reasoning)


def plain(value):
    """A default as JSON: plain values, lists and string-keyed mappings as they are, other objects as repr()."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return dict((k, plain(v)) for k, v in value.items())
    return repr(value)


def plain_choices(choices):
    """Choices as the strings an argv carries (argparse compares after type conversion: 16 is listed as "16")."""
    return [c if isinstance(c, str) else str(c) for c in choices] if choices else None


def _flag_key(action):
    longs = [o for o in action.option_strings if o.startswith("--")]
    return longs[0] if longs and action.dest != "help" else None


def dump(parser):
    """({flag: fields}, {alias: flag}) of a parser: every option string it accepts appears exactly once."""
    flags, keys = {}, {}
    for action in parser._actions:
        key = _flag_key(action)
        if key is None:
            continue
        keys[id(action)] = key
        flags[key] = {"dest": action.dest, "choices": plain_choices(action.choices),
                      "nargs": action.nargs, "action": type(action).__name__, "default": plain(action.default)}
    aliases = {}
    for option, action in parser._option_string_actions.items():
        key = keys.get(id(action))
        if key is not None and option != key:
            aliases[option] = key
    return flags, aliases


def snapshot(parser=None):
    """The snapshot document of the installed vLLM release."""
    import vllm
    flags, aliases = dump(parser if parser is not None else build_serve_parser())
    tools, reasoning = parser_registries()
    return {"version": vllm.__version__.split("+")[0], "flags": dict(sorted(flags.items())),
            "aliases": dict(sorted(aliases.items())), "tool_parsers": tools, "reasoning_parsers": reasoning}


def render(doc):
    """The snapshot file's text: one line per flag and alias (the layout of the shipped files, diff-friendly)."""
    lines = ["{"]
    keys = list(doc)
    for i, key in enumerate(keys):
        value, comma = doc[key], "," if i < len(keys) - 1 else ""
        if isinstance(value, dict) and value:
            lines.append(" %s: {" % json.dumps(key))
            items = list(value.items())
            lines += ["  %s: %s%s" % (json.dumps(k), json.dumps(v), "," if j < len(items) - 1 else "")
                      for j, (k, v) in enumerate(items)]
            lines.append(" }" + comma)
        else:
            lines.append(" %s: %s%s" % (json.dumps(key), json.dumps(value), comma))
    return "\n".join(lines + ["}"]) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                                  "data", "vllm_flags"),
                    help="directory that receives vllm-<version>.json")
    args = ap.parse_args()
    doc = snapshot()
    path = os.path.join(args.out, "vllm-%s.json" % doc["version"])
    with open(path, "w") as handle:
        handle.write(render(doc))
    print("wrote %s: %d flags, %d aliases, %d tool parsers, %d reasoning parsers"
          % (path, len(doc["flags"]), len(doc["aliases"]), len(doc["tool_parsers"]), len(doc["reasoning_parsers"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
