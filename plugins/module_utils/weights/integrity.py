# -*- coding: utf-8 -*-
# Copyright: gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Content checks of staged weights: the hashes the Hub lists, the verified manifest, where a token may go and
which node pulls which file from the endpoint. Standard library only (runs on the node; the plan imports the token
rule on the controller).

- Hashes: the Hub's tree listing gives every file its git blob id (``oid``: sha1 of ``b"blob <size>\\0" +
  content``) and, for LFS files, ``lfs.oid`` (sha256 of the content). Both are computed while the bytes stream in.
- Manifest: ``<repo_dir>/.kimi-k3-verified.json`` records, per blob, the hash it was verified against and the
  size and mtime (ns) it had then. A blob whose size and mtime still match is not read again (``verify=changed``);
  ``verify=full`` reads every blob once per run (``run`` id). Only blobs listed there are served to peers.
- Tokens: sent only over https or to a loopback endpoint over http (127.0.0.0/8, ::1, localhost).
- Origins: every file gets one node that pulls it from the endpoint; the other nodes copy it from that node.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import hashlib
import ipaddress
import json
import os
import re
import threading

try:  # Python 3
    from urllib.parse import urlparse
except ImportError:  # pragma: no cover - Python 2 is not supported on nodes
    from urlparse import urlparse

SHA256, GIT_SHA1 = "sha256", "git-sha1"
HEX = {SHA256: re.compile(r"^[0-9a-f]{64}\Z"), GIT_SHA1: re.compile(r"^[0-9a-f]{40}\Z")}
MANIFEST_NAME = ".kimi-k3-verified.json"
MANIFEST_VERSION = 1
READ_CHUNK = 4 * 1024 * 1024
VERIFY_MODES = ("changed", "full")


class IntegrityError(Exception):
    """A refusal with the message to show."""


# ------------------------------------------------------------------------------------------------- hashing
class ContentHash(object):
    """The hash a file is listed with, fed as bytes arrive: sha256 of the content (LFS), or the git blob id."""

    def __init__(self, algo, size):
        if algo not in HEX:
            raise IntegrityError("unknown hash algorithm %r" % (algo,))
        self.algo, self.size, self.fed = algo, int(size), 0
        if algo == SHA256:
            self._h = hashlib.sha256()
        else:
            # sha1 here names git's blob id, not a security choice of ours; the endpoint lists nothing stronger
            self._h = hashlib.sha1(b"blob %d\0" % self.size)  # nosec B324 # noqa: S324

    def update(self, data):
        self._h.update(data)
        self.fed += len(data)

    def hexdigest(self):
        return self._h.hexdigest()


def git_blob_id(data):
    """git's blob id of ``data`` (``git hash-object``)."""
    h = ContentHash(GIT_SHA1, len(data))
    h.update(data)
    return h.hexdigest()


def hash_path(path, algo, size, hasher=None, on_bytes=None, chunk=READ_CHUNK):
    """Feed the file at ``path`` into ``hasher`` (new one of ``algo``/``size`` when None); returns the hasher."""
    hasher = hasher or ContentHash(algo, size)
    with open(path, "rb") as handle:
        while True:
            data = handle.read(chunk)
            if not data:
                break
            hasher.update(data)
            if on_bytes:
                on_bytes(len(data))
    return hasher


def expected_hash(entry):
    """(algo, hex) a tree entry is verified against: the LFS sha256, else the git blob id. Raises IntegrityError."""
    lfs = entry.get("lfs") if isinstance(entry.get("lfs"), dict) else None
    path = entry.get("path")
    if lfs is not None:
        value = str(lfs.get("oid") or lfs.get("sha256") or "")
        if value.startswith("sha256:"):
            value = value[len("sha256:"):]
        if not HEX[SHA256].match(value):
            raise IntegrityError("the file list gives %s (an LFS file) no sha256 (lfs.oid %r)" % (path, value))
        return SHA256, value
    value = str(entry.get("oid") or "")
    if not HEX[GIT_SHA1].match(value):
        raise IntegrityError("the file list gives %s no git blob id (oid %r)" % (path, value))
    return GIT_SHA1, value


# ------------------------------------------------------------------------------------------------ manifest
def manifest_path(repo_dir):
    return os.path.join(repo_dir, MANIFEST_NAME)


def empty_manifest():
    return {"version": MANIFEST_VERSION, "blobs": {}, "refused": {}, "state": {}}


