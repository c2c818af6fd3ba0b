"""vllm.utils of the stand-in image (argparse_utils only)."""
