"""Base rootfs import, the node image and the stand-in vLLM images."""
import json
import os
import shutil
import time

from kimisim.cachekey import hash_paths
from kimisim.registry import registry_has
from kimisim.settings import CACHE, CONTROL, REPO, REPOS, SIM_DIR, STATE
from kimisim.util import die, dk, log, read_json, sh, write_file, write_json


BASE_INCLUDE_HASH_FILES = [os.path.join(SIM_DIR, "images", "base", "build-rootfs.sh")]


def base_tarball():
    h = hash_paths(BASE_INCLUDE_HASH_FILES)
    return os.path.join(CACHE, "base-bookworm-minbase-%s.tar.gz" % h), h


def ensure_base_image(timings):
    tar, h = base_tarball()
    tag = "kimi-sim/base:" + h
    if dk(CONTROL, "image", "inspect", tag, check=False).returncode == 0:
        return tag
    if not os.path.exists(tar):
        os.makedirs(CACHE, exist_ok=True)
        log("building base rootfs with debootstrap (cached afterwards in %s)" % CACHE)
        t0 = time.time()
        sh([os.path.join(SIM_DIR, "images", "base", "build-rootfs.sh"), tar], capture=False)
        timings["debootstrap_s"] = round(time.time() - t0, 1)
    t0 = time.time()
    dk(CONTROL, "import", "--change", "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
       "--change", "CMD [\"/bin/bash\"]", tar, tag)
    timings["base_import_s"] = round(time.time() - t0, 1)
    return tag


