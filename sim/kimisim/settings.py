"""Paths, addresses and names every part of the rehearsal cluster shares."""
import os


SIM_DIR = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
REPO = os.path.dirname(SIM_DIR)
STATE = os.environ.get("KIMI_SIM_STATE", os.path.join(SIM_DIR, ".state"))
RUN = "/run/kimi-sim"
ENGINE_ROOT = "/var/lib/kimi-sim/engines"
MODELS_DIR = "/var/lib/kimi-sim/models"
# Commit of the stand-in checkpoint under MODELS_DIR (the sim inventories pin it as kimi_k3_model_revision).
SIM_MODEL_REVISION = "cb244096ec4ee7dbcdec1d8e6595c38c2f69820d"
CACHE = os.environ.get("KIMI_SIM_CACHE", "/var/cache/kimi-sim")
REGISTRY = "127.0.0.1:5000"
REPOS = {"nvidia": REGISTRY + "/vllm/vllm-openai", "rocm": REGISTRY + "/vllm/vllm-openai-rocm"}
# Second registry on the same storage, with htpasswd (bcrypt) authentication: the same images, by the same digests,
# behind a login (tests/integration/test_registry_auth.py). Credentials: sim/.state/registry/auth/credentials.json.
AUTH_REGISTRY = "127.0.0.1:5001"
AUTH_USER = "kimi-sim"
# Self-hosted Hugging Face mirror (olah, from PyPI; sim/install.sh puts it in /opt/kimi-sim/olah) serving, offline,
# a small stand-in model repository simctl creates as a git repo with LFS objects (tests/integration/test_weights.py).
HF_MIRROR = "127.0.0.1:8090"
# olah behind the fault proxy (sim/kimisim/hfproxy.py: `simctl hf-fault throttle=BPS tamper=PATH`): the weights
# tests' endpoint.
HF_FAULT_PROXY = "127.0.0.1:8089"
HF_REPO = "kimi-sim/Kimi-K3-standin"
HF_SHARDS = 4
HF_SHARD_BYTES = 16 * 1024 * 1024
# Site-mirror stand-in: standin-a copied (same manifest bytes, so the same digest) under another repository path.
MIRROR_PREFIX = "mirror/"
VARIANTS = ("standin-a", "standin-b", "standin-broken")
CONTROL = "control"
# Host device nodes the workload containers may be given (all char 1:3, like /dev/null); created if absent.
HOST_DEVICES = ["/dev/kfd", "/dev/dri/renderD128", "/dev/infiniband/uverbs0",
                "/dev/nvidia-caps-imex-channels/channel0"]
HOOK = "nvidia-container-runtime-hook"
VERBOSE = os.environ.get("KIMI_SIM_VERBOSE") == "1"
