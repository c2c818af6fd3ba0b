# -*- coding: utf-8 -*-
# Copyright: gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Image reference parsing and the per-node verdict of a pull/load against the engine's RepoDigests.

Pure functions, standard library only. Exposed to the image role by the filters of plugins/filter/image.py
(``gpufleet.kimi_k3.image_reference_parse`` -> image_reference_parse(),
``gpufleet.kimi_k3.image_verdict`` -> image_outcome()); unit-tested in
tests/unit/plugins/plugin_utils/image/test_image_ref.py.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.common.coerce import to_bool

DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}\Z")
ID_RE = re.compile(r"^(sha256:)?([0-9a-f]{64})\Z")
PATH_COMPONENT_RE = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*\Z")
TAG_RE = re.compile(r"^[\w][\w.-]{0,127}\Z")
DOMAIN_RE = re.compile(r"^(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*"
                       r"(?::[0-9]+)?\Z|^\[[0-9a-fA-F:]+\](?::[0-9]+)?\Z")
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
    if not out["pinned"] and not to_bool(allow_unpinned):
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
                  check_mode=False, tarball="", pull_reference="", mirror_rule=None):
    """Judge one node: {ok, msg, fact}. See the image_verdict filter's DOCUMENTATION.

    ``pull_reference`` is the name the node pulled (the image_mirror rewrite, same digest); the fact records both
    ``reference`` (the plan's) and ``pulled_reference``, and RepoDigests are checked for the pulled one.
    """
    action = action if isinstance(action, dict) else {}
    check_mode = to_bool(check_mode)
    original = str(reference or "").strip()
    reference = str(pull_reference or "").strip() or original
    ref = image_reference_parse(reference, allow_unpinned=allow_unpinned)
    fact = {"reference": original, "pulled_reference": ref["reference"], "mirror": mirror_rule or None,
            "id": None, "repo_digests": [], "repo_tags": [], "verified_by": None,
            "source": source, "changed": bool(action.get("changed")), "pending": False}
    if ref["problem"]:
        return {"ok": False, "msg": "%s: %s" % (host, ref["problem"]), "fact": fact}
    if reference != original:
        host = "%s (%s via the mirror)" % (host, original)
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


# ------------------------------------------------------------------------------------------ registry mirrors
def _mirror_key(key):
    """Normalise a mirror source: a repository name (``vllm/vllm-openai`` -> ``docker.io/vllm/vllm-openai``) or a
    prefix ending in ``/`` (``index.docker.io/`` -> ``docker.io/``). Returns (kind, key) or (None, problem)."""
    key = str(key or "").strip()
    if key.endswith("/"):
        domain, _sep, rest = key[:-1].partition("/")
        domain = "docker.io" if domain.lower() in DOCKER_HUB_ALIASES else domain.lower()
        if not DOMAIN_RE.match(domain) or "." not in domain and ":" not in domain and domain != "localhost":
            return None, "prefix %r must start with a registry host (docker.io/, ghcr.io/, host:port/)" % key
        return "prefix", "/".join(p for p in (domain, rest) if p) + "/"
    p = image_reference_parse(key, allow_unpinned=True)
    if not p["valid"] or p["tag"] or p["digest"]:
        return None, "%r is neither a repository name (no tag, no digest) nor a prefix ending in /" % key
    return "repo", p["name"]


def _mirror_rules(mirrors):
    """[(kind, source, target)] sorted exact-first, then longest prefix; problems for bad entries."""
    rules, problems = [], []
    if not isinstance(mirrors, dict):
        return [], ["image_mirror must be a mapping {source repository or prefix/: mirror}, got %s"
                    % type(mirrors).__name__]
    for src, dst in sorted(mirrors.items(), key=lambda kv: str(kv[0])):
        kind, key = _mirror_key(src)
        target = str(dst or "").strip()
        if kind is None:
            problems.append("image_mirror[%r]: %s" % (src, key))
        elif not target or (kind == "prefix") != target.endswith("/"):
            problems.append("image_mirror[%r]: the mirror %r must be %s" % (
                src, target, "a prefix ending in / as the source is" if kind == "prefix" else
                "a repository name (no trailing /) as the source is"))
        else:
            rules.append((kind, key, target))
    rules.sort(key=lambda r: (r[0] != "repo", -len(r[1])))
    return rules, problems


