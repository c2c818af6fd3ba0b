"""vllm.entrypoints.cli.serve of the stand-in image: `ServeSubcommand` takes the serve argv whole and validates it
with the stand-in's flag snapshot of the release it follows (VLLM_STANDIN_VERSION), failing the way argparse fails
(`vllm serve: error: unrecognized arguments: --x` on stderr, exit status 2), as the stand-in's `vllm serve` does."""
import argparse
import os

from vllm_standin import flags as flagmod
from vllm_standin import main


class ServeSubcommand(object):
    name = "serve"

    def subparser_init(self, subparsers):
        parser = subparsers.add_parser("serve", usage=flagmod.USAGE)
        parser.add_argument("serve_argv", nargs=argparse.REMAINDER)
        return parser

    def validate(self, args):
        # the stand-in's own `vllm serve` parse: it prints argparse's refusal and returns the exit status
        parsed = main._parse(list(args.serve_argv), os.environ.get("VLLM_STANDIN_VERSION", main.DEFAULT_VERSION))
        if not isinstance(parsed, tuple):
            raise SystemExit(parsed)
