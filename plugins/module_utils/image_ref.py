# -*- coding: utf-8 -*-
# Copyright: gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Image reference parsing and the per-node verdict of a pull/load against the engine's RepoDigests.

Pure functions, standard library only. Exposed to the image role by the filters of plugins/filter/image.py
(``gpufleet.kimi_k3.image_reference_parse`` -> image_reference_parse(),
``gpufleet.kimi_k3.image_verdict`` -> image_outcome()); unit-tested in
tests/unit/plugins/module_utils/test_image_ref.py.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
ID_RE = re.compile(r"^(sha256:)?([0-9a-f]{64})$")
PATH_COMPONENT_RE = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")
TAG_RE = re.compile(r"^[\w][\w.-]{0,127}$")
DOMAIN_RE = re.compile(r"^(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*"
                       r"(?::[0-9]+)?$|^\[[0-9a-fA-F:]+\](?::[0-9]+)?$")
DOCKER_HUB_ALIASES = ("docker.io", "index.docker.io", "registry-1.docker.io")
VERIFY_HINT = ("Check that the registry is reachable from the node and that the digest exists "
               "(docker buildx imagetools inspect %s)")


def image_reference_parse(reference, allow_unpinned=False):
    """Split ``reference`` into domain/path/tag/digest and normalise it the way the Docker engine does.

    ``canonical`` is ``domain/path@digest`` for a pinned reference, else ``domain/path:tag`` (tag default latest);
    Docker Hub names get ``docker.io/`` and single-component Hub names ``library/``.
    ``problem`` is None, or why the reference cannot be used (invalid, or unpinned without allow_unpinned).
    """
    ref = "" if reference is None else str(reference).strip()
    out = {"reference": ref, "valid": False, "pinned": False, "domain": "", "path": "", "tag": "", "digest": "",
           "name": "", "canonical": "", "problem": None}
    if not ref:
        out["problem"] = "the image reference is empty"
        return out
    name, _sep, digest = ref.partition("@")
    tag = ""
    colon, slash = name.rfind(":"), name.rfind("/")
    if colon > slash:
        name, tag = name[:colon], name[colon + 1:]
    first, sep, rest = name.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost" or first.startswith("[")):
        domain, path = first.lower(), rest
    else:
        domain, path = "docker.io", name
    if domain in DOCKER_HUB_ALIASES:
        domain = "docker.io"
        if path and "/" not in path:
            path = "library/" + path
    problems = []
    if not DOMAIN_RE.match(domain):
        problems.append("registry %r is not a valid host[:port]" % domain)
    if not path or not all(PATH_COMPONENT_RE.match(c) for c in path.split("/")):
        problems.append("repository %r is not a valid lowercase repository path" % (path or name))
    if tag and not TAG_RE.match(tag):
        problems.append("tag %r is not valid" % tag)
    if _sep and not DIGEST_RE.match(digest):
        problems.append("digest %r is not sha256:<64 lowercase hex>" % digest)
    out.update(domain=domain, path=path, tag=tag, digest=digest, name="%s/%s" % (domain, path))
    if problems:
        out["problem"] = "%r is not a valid image reference: %s" % (ref, "; ".join(problems))
        return out
    out["valid"] = True
    out["pinned"] = bool(digest)
    out["canonical"] = ("%s@%s" % (out["name"], digest)) if digest else ("%s:%s" % (out["name"], tag or "latest"))
    if not out["pinned"] and not _as_bool(allow_unpinned):
        out["problem"] = ("%r is not pinned by digest: use repo@sha256:<64 hex> (docker buildx imagetools inspect "
                          "<repo>:<tag> prints it), or set kimi_k3_allow_unpinned_image: true to accept a tag that "
                          "can move" % ref)
    return out


def _canonical_list(refs):
    out = []
    for r in refs or []:
        p = image_reference_parse(r, allow_unpinned=True)
        if p["valid"]:
            out.append(p["canonical"])
    return out


def _norm_id(value):
    m = ID_RE.match(str(value or "").strip().lower())
    return ("sha256:" + m.group(2)) if m else ""


def _unique_images(images):
    seen, out = set(), []
    for img in images or []:
        if not isinstance(img, dict):
            continue
        key = img.get("Id") or id(img)
        if key in seen:
            continue
        seen.add(key)
        out.append(img)
    return out


def image_verify(reference, images, expected_id="", allow_unpinned=False):
    """Find the inspected image that carries ``reference``.

    Pinned: the canonical ``repo@digest`` must be in an image's canonical RepoDigests (``verified_by:
    repo_digests``); failing that, an image whose Id equals ``expected_id`` (``verified_by: image_id``) when given.
    Tag-only (allow_unpinned): canonical ``repo:tag`` in RepoTags (``verified_by: repo_tags``).
    Returns {ok, verified_by, image, reason}.
    """
    ref = image_reference_parse(reference, allow_unpinned=allow_unpinned)
    images = _unique_images(images)
    if ref["problem"]:
        return {"ok": False, "verified_by": None, "image": None, "reason": ref["problem"]}
    for img in images:
        if ref["pinned"] and ref["canonical"] in _canonical_list(img.get("RepoDigests")):
            return {"ok": True, "verified_by": "repo_digests", "image": img, "reason": None}
    want_id = _norm_id(expected_id)
    if expected_id and not want_id:
        return {"ok": False, "verified_by": None, "image": None,
                "reason": "image_expected_id %r is not sha256:<64 hex>" % (expected_id,)}
    if ref["pinned"] and want_id:
        for img in images:
            if _norm_id(img.get("Id")) == want_id:
                return {"ok": True, "verified_by": "image_id", "image": img, "reason": None}
    if not ref["pinned"]:
        for img in images:
            if ref["canonical"] in _canonical_list(img.get("RepoTags")):
                return {"ok": True, "verified_by": "repo_tags", "image": img, "reason": None}
    if not images:
        reason = "no image with that reference is present on the node's engine"
    else:
        seen = ["%s (RepoDigests %s, RepoTags %s)" % (img.get("Id", "?"), img.get("RepoDigests") or [],
                                                      img.get("RepoTags") or []) for img in images]
        what = "RepoDigests" if ref["pinned"] else "RepoTags"
        reason = "%s is in the %s of none of the inspected images: %s" % (reference, what, "; ".join(seen))
        if want_id:
            reason += "; none has the expected ID %s" % want_id
    return {"ok": False, "verified_by": None, "image": None, "reason": reason}


def _engine_error(msg, reference):
    """The engine's words from a community.docker error message.

    ``Error pulling image R:T - 404 Client Error for http+docker://...: Not Found ("manifest ... unknown")``
    becomes ``404 Not Found: manifest ... unknown``; anything else is returned whitespace-normalised.
    """
    text = " ".join(str(msg or "unknown error").split())
    m = re.match(r"^Error (?:pulling|loading)(?: image)? \S+ - (.*)$", text)
    if m:
        text = m.group(1)
    m = re.match(r'^(\d{3}) (?:Client|Server) Error for \S+: (.*?) \("(.*)"\)$', text)
    if m:
        text = "%s %s: %s" % m.groups()
    return text.rstrip(".")


def image_outcome(reference, host, images=None, action=None, source="pull", expected_id="", allow_unpinned=False,
                  check_mode=False, tarball=""):
    """Judge one node: {ok, msg, fact}. See the image_verdict filter's DOCUMENTATION."""
    action = action if isinstance(action, dict) else {}
    check_mode = _as_bool(check_mode)
    ref = image_reference_parse(reference, allow_unpinned=allow_unpinned)
    fact = {"reference": ref["reference"], "id": None, "repo_digests": [], "repo_tags": [], "verified_by": None,
            "source": source, "changed": bool(action.get("changed")), "pending": False}
    if ref["problem"]:
        return {"ok": False, "msg": "%s: %s" % (host, ref["problem"]), "fact": fact}
    if action.get("failed"):
        err = _engine_error(action.get("msg"), ref["reference"])
        if source == "tarball":
            msg = ("%s: cannot load %s from the tarball %s: %s. Check that the file exists and is a `docker save` or "
                   "OCI archive of that image" % (host, ref["reference"], tarball or "?", err))
        else:
            msg = "%s: cannot pull %s: %s. %s" % (host, ref["reference"], err, VERIFY_HINT % ref["reference"])
        return {"ok": False, "msg": msg, "fact": fact}
    v = image_verify(ref["reference"], images, expected_id=expected_id, allow_unpinned=allow_unpinned)
    if v["ok"]:
        img = v["image"]
        fact.update(id=img.get("Id"), repo_digests=list(img.get("RepoDigests") or []),
                    repo_tags=list(img.get("RepoTags") or []), verified_by=v["verified_by"])
        how = {"repo_digests": "RepoDigests contain it", "image_id": "image ID matches image_expected_id",
               "repo_tags": "UNPINNED: RepoTags contain it, the tag can move"}[v["verified_by"]]
        return {"ok": True, "msg": "%s: %s verified (%s)" % (host, ref["reference"], how), "fact": fact}
    if check_mode and (action.get("changed") or action.get("skipped")):
        fact["pending"] = True
        verb = "load it from %s" % (tarball or "the tarball") if source == "tarball" else "pull it"
        return {"ok": True, "fact": fact,
                "msg": "%s: %s is not on the node; a real run would %s and then verify RepoDigests (check mode "
                       "contacts no registry, so reachability and the digest are not checked)"
                       % (host, ref["reference"], verb)}
    if source == "tarball":
        msg = ("%s: the tarball %s did not provide %s: %s. A `docker save` archive written by the classic image "
               "store carries no RepoDigests: set image_expected_id to the image ID you verified (same image store "
               "type as the node), or stage an archive of the registry-pushed image that keeps its digest"
               % (host, tarball or "?", ref["reference"], v["reason"]))
    else:
        msg = "%s: pulled %s but cannot verify it: %s. %s" % (
            host, ref["reference"], v["reason"], VERIFY_HINT % ref["reference"])
    return {"ok": False, "msg": msg, "fact": fact}


def _as_bool(value):
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("1", "true", "yes", "on", "y")
