# -*- coding: utf-8 -*-
"""API-behaviour judgements of the smoke: reasoning/content split, served model name, plausible prompt token
count, HTTP status of an invalid parameter, ``/version``. Pure functions, no I/O; each returns
``{"ok": bool, "error": str or None, ...}``.

Why these: a reasoning parser that is not wired leaves ``</think>`` (or K3's think channel) in ``content``
(Dynamo's K3 README); the release decides the reasoning field (``reasoning`` since vLLM PR #27752, which later
dropped ``reasoning_content`` from responses, PR #33402; the 0.32 CPU engine streams ``delta.reasoning``); a wrong
served name or release means the deployment is not the plan's; a 500 for a bad request means validation is broken.
"""
from __future__ import annotations

import re

REASONING_MARKERS = ("</think>", "<think>", "<|open|>think", "<|close|>think", "◁think▷", "◁/think▷")
# Characters per token of BPE tokenizers on English text lie well inside these bounds (the stand-in uses 4).
MIN_CHARS_PER_TOKEN = 1.5
MAX_CHARS_PER_TOKEN = 8.0
TEMPLATE_ALLOWANCE = 512


def _result(errors, **extra):
    out = {"ok": not errors, "error": "; ".join(errors) or None}
    out.update(extra)
    return out


def judge_reasoning_split(content, reasoning, reasoning_keys, expected_key):
    """One streamed answer with thinking on: no reasoning marker in ``content``, reasoning text present and
    delivered under the release's key ``expected_key`` (``reasoning_keys``: the delta keys that carried it)."""
    errors = []
    markers = [m for m in REASONING_MARKERS if m in (content or "")]
    if markers:
        errors.append("reasoning markers %s in content: the reasoning parser is not wired" % ", ".join(markers))
    if not (reasoning or "").strip():
        errors.append("no reasoning text although thinking is on")
    elif expected_key not in (reasoning_keys or []):
        errors.append("reasoning arrived under %s, the release's key is %s"
                      % (", ".join(sorted(reasoning_keys or [])) or "no key", expected_key))
    return _result(errors, markers=markers, keys=sorted(reasoning_keys or []))


def judge_served_name(model_ids, expected):
    """``/v1/models`` must list the plan's served name (the first of ``expected`` when it is a list)."""
    want = expected[0] if isinstance(expected, (list, tuple)) and expected else expected
    if not want:
        return _result([], expected=None, served=list(model_ids or []))
    errors = []
    if want not in (model_ids or []):
        errors.append("/v1/models serves %s, the plan's name is %s" % (list(model_ids or []), want))
    return _result(errors, expected=want, served=list(model_ids or []))


def judge_prompt_tokens(prompt_tokens, prompt_chars):
    """``usage.prompt_tokens`` of a plain English prompt of ``prompt_chars`` characters must lie between
    chars / MAX_CHARS_PER_TOKEN and chars / MIN_CHARS_PER_TOKEN + TEMPLATE_ALLOWANCE (chat template, tools)."""
    low = int(prompt_chars / MAX_CHARS_PER_TOKEN)
    high = int(prompt_chars / MIN_CHARS_PER_TOKEN) + TEMPLATE_ALLOWANCE
    if prompt_tokens is None:
        errors = ["no usage.prompt_tokens in the response"]
    elif not low <= prompt_tokens <= high:
        errors = ["usage.prompt_tokens %s for a %d-character prompt is outside %d..%d"
                  % (prompt_tokens, prompt_chars, low, high)]
    else:
        errors = []
    return _result(errors, prompt_tokens=prompt_tokens, bounds=[low, high])


# vLLM refuses an invalid parameter with 400; the real vllm-router in front of it refuses it itself with 422
# (request validation of its own, seen on the rehearsal fleet): both are the refusal the check wants.
REFUSED_AS_INVALID = (400, 422)


def judge_invalid_parameter(status):
    """An invalid request parameter must be refused as invalid (HTTP 400, or 422 from the router; a 5xx means
    validation crashed)."""
    if status in REFUSED_AS_INVALID:
        errors = []
    elif status is None:
        errors = ["no HTTP status for the invalid-parameter request (transport error)"]
    elif status >= 500:
        errors = ["an invalid parameter was answered with HTTP %d instead of 400: request validation fails "
                  "inside the server" % status]
    elif status < 300:
        errors = ["an invalid parameter was accepted (HTTP %d) instead of refused with 400" % status]
    else:
        errors = ["an invalid parameter was answered with HTTP %d instead of 400" % status]
    return _result(errors, status=status)


def release_of(version):
    """The public release of a version string: 'v0.32.0+cpu' -> '0.32.0'."""
    text = str(version or "").strip()
    text = text[1:] if text[:1] in ("v", "V") else text
    return re.split(r"[+\s]", text, maxsplit=1)[0]


def judge_version(reported, planned):
    """``/version`` must report the plan's release (local build suffixes such as '+cpu' aside)."""
    if not planned:
        return _result([], reported=reported, planned=None)
    if reported is None:
        errors = ["/version did not answer"]
    elif release_of(reported) != release_of(planned):
        errors = ["/version reports %s, the plan deploys %s" % (reported, planned)]
    else:
        errors = []
    return _result(errors, reported=reported, planned=planned)