def _copytree(src, dst):
    if os.path.isdir(src):
        shutil.copytree(src, dst, symlinks=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache", "tests"))
    else:
        os.makedirs(dst, exist_ok=True)
        with open(os.path.join(dst, ".kimi-sim-absent"), "w") as f:
            f.write("source directory was absent when this image was built\n")


def build_image(engine, tag, ctx_dir, dockerfile=None, build_args=None):
    cmd = ["build", "--network", "host", "-q", "-t", tag]
    if dockerfile:
        cmd += ["-f", dockerfile]
    for k, v in (build_args or {}).items():
        cmd += ["--build-arg", "%s=%s" % (k, v)]
    dk(engine, *cmd, ctx_dir, build=True, timeout=900)


def pinned_version(image_dir, package):
    """The version of ``package`` that the image directory's requirements.txt pins (``package==version``)."""
    reqs = os.path.join(image_dir, "requirements.txt")
    with open(reqs) as f:
        for line in f:
            if line.startswith(package + "=="):
                return line.strip().split("==", 1)[1]
    die("%s does not pin %s" % (os.path.relpath(reqs, REPO), package))


def push_by_digest(tag, repo, timeout=600):
    """Push ``tag`` to the sim registry; the ``repo@sha256:...`` reference it is pulled by from then on."""
    dk(CONTROL, "push", tag, timeout=timeout)
    digests = json.loads(dk(CONTROL, "image", "inspect", "--format", "{{json .RepoDigests}}", tag).stdout)
    ref = [d for d in digests if d.startswith(repo + "@")]
    if not ref:
        raise RuntimeError("no RepoDigest for %s after push: %s" % (tag, digests))
    return ref[0]


def node_image_hash(base_tag):
    return hash_paths([os.path.join(SIM_DIR, "images", "node"), os.path.join(SIM_DIR, "nodetools"),
                       os.path.join(SIM_DIR, "profiles")]) + base_tag.split(":")[1][:4]


def ensure_node_image(base_tag):
    h = node_image_hash(base_tag)
    tag = "kimi-sim/node:" + h
    if dk(CONTROL, "image", "inspect", tag, check=False).returncode == 0:
        return tag
    log("building node image %s" % tag)
    ctx = os.path.join(STATE, "build", "node")
    shutil.rmtree(ctx, ignore_errors=True)
    shutil.copytree(os.path.join(SIM_DIR, "images", "node"), ctx, symlinks=True)
    _copytree(os.path.join(SIM_DIR, "nodetools"), os.path.join(ctx, "nodetools"))
    _copytree(os.path.join(SIM_DIR, "profiles"), os.path.join(ctx, "profiles"))
    build_image(CONTROL, tag, ctx, build_args={"BASE_IMAGE": base_tag})
    return tag


def standin_hash(base_tag):
    return hash_paths([os.path.join(SIM_DIR, "images", "standin"), os.path.join(SIM_DIR, "standin"),
                       os.path.join(REPO, "data", "vllm_flags")]) + base_tag.split(":")[1][:4]


VARIANT_SPEC = {
    # tag: (version label, extra ENV lines)
    "standin-a": ("0.28.0+standin.a", {}),
    "standin-b": ("0.28.0+standin.b", {}),
    "standin-broken": ("0.28.0+standin.broken", {"VLLM_STANDIN_FAULT": "crash_on_start"}),
}
# A development build per flavor (kimi_k3_vllm_version: image): it reports a development version and carries the
# stand-in's `vllm` package (sim/standin/pyshim), so the fabric job's image check runs in it as in a real image and
# judges the argv by the flag snapshot of the release the build follows. ROCm: the recipe's kimi-k3 image's version
# (no release base: its development_builds entry says 0.27.1); NVIDIA: a build after 0.28.0 (nearest release 0.28.0).
DEV_VARIANT = "standin-dev"
DEV_SPEC = {"nvidia": ("0.28.1.dev12+g5f76ae224", "0.28.0"), "rocm": ("0.1.dev19253+g5f76ae224", "0.27.1")}


def variant_spec(flavor):
    """{variant: (version label, extra ENV)} of a flavor's stand-in images."""
    spec = dict(VARIANT_SPEC)
    reported, rules = DEV_SPEC[flavor]
    spec[DEV_VARIANT] = (reported, {"VLLM_STANDIN_VERSION": rules, "VLLM_STANDIN_REPORTED_VERSION": reported,
                                    "PYTHONPATH": "/opt/kimi/sim/standin/pyshim:/opt/kimi/sim/standin"})
    return spec


def ensure_standin_images(base_tag, timings):
    h = standin_hash(base_tag)
    images_path = os.path.join(STATE, "images.json")
    rec = read_json(images_path, {}) or {}
    if rec.get("context_hash") == h and all(registry_has(r) for fl in REPOS for r in rec.get(fl, {}).values()):
        return rec, False
    t0 = time.time()
    stag = "kimi-sim/standin:" + h
    if dk(CONTROL, "image", "inspect", stag, check=False).returncode != 0:
        log("building stand-in image %s" % stag)
        ctx = os.path.join(STATE, "build", "standin")
        shutil.rmtree(ctx, ignore_errors=True)
        shutil.copytree(os.path.join(SIM_DIR, "images", "standin"), ctx, symlinks=True)
        _copytree(os.path.join(SIM_DIR, "standin"), os.path.join(ctx, "standin"))
        _copytree(os.path.join(REPO, "data", "vllm_flags"), os.path.join(ctx, "vllm_flags"))
        build_image(CONTROL, stag, ctx, build_args={"BASE_IMAGE": base_tag})
    new = {"context_hash": h, "standin_image": stag}
    vctx = os.path.join(STATE, "build", "variant")
    os.makedirs(vctx, exist_ok=True)
    for flavor, repo in REPOS.items():
        new[flavor] = {}
        for variant, (version, env) in variant_spec(flavor).items():
            lines = ["FROM " + stag,
                     "ENV KIMI_SIM_IMAGE_VARIANT=%s KIMI_SIM_IMAGE_FLAVOR=%s KIMI_SIM_IMAGE_VERSION=%s"
                     % (variant, flavor, version),
                     'LABEL org.opencontainers.image.version="%s" io.kimi-sim.variant="%s" '
                     'io.kimi-sim.flavor="%s" io.kimi-sim.context="%s"' % (version, variant, flavor, h)]
            for k, v in env.items():
                lines.append("ENV %s=%s" % (k, v))
            df = os.path.join(vctx, "Dockerfile.%s.%s" % (flavor, variant))
            write_file(df, "\n".join(lines) + "\n")
            tag = "%s:%s" % (repo, variant)
            build_image(CONTROL, tag, vctx, dockerfile=df)
            new[flavor][variant] = push_by_digest(tag, repo)
    write_json(images_path, new)
    timings["standin_images_s"] = round(time.time() - t0, 1)
    return new, True
