# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Development builds of vLLM and the image's own judgement of the plan (controller side, pure).

With ``kimi_k3_vllm_version: image`` the plan cannot know the image's vLLM version: the fabric job reads it in the
image and parses every node's final argv with the image's own ``vllm serve`` parser (roles/fabric/files/
fabric_job.py, ``image_check``). This module judges what the job reported:

* ``parse(text)``: a PEP 440 version as vLLM's setuptools-scm build writes it (``0.28.0``, ``0.32.0+cpu``,
  ``0.33.1.dev42+g5f76ae224``, ``0.1.dev19253+g5f76ae224``, ``0.29.0rc1``) -> release, base and whether it is a
  development build; None when the text is no such version, never an exception.
* ``rules_release``: which release's rules (flag snapshot, per-release env names) a build follows: an explicit
  entry of the recipe's ``development_builds.builds``, else the nearest release with a snapshot at or below the
  build's base version (``0.33.1.dev42`` follows 0.33.0; ``0.1.dev19253`` has none and needs an entry).
* ``flag_of``: the flag argparse names in its refusal (``unrecognized arguments: --x``, ``argument --x: ...``).
* ``check_image``: the fabric findings of the job's ``image_check`` (version and rules used, argv, env names).
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

# PEP 440 as setuptools-scm renders vLLM's versions: N(.N)* [{a|b|rc}N] [.postN] [.devN] [+local].
_VERSION = re.compile(r"^\s*v?(?P<release>\d+(?:\.\d+)*)(?P<pre>(?:a|b|rc)\d+)?(?:\.post(?P<post>\d+))?"
                      r"(?:\.dev(?P<dev>\d+))?(?:\+(?P<local>[A-Za-z0-9.]+))?\s*$")
_UNRECOGNIZED = re.compile(r"unrecognized arguments?:\s*(?P<rest>.*)")
_ARGUMENT = re.compile(r"argument (?P<names>[^:]+):")
_FLAG = re.compile(r"(?<![\w-])(--?[A-Za-z0-9][\w.-]*)")


def parse(text):
    """{"text", "release": (int, ...), "base": "N.N.N", "dev": bool, "local"} of a version, or None."""
    match = _VERSION.match(text) if isinstance(text, str) else None
    if not match:
        return None
    release = tuple(int(p) for p in match.group("release").split("."))
    dev = bool(match.group("pre") or match.group("dev") is not None)
    return {"text": text.strip(), "release": release, "base": ".".join(str(p) for p in release), "dev": dev,
            "local": match.group("local")}


def _key(release):
    """Compare releases of different lengths as vLLM's do: 0.28 == 0.28.0."""
    parts = list(release)
    while parts and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def rules_release(version, releases, builds=None):
    """(release, how) of the rules a vLLM build follows, or (None, why). ``releases``: the versions with a flag
    snapshot; ``builds``: the recipe's development_builds.builds ([{version, rules, why}])."""
    parsed = parse(version)
    if parsed is None:
        return None, "%r is not a version (PEP 440: 0.28.0, 0.33.1.dev42+g5f76ae224)" % (version,)
    for entry in builds or []:
        if str(entry.get("version")) == parsed["text"] or str(entry.get("version")) == parsed["text"].split("+")[0]:
            return str(entry["rules"]), "the recipe's development_builds entry for %s (%s)" % (
                entry["version"], entry.get("why") or "no reason given")
    known = sorted((r for r in (parse(str(v)) for v in releases) if r and not r["dev"]), key=lambda r: r["release"])
    below = [r for r in known if _key(r["release"]) <= _key(parsed["release"])]
    if not below:
        return None, "no release with a flag snapshot (%s) lies at or below its base version %s" % (
            ", ".join(r["text"] for r in known) or "none", parsed["base"])
    if not parsed["dev"] and _key(below[-1]["release"]) == _key(parsed["release"]):
        return below[-1]["text"], "its own release"
    return below[-1]["text"], "the nearest release at or below its base version %s" % parsed["base"]


def flag_of(message):
    """The first flag argparse names in a refusal, or None (a message naming no flag, a validate() error)."""
    if not isinstance(message, str):
        return None
    match = _UNRECOGNIZED.search(message)
    text = match.group("rest") if match else None
    if text is None:
        match = _ARGUMENT.search(message)
        text = match.group("names") if match else ""
    found = _FLAG.search(text)
    return found.group(1) if found else None


def _finding(host, check, status, observed, expected="", fix="", variable=None):
    # The shape of report.finding (report imports this module, so it cannot be imported from here).
    return {"host": host, "check": check, "status": status, "observed": observed, "expected": expected, "fix": fix,
            "variable": variable}


def digest_of(image):
    """The digest of a pinned reference (what the refusal names), else the reference itself."""
    return str(image).split("@", 1)[1] if "@" in str(image) else str(image)


