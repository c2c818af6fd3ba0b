"""The vllm-router image of the clusters with a router."""
import os
import shutil
import sys
import time

from kimisim.cachekey import hash_paths
from kimisim.images import build_image, pinned_version, push_by_digest
from kimisim.registry import registry_has
from kimisim.settings import CACHE, CONTROL, REGISTRY, SIM_DIR, STATE
from kimisim.util import log, read_json, sh, write_json


ROUTER_REPO = REGISTRY + "/vllm/vllm-router"
ROUTER_DIR = os.path.join(SIM_DIR, "images", "router")
# Wheels for Debian bookworm's CPython 3.11 on x86_64 (the image's python3), whatever python runs simctl.
PIP_TARGET = ["--only-binary=:all:", "--python-version", "3.11", "--implementation", "cp", "--abi", "cp311",
              "--abi", "abi3", "--abi", "none"] + [a for plat in (
                  "manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_5_x86_64",
                  "manylinux1_x86_64") for a in ("--platform", plat)]


def router_version():
    return pinned_version(ROUTER_DIR, "vllm-router")


def router_site(h):
    """pip --target tree of the pinned wheels, cached per requirements hash (PyPI only when not cached yet)."""
    cache = os.path.join(CACHE, "router")
    site = os.path.join(cache, "site-" + h)
    if os.path.isdir(os.path.join(site, "vllm_router")):
        return site
    reqs = os.path.join(ROUTER_DIR, "requirements.txt")
    wheels = os.path.join(cache, "wheels")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    os.makedirs(wheels, exist_ok=True)
    log("fetching the vllm-router wheels (PyPI) into %s" % wheels)
    sh(pip + ["download", "--no-deps", "-d", wheels, "-r", reqs] + PIP_TARGET, timeout=900)
    tmp = site + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    sh(pip + ["install", "--no-index", "--no-deps", "--find-links", wheels, "--target", tmp, "-r", reqs]
       + PIP_TARGET, timeout=900)
    os.replace(tmp, site)
    return site


def ensure_router_image(base_tag, timings):
    """The real vllm-router from PyPI on the sim base, pushed to the sim registry: {"ref": repo@digest, ...}."""
    h = hash_paths([ROUTER_DIR]) + base_tag.split(":")[1][:4]
    path = os.path.join(STATE, "router_image.json")
    rec = read_json(path, {}) or {}
    if rec.get("context_hash") == h and registry_has(rec.get("ref", "x/x@sha256:0")):
        return rec
    t0 = time.time()
    site = router_site(hash_paths([os.path.join(ROUTER_DIR, "requirements.txt")]))
    tag = "%s:%s-sim" % (ROUTER_REPO, router_version())
    ctx = os.path.join(STATE, "build", "router")
    shutil.rmtree(ctx, ignore_errors=True)
    shutil.copytree(ROUTER_DIR, ctx)
    shutil.copytree(site, os.path.join(ctx, "site"), copy_function=os.link)
    log("building router image %s" % tag)
    build_image(CONTROL, tag, ctx, build_args={"BASE_IMAGE": base_tag})
    rec = {"context_hash": h, "tag": tag, "ref": push_by_digest(tag, ROUTER_REPO), "version": router_version()}
    write_json(path, rec)
    shutil.rmtree(ctx, ignore_errors=True)
    timings["router_image_s"] = round(time.time() - t0, 1)
    return rec
