"""The stand-in image's `vllm` package: the few names the collection's fabric job reads from a real vLLM image
(`vllm.__version__`, the `vllm serve` parser, `vllm.envs`, the platform), answered by the stand-in's own flag
snapshots (sim/standin/vllm_standin/flags.py). It lets the rehearsal's GPU profiles run the job's image check
(kimi_k3_vllm_version: image) as the cpu profile runs it against the real vLLM. It serves nothing: the image's
entry point is the stand-in's `vllm` command (sim/standin/bin/vllm)."""
import os

from vllm_standin.main import DEFAULT_VERSION

# what `vllm --version` of the same image prints
__version__ = os.environ.get("VLLM_STANDIN_REPORTED_VERSION") or os.environ.get("VLLM_STANDIN_VERSION") \
    or DEFAULT_VERSION
