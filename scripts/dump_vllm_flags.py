#!/usr/bin/env python3
"""Dump `vllm serve`'s argument parser to data/vllm_flags/vllm-<version>.json.

Run in an environment where the target vLLM release is installed (CPU wheels suffice; the parser does not
touch a GPU):   python scripts/dump_vllm_flags.py [--out data/vllm_flags]

Schema: {"version", "flags": {"--flag": {"dest", "choices", "nargs", "action", "default"}},
"aliases": {"--other-spelling": "--flag"}, "tool_parsers": [...], "reasoning_parsers": [...]}.
Hidden legacy spellings that some releases accept without listing them in an action's option strings
(0.33.0's `--no-enable-*`) are not visible to this script; keep them from the previous snapshot with --merge-aliases.
"""
import argparse
import json
import os
import sys


def build_serve_parser():
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # older releases
        from vllm.utils import FlexibleArgumentParser
    from vllm.entrypoints.openai.cli_args import make_arg_parser
    return make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))


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
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(v, (bool, int, float, str)) for v in value):
        return list(value)
    return str(value)


def dump(parser):
    flags, aliases = {}, {}
    for action in parser._actions:
        longs = [o for o in action.option_strings if o.startswith("--")]
        if not longs or action.dest == "help":
            continue
        key = longs[0]
        flags[key] = {"dest": action.dest, "choices": plain(list(action.choices)) if action.choices else None,
                      "nargs": action.nargs, "action": type(action).__name__, "default": plain(action.default)}
        for other in action.option_strings:
            if other != key:
                aliases[other] = key
    return flags, aliases


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                                  "data", "vllm_flags"))
    ap.add_argument("--merge-aliases", help="previous snapshot whose hidden aliases are kept when their target exists")
    args = ap.parse_args()
    import vllm
    version = vllm.__version__.split("+")[0]
    flags, aliases = dump(build_serve_parser())
    if args.merge_aliases:
        with open(args.merge_aliases) as handle:
            previous = json.load(handle)
        for alias, target in previous.get("aliases", {}).items():
            if target in flags and alias not in flags:
                aliases.setdefault(alias, target)
    tools, reasoning = parser_registries()
    doc = {"version": version, "flags": dict(sorted(flags.items())), "aliases": dict(sorted(aliases.items())),
           "tool_parsers": tools, "reasoning_parsers": reasoning}
    path = os.path.join(args.out, "vllm-%s.json" % version)
    with open(path, "w") as handle:
        json.dump(doc, handle, indent=1, sort_keys=False)
        handle.write("\n")
    print("wrote %s: %d flags, %d aliases, %d tool parsers" % (path, len(flags), len(aliases), len(tools)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