def image_mirror(reference, mirrors=None, allow_unpinned=False):
    """Where to pull ``reference`` from: the mirror repository with the same digest (or tag), or itself.

    Returns {original, pull, mirrored, rule, problem}. ``pull`` keeps the digest, so RepoDigests are verified
    against the mirror's name with the digest the plan pinned (a mirror serves the same manifest bytes).
    """
    ref = image_reference_parse(reference, allow_unpinned=allow_unpinned)
    out = {"original": ref["reference"], "pull": ref["reference"], "mirrored": False, "rule": None,
           "problem": ref["problem"]}
    rules, problems = _mirror_rules(mirrors or {})
    if problems:
        out["problem"] = "; ".join(problems)
    if out["problem"] or not ref["valid"]:
        return out
    for kind, src, dst in rules:
        if kind == "repo" and ref["name"] == src:
            name = dst
        elif kind == "prefix" and (ref["name"] + "/").startswith(src):
            name = dst + ref["name"][len(src):]
        else:
            continue
        pull = "%s@%s" % (name, ref["digest"]) if ref["digest"] else "%s:%s" % (name, ref["tag"] or "latest")
        mirrored = image_reference_parse(pull, allow_unpinned=True)
        if not mirrored["valid"]:
            out["problem"] = "image_mirror[%r] rewrites %s to %s: %s" % (src, ref["reference"], pull,
                                                                         mirrored["problem"])
            return out
        out.update(pull=pull, mirrored=True, rule="%s -> %s" % (src, dst))
        return out
    return out


# ------------------------------------------------------------------------------------------ registry logins
HUB_LOGIN_URL = "https://index.docker.io/v1/"
LOGIN_FIELDS = ("registry", "username", "password")


def _login_registry(value):
    """Registry host of a credentials entry (``https://`` and paths dropped, Docker Hub aliases -> docker.io)."""
    text = str(value or "").strip().lower()
    text = re.sub(r"^https?://", "", text).split("/")[0]
    return "docker.io" if text in DOCKER_HUB_ALIASES else text


def registry_logins(credentials, reference):
    """Logins the pull of ``reference`` (the mirror-rewritten one) needs: {logins, problem}.

    ``credentials`` is image_registry_credentials, a list of {registry, username, password}; every entry is
    validated (named by index, never by its password), and only entries for the reference's registry are used.
    """
    if credentials in (None, ""):
        credentials = []
    if not isinstance(credentials, list):
        return {"logins": [], "problem": "image_registry_credentials must be a list of {registry, username, "
                                         "password}, got %s" % type(credentials).__name__}
    problems, logins = [], []
    want = image_reference_parse(reference, allow_unpinned=True)["domain"]
    for i, entry in enumerate(credentials):
        if not isinstance(entry, dict):
            problems.append("image_registry_credentials[%d] is not a mapping" % i)
            continue
        missing = [k for k in LOGIN_FIELDS if not str(entry.get(k) or "").strip()]
        if missing:
            problems.append("image_registry_credentials[%d] (%s) has no %s" % (
                i, entry.get("registry") or "?", " / ".join(missing)))
            continue
        host = _login_registry(entry["registry"])
        if not DOMAIN_RE.match(host):
            problems.append("image_registry_credentials[%d]: registry %r is not a host[:port]" % (i, entry["registry"]))
        elif host == want:
            logins.append({"index": i, "registry": host, "username": str(entry["username"]),
                           "password": str(entry["password"]),
                           "registry_url": HUB_LOGIN_URL if host == "docker.io" else host})
    return {"logins": logins, "problem": "; ".join(problems) or None}


def login_outcome(host, results):
    """Judge the docker_login loop of one node: {ok, msg}. The password never appears in ``msg``."""
    failures = []
    for res in results or []:
        if not isinstance(res, dict) or not res.get("failed"):
            continue
        item = res.get("item") if isinstance(res.get("item"), dict) else {}
        text = " ".join(str(res.get("msg") or "unknown error").split())
        if item.get("password"):
            text = text.replace(str(item["password"]), "********")
        failures.append("cannot log in to %s as %r (image_registry_credentials[%s]): %s" % (
            item.get("registry", "?"), item.get("username", "?"), item.get("index", "?"), text.rstrip(".")))
    if not failures:
        return {"ok": True, "msg": "%s: registry logins ok (%d)" % (host, len(results or []))}
    msg = ("%s: %s. Fix the username/password in the vault (image_registry_credentials) or the registry's access "
           "for that account; nothing was pulled or changed" % (host, "; ".join(failures)))
    return {"ok": False, "msg": msg}
