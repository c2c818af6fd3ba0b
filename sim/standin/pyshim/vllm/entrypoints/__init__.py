"""vllm.entrypoints of the stand-in image."""
