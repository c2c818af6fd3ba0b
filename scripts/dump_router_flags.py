#!/usr/bin/env python3
"""Dump `vllm-router`'s argument parser to data/router_flags/vllm-router-<version>.json.

Run with the Python of an environment where the router is installed (`pip install vllm-router==<version>`; the
parser needs no backend):   python scripts/dump_router_flags.py [--out data/router_flags]

The parser is the one `vllm-router` builds (vllm_router/launch_router.py parse_router_args: an ArgumentParser
with RouterArgs.add_cli_args(parser, use_router_prefix=False)); the schema and layout are those of the vLLM flag
snapshots (scripts/dump_vllm_flags.py: "flags", "aliases"), so plugin_utils.plan.vllm_flags.check_argv reads both.
"""
import argparse
import importlib.util
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def _vllm_dumper():
    spec = importlib.util.spec_from_file_location("dump_vllm_flags", os.path.join(HERE, "dump_vllm_flags.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def router_parser():
    from vllm_router.router_args import RouterArgs
    parser = argparse.ArgumentParser(prog="vllm-router")
    RouterArgs.add_cli_args(parser, use_router_prefix=False)
    return parser


def snapshot():
    from importlib.metadata import version
    flags, aliases = _vllm_dumper().dump(router_parser())
    return {"version": version("vllm-router"), "flags": dict(sorted(flags.items())),
            "aliases": dict(sorted(aliases.items()))}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(HERE), "data", "router_flags"),
                    help="directory that receives vllm-router-<version>.json")
    args = ap.parse_args()
    doc = snapshot()
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "vllm-router-%s.json" % doc["version"])
    with open(path, "w") as handle:
        handle.write(_vllm_dumper().render(doc))
    print("wrote %s (%d flags)" % (path, len(doc["flags"])))


if __name__ == "__main__":
    main()
