"""vllm.utils.argparse_utils of the stand-in image: the top-level `vllm` parser is plain argparse here."""
import argparse


class FlexibleArgumentParser(argparse.ArgumentParser):
    """vLLM's parser class; the stand-in's `serve` subcommand validates its own argv (entrypoints/cli/serve.py)."""