def _version_finding(host, spec, check, releases, builds):
    want, version = spec["expect"], check.get("version")
    image = want["image"]
    if not version:
        return _finding(host, "image_version", "fail", "no vLLM version readable in %s (%s)" % (
            image, check.get("error") or "import vllm failed"), "the image's vLLM version",
            "use an image that carries vLLM (kimi_k3_image)", "kimi_k3_image")
    rules, how = rules_release(version, releases, builds)
    kind = "a development build" if (parse(version) or {}).get("dev") else "a release"
    if rules is None:
        return _finding(host, "image_version", "fail", "image %s reports vLLM %s (%s): %s" % (
            digest_of(image), version, kind, how), "a release whose rules the build follows",
            "add {version: \"%s\", rules: <the release it follows>, why: ...} under development_builds.builds in "
            "data/recipes/kimi_k3.yml, or pin a release image and set kimi_k3_vllm_version to its release"
            % version.split("+")[0], "kimi_k3_vllm_version")
    observed = "image %s reports vLLM %s (%s); it follows vLLM %s's rules: %s" % (
        digest_of(image), version, kind, rules, how)
    if rules != want["vllm_version"]:
        return _finding(host, "image_version", "warn", observed + "; the plan rendered by vLLM %s's rules"
                        % want["vllm_version"], "vLLM %s's rules" % want["vllm_version"],
                        "the image's own parser judged the argv (image_argv); to render by %s's rules set "
                        "development_builds.plan_release: \"%s\" in the recipe" % (rules, rules),
                        "kimi_k3_vllm_version")
    return _finding(host, "image_version", "pass", observed, "vLLM %s's rules" % want["vllm_version"])


def _argv_finding(host, spec, check):
    image, version = spec["expect"]["image"], check.get("version") or "unknown"
    where = "%s: image %s (vLLM %s)" % (host, digest_of(image), version)
    if check.get("status") == "ok" and check.get("accepted"):
        return _finding(host, "image_argv", "pass", "%s: its own vllm serve parser (%s) accepted the %d argv items"
                        % (where, check.get("parser"), len(spec["image_check"]["argv"])), "argv accepted")
    if check.get("status") == "ok":
        flag = flag_of(check.get("error"))
        named = ("the flag %s" % flag) if flag else "the argv"
        fix = ("remove %s from kimi_k3_extra_args (or from the variable that renders it): vLLM %s in %s does not "
               "accept it; or pin an image whose vLLM does" % (flag or "the refused value", version, digest_of(image)))
        return _finding(host, "image_argv", "fail", "%s refuses %s: %s" % (where, named, check.get("error")),
                        "the image's own parser accepts the argv", fix, "kimi_k3_extra_args")
    return _finding(host, "image_argv", "fail", "%s: the argv was not judged (%s: %s)" % (
        where, check.get("status") or "no result", check.get("error") or "no detail"),
        "the image's own parser accepts the argv", "the image's vllm serve parser could not be built in the fabric "
        "job; pin a release image and set kimi_k3_vllm_version to its release to check at plan time",
        "kimi_k3_vllm_version")


def check_image(host, spec, result, releases, builds=None):
    """The findings of the job's image_check (None in the spec: the plan pinned a release, nothing to judge)."""
    if not spec.get("image_check"):
        return []
    check = (result or {}).get("image_check") or {}
    out = [_version_finding(host, spec, check, releases, builds), _argv_finding(host, spec, check)]
    unknown = check.get("unknown_env") or []
    if unknown:
        out.append(_finding(host, "image_env", "fail", "%s: image %s (vLLM %s) does not know %s (vllm/envs.py "
                            "environment_variables)" % (host, digest_of(spec["expect"]["image"]),
                                                        check.get("version"), ", ".join(unknown)),
                            "every VLLM_* name of the plan is one the image reads",
                            "remove %s from kimi_k3_extra_env: this image's vLLM ignores it" % ", ".join(unknown),
                            "kimi_k3_extra_env"))
    elif check.get("env_known"):
        out.append(_finding(host, "image_env", "pass", "every VLLM_* name of the plan is one of the image's %d"
                            % check["env_known"], "known env names"))
    elif check.get("status") == "ok":
        out.append(_finding(host, "image_env", "warn", "%s: image %s (vLLM %s): its vllm/envs.py lists no "
                            "environment variables, so the plan's VLLM_* names were not judged" % (
                                host, digest_of(spec["expect"]["image"]), check.get("version")),
                            "known env names", "check kimi_k3_extra_env's VLLM_* names against the image's vLLM by "
                            "hand, or pin a release image and set kimi_k3_vllm_version to its release",
                            "kimi_k3_extra_env"))
    return out