def load_manifest(repo_dir):
    """The manifest, or an empty one when absent or unreadable (then every blob is hashed again, which is safe)."""
    try:
        with open(manifest_path(repo_dir)) as handle:
            data = json.load(handle)
    except (IOError, OSError, ValueError):
        return empty_manifest()
    if not isinstance(data, dict) or data.get("version") != MANIFEST_VERSION:
        return empty_manifest()
    out = empty_manifest()
    for key in ("blobs", "refused"):
        if isinstance(data.get(key), dict):
            out[key] = dict((k, v) for k, v in data[key].items() if isinstance(v, dict))
    if isinstance(data.get("state"), dict):
        out["state"] = dict((k, str(v)) for k, v in data["state"].items() if k in ("state", "run") and v is not None)
    return out


def save_manifest(repo_dir, manifest):
    """Atomic write (a peer server may read it at any moment)."""
    path = manifest_path(repo_dir)
    tmp = "%s.%d.%d.tmp" % (path, os.getpid(), threading.current_thread().ident or 0)
    with open(tmp, "w") as handle:
        json.dump(manifest, handle, sort_keys=True, separators=(",", ":"))
    os.replace(tmp, path)


def stat_key(path):
    """(size, mtime_ns) of a file, or None when it does not exist."""
    try:
        st = os.stat(path)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return None
        raise
    return st.st_size, st.st_mtime_ns


def record(manifest, etag, algo, size, mtime_ns, run=None):
    manifest["blobs"][etag] = {"algo": algo, "hash": etag, "size": int(size), "mtime_ns": int(mtime_ns), "run": run}
    manifest["refused"].pop(etag, None)


def trusted(manifest, etag, algo, key, verify="changed", run=None):
    """Whether a blob (``key``: its current (size, mtime_ns)) may be taken as verified without reading it."""
    entry = manifest["blobs"].get(etag)
    if key is None or not entry or entry.get("algo") != algo or entry.get("hash") != etag:
        return False
    if (entry.get("size"), entry.get("mtime_ns")) != tuple(key):
        return False
    return verify != "full" or (run is not None and entry.get("run") == run)


# ------------------------------------------------------------------------------------------------- tokens
def is_loopback_host(host):
    host = (host or "").strip("[]").rstrip(".").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def token_allowed(url):
    """Whether a token may be sent to ``url``: https, or http to a loopback host."""
    u = urlparse(str(url or ""))
    return u.scheme == "https" or (u.scheme == "http" and is_loopback_host(u.hostname))


def token_transport_problem(endpoint, variable="weights_hf_endpoint"):
    """None, or why a token must not be sent to ``endpoint`` (naming the variable to fix)."""
    if token_allowed(endpoint):
        return None
    u = urlparse(str(endpoint or ""))
    return ("%s %s is plain http to a host that is not loopback, and a Hugging Face token is set: it would cross the "
            "network readable by anyone on the path; use the endpoint's https URL (or unset the token for a "
            "public mirror)" % (variable, "%s://%s" % (u.scheme, u.netloc)))


# ------------------------------------------------------------------------------------------------ origins
def assign_origins(files, nodes):
    """{path: node} - the node that pulls each file from the endpoint; the others copy it from that node.

    Largest files first, each to the node with the fewest bytes assigned so far (ties: the earlier node), so the
    endpoint serves every byte once and each node pulls about 1/N of it. ``files``: [{path, size}]; ``nodes``: the
    cluster's node names in one order every node agrees on (the play's). Deterministic: every node computes the same
    assignment from the same listing, without talking to the others.
    """
    nodes = list(nodes)
    if not nodes:
        return {}
    load = dict((n, 0) for n in nodes)
    order = dict((n, i) for i, n in enumerate(nodes))
    out = {}
    for f in sorted(files, key=lambda f: (-int(f["size"]), f["path"])):
        node = min(nodes, key=lambda n: (load[n], order[n]))
        out[f["path"]] = node
        load[node] += int(f["size"])
    return out


def peer_url(address, port, etag=""):
    """Base URL of a node's peer server (``/blobs/<etag>`` when ``etag``)."""
    host = "[%s]" % address if ":" in address and not address.startswith("[") else address
    return "http://%s:%d/%s" % (host, int(port), ("blobs/" + etag) if etag else "manifest")
