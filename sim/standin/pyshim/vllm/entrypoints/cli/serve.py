"""vllm.entrypoints.cli.serve of the stand-in image: `ServeSubcommand` takes the serve argv whole and validates it
with the stand-in's flag snapshot of the release it follows (VLLM_STANDIN_VERSION), failing the way argparse fails
(`vllm serve: error: unrecognized arguments: --x` on stderr, exit status 2), as the stand-in's `vllm serve` does."""
import argparse
import os
import sys

from vllm_standin import flags as flagmod
from vllm_standin.main import DEFAULT_VERSION


class ServeSubcommand(object):
    name = "serve"

    def subparser_init(self, subparsers):
        parser = subparsers.add_parser("serve", usage=flagmod.USAGE)
        parser.add_argument("serve_argv", nargs=argparse.REMAINDER)
        return parser

    def validate(self, args):
        version = os.environ.get("VLLM_STANDIN_VERSION", DEFAULT_VERSION)
        try:
            flagmod.parse_args(list(args.serve_argv), flagmod.Snapshot(flagmod.load_snapshot(version)))
        except flagmod.ArgError as exc:
            sys.stderr.write("%s\n%s: error: %s\n" % (flagmod.USAGE, flagmod.PROG, exc.message or "no argv"))
            raise SystemExit(exc.code)
