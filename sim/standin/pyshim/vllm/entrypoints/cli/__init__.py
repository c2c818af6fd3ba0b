"""vllm.entrypoints.cli of the stand-in image."""
