"""The image registries (open and htpasswd) and the site-mirror copies."""
import json
import os
import shutil
import subprocess
import urllib.request

from kimisim.settings import AUTH_REGISTRY, AUTH_USER, MIRROR_PREFIX, REGISTRY, REPOS, STATE
from kimisim.util import die, pid_alive, process_name, read_json, read_pid, sh, terminate, wait_for, write_file, write_json


def registry_ok():
    return registry_answers(REGISTRY)


def registry_answers(addr, ok_codes=(200,)):
    try:
        with urllib.request.urlopen("http://%s/v2/" % addr, timeout=2) as r:
            return r.status in ok_codes
    except urllib.error.HTTPError as e:
        return e.code in ok_codes
    except (urllib.error.URLError, OSError):
        return False


def auth_registry_ok():
    """The authenticated registry answers /v2/ with 401 (it wants the login)."""
    return registry_answers(AUTH_REGISTRY, (401,))


def auth_credentials():
    """{registry, username, password} of the authenticated registry; the htpasswd file is made once (bcrypt)."""
    d = os.path.join(STATE, "registry", "auth")
    path = os.path.join(d, "credentials.json")
    cred = read_json(path)
    if cred and os.path.exists(os.path.join(d, "htpasswd")):
        return cred
    htpasswd = shutil.which("htpasswd") or die("htpasswd missing (apache2-utils): run sim/install.sh")
    cred = {"registry": AUTH_REGISTRY, "username": AUTH_USER, "password": os.urandom(12).hex()}
    os.makedirs(d, mode=0o700, exist_ok=True)
    sh([htpasswd, "-B", "-b", "-c", os.path.join(d, "htpasswd"), cred["username"], cred["password"]])
    write_file(path, json.dumps(cred) + "\n", 0o600)
    return cred


def _registry_config(addr, data, htpasswd=None):
    auth = "htpasswd auth" if htpasswd else "no auth"
    lines = ["# kimi-sim registry (Debian docker-registry), loopback only, %s" % auth,
             "version: 0.1", "log:", "  level: warn", "  accesslog:", "    disabled: true",
             "storage:", "  filesystem:", "    rootdirectory: %s" % data, "  delete:", "    enabled: true",
             "http:", "  addr: %s" % addr, "  headers:", "    X-Content-Type-Options: [nosniff]"]
    if htpasswd:
        lines += ["auth:", "  htpasswd:", "    realm: kimi-sim", "    path: %s" % htpasswd]
    return "\n".join(lines) + "\n"


def _start_one_registry(name, addr, ready, htpasswd=None):
    pidf = os.path.join(STATE, "registry", name + ".pid")
    if pid_alive(read_pid(pidf)) and ready():
        return False
    if ready() or registry_answers(addr, (200, 401)):
        die("something else is serving %s (not started by simctl); stop it first" % addr)
    binary = shutil.which("docker-registry") or shutil.which("registry") or die("docker-registry missing")
    cfg = os.path.join(STATE, "registry", name + ".config.yml")
    data = os.path.join(STATE, "registry", "data")
    os.makedirs(data, exist_ok=True)
    write_file(cfg, _registry_config(addr, data, htpasswd))
    logf = open(os.path.join(STATE, "registry", name + ".log"), "ab")
    proc = subprocess.Popen([binary, "serve", cfg], stdout=logf, stderr=logf, stdin=subprocess.DEVNULL,
                            start_new_session=True, close_fds=True)
    logf.close()
    write_file(pidf, "%d\n" % proc.pid)
    wait_for(lambda: proc.poll() is None and ready(), 30, "registry on " + addr)
    return True


def start_registry():
    """The open registry (127.0.0.1:5000) and, on the same storage, the authenticated one (127.0.0.1:5001)."""
    started = _start_one_registry("registry", REGISTRY, registry_ok)
    htpasswd = os.path.join(STATE, "registry", "auth", "htpasswd")
    auth_credentials()
    return _start_one_registry("registry-auth", AUTH_REGISTRY, auth_registry_ok, htpasswd) or started


def stop_registry():
    for name in ("registry", "registry-auth"):
        pid = read_pid(os.path.join(STATE, "registry", name + ".pid"))
        if pid_alive(pid) and "registry" in process_name(pid):
            terminate(pid, 10)


MANIFEST_TYPES = ("application/vnd.docker.distribution.manifest.v2+json, "
                  "application/vnd.oci.image.manifest.v1+json")


def _registry_call(method, path, data=None, headers=None):
    req = urllib.request.Request("http://%s%s" % (REGISTRY, path), data=data, method=method, headers=headers or {})
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.status, r.headers, r.read()


def mirror_copy(repo_ref, tag):
    """Copy one image to mirror/<repo> in the open registry the way a site mirror holds it: blobs mounted, the
    manifest bytes PUT unchanged, so the mirror's digest is the original's. Returns the mirror's repo@digest."""
    name, digest = repo_ref.split("/", 1)[1].split("@")
    target = MIRROR_PREFIX + name
    _st, hdrs, body = _registry_call("GET", "/v2/%s/manifests/%s" % (name, digest), headers={"Accept": MANIFEST_TYPES})
    manifest = json.loads(body)
    for blob in [manifest["config"]["digest"]] + [layer["digest"] for layer in manifest["layers"]]:
        _registry_call("POST", "/v2/%s/blobs/uploads/?mount=%s&from=%s" % (target, blob, name))
    _st, put_hdrs, _b = _registry_call("PUT", "/v2/%s/manifests/%s" % (target, tag), data=body,
                                       headers={"Content-Type": hdrs.get("Content-Type") or manifest["mediaType"]})
    got = put_hdrs.get("Docker-Content-Digest")
    if got != digest:
        raise RuntimeError("mirror copy of %s got digest %s" % (repo_ref, got))
    return "%s/%s@%s" % (REGISTRY, target, digest)


def ensure_mirror_images(images):
    """images.json's "mirror": {flavor: {standin-a: 127.0.0.1:5000/mirror/...@digest}} (copied when missing)."""
    mirror = images.get("mirror") or {}
    for flavor in REPOS:
        ref = (mirror.get(flavor) or {}).get("standin-a")
        if ref and registry_has(ref):
            continue
        mirror.setdefault(flavor, {})["standin-a"] = mirror_copy(images[flavor]["standin-a"], "standin-a")
    if mirror != images.get("mirror"):
        images["mirror"] = mirror
        write_json(os.path.join(STATE, "images.json"), images)
    return images


def registry_has(repo_ref):
    """repo_ref: 127.0.0.1:5000/name@sha256:..."""
    name, digest = repo_ref.split("/", 1)[1].split("@")
    req = urllib.request.Request("http://%s/v2/%s/manifests/%s" % (REGISTRY, name, digest), method="HEAD",
                                 headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json, "
                                                    "application/vnd.oci.image.manifest.v1+json"})
    try:
        with urllib.request.urlopen(req, timeout=3) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False
