# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Secrets in the plan's inputs (pure functions): which names and values are secret, the one rule a secret's text
follows, and the redaction every refusal and warning of the plan passes through before it leaves the controller.

The validators word their messages without values where a value may be a secret; this module is the net under
them: whatever an inventory holds in a secret place (a secret variable, a secret-named environment entry or JSON
key, the value after a secret option, a URL's userinfo) is replaced by ``HIDDEN`` in every message.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fnmatch
import json
import re

HIDDEN = "<hidden>"
# Shorter values are not searched for in messages: they would match ordinary words of the message itself.
MIN_SEARCHED = 4

# Linux refuses one exec string over MAX_ARG_STRLEN (131072 bytes); the launch passes a secret in one
# (VLLM_API_KEY=<value>, an HTTP header), so the cap leaves room for the name and the encoding.
MAX_SECRET_BYTES = 65536
# Characters a secret never holds: C0 and C1 controls, DEL, the Unicode line and paragraph separators (a line
# break to many parsers) and the bidirectional controls (text that reads differently than it is).
FORBIDDEN_CLASS = u"\x00-\x1f\x7f-\x9f\u2028\u2029\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
SECRET_PATTERN = u"[^%s]*" % FORBIDDEN_CLASS
SECRET_RULE = ("one line of at most %d bytes without control characters (C0, C1), U+2028/U+2029, bidirectional "
               "controls or a trailing newline (vault strings made with echo end in one: use printf '%%s')"
               % MAX_SECRET_BYTES)
_FORBIDDEN = re.compile(u"[%s]" % FORBIDDEN_CLASS)
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)([^/?#@\s]+)@")
# A user name alone is an account (ssh://root@node); over http it is how a token travels (https://<token>@host).
_TOKEN_AS_USER_SCHEMES = ("http://", "https://")


def _userinfos(text):
    """The credential-bearing userinfo parts of the URLs in ``text``: with a password, or any over http(s)."""
    return [m for m in _URL_USERINFO.finditer(str(text))
            if ":" in m.group(2) or m.group(1).lower() in _TOKEN_AS_USER_SCHEMES]


def has_forbidden_character(text):
    """Whether ``text`` holds a character no secret (and no single-line value) may hold."""
    return _FORBIDDEN.search(str(text)) is not None


def secret_text_problem(text):
    """Why ``text`` cannot be a secret's value (the value itself is never part of the answer), else None."""
    if has_forbidden_character(text):
        return "holds a control, line-separator or bidirectional character"
    size = len(str(text).encode("utf-8"))
    if size > MAX_SECRET_BYTES:
        return "is %d bytes, over the limit of %d (Linux refuses longer exec strings)" % (size, MAX_SECRET_BYTES)
    return None


# ----------------------------------------------------------------------------- secret names (recipe secret_env)


def _words(name):
    """The words of a name, upper case: split at '_', '-', '.', spaces and lower-to-upper case changes."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", str(name))
    return [w for w in re.split(r"[_\-.\s]+", spaced.upper()) if w]


def _secret_words(words, spec):
    """``words`` without the not-secret words (TOKENS: a count), unless the word before names a credential
    (API_TOKENS, ACCESS_TOKENS: recipe ``credential_qualifiers``)."""
    not_secret, qualifiers = set(spec.get("not_secret_words", [])), set(spec.get("credential_qualifiers", []))
    return [w for i, w in enumerate(words) if w not in not_secret or (i > 0 and words[i - 1] in qualifiers)]


def is_secret_name(recipe, name):
    """Whether a name (environment variable, JSON key, option) names a secret, by the recipe's ``secret_env``:
    a pattern over the words joined by '_', or a credential word (plural too), once the not-secret words are out."""
    spec = recipe.get("secret_env", {})
    if str(name).upper() in spec.get("not_secret_names", []):
        return False
    words = _secret_words(_words(name), spec)
    if any(fnmatch.fnmatchcase("_".join(words), p.upper()) for p in spec.get("patterns", [])):
        return True
    credential = set(spec.get("words", []))
    return any(w in credential or (w.endswith("S") and w[:-1] in credential) for w in words)


# ----------------------------------------------------------------------------- secrets inside values


def _json_object(text):
    text = str(text).strip()
    if not text.startswith("{"):
        return None
    try:
        found = json.loads(text)
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def secret_keys(recipe, data):
    """The secret-named keys of a mapping, at any depth (lists included)."""
    found = []
    if isinstance(data, dict):
        for key, value in data.items():
            found += [str(key)] if is_secret_name(recipe, key) else secret_keys(recipe, value)
    elif isinstance(data, list):
        for item in data:
            found += secret_keys(recipe, item)
    return found


def value_secret_problem(recipe, text):
    """Why a value holds a secret by its structure (URL userinfo, a JSON object with a secret-named key), else
    None; the answer names the key, never a value."""
    if _userinfos(text):
        return "holds a URL with credentials (user:password@ or a token@)"
    keys = secret_keys(recipe, _json_object(text))
    if keys:
        return "holds JSON whose key %s names a secret" % keys[0]
    return None


def leaves(value):
    """Every scalar inside ``value``, as text."""
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in leaves(v)]
    if isinstance(value, (list, tuple)):
        return [leaf for v in value for leaf in leaves(v)]
    return [] if value is None or isinstance(value, bool) else [str(value)]


def _structured_secrets(recipe, value):
    """Values under secret-named keys (mappings, JSON text) and URL userinfo, at any depth."""
    if isinstance(value, dict):
        return [leaf for k, v in value.items()
                for leaf in (leaves(v) if is_secret_name(recipe, k) else _structured_secrets(recipe, v))]
    if isinstance(value, (list, tuple)):
        return [leaf for v in value for leaf in _structured_secrets(recipe, v)]
    text = "" if value is None else str(value)
    found = [m.group(2) for m in _userinfos(text)] + [p for m in _userinfos(text) for p in m.group(2).split(":", 1)[1:]]
    parsed = _json_object(text)
    return found + (_structured_secrets(recipe, parsed) if parsed else [])


def _option_name(token):
    return re.split(r"[=\s]", token, maxsplit=1)[0]


def arg_secrets(recipe, args):
    """Values an argv list gives to secret options (recipe ``refused_args`` marked secret, or a secret-named
    option): the next item, the inline ``=value`` and the rest of an item that holds option and value."""
    found, secret_option = [], False
    for token in [str(t) for t in args] if isinstance(args, (list, tuple)) else []:
        if token.startswith("-"):
            name = _option_name(token)
            secret_option = name.replace("_", "-") in secret_options(recipe) or is_secret_name(recipe, name)
            rest = token[len(name) + 1:].strip()
            found += [rest] if secret_option and rest else []
        elif secret_option:
            found.append(token)
    return found


def secret_options(recipe):
    """The vLLM options whose value is a secret (recipe ``refused_args`` entries with ``secret: true``)."""
    return [flag for flag, spec in recipe.get("refused_args", {}).items() if spec.get("secret")]


def inventory_secrets(recipe, variables, secret_names=(), arg_lists=()):
    """Every secret value in ``variables`` (an iterable of {name: value}): all of a variable in ``secret_names``,
    structured secrets anywhere, and the values of secret options in the variables named in ``arg_lists``."""
    found = set()
    for hv in variables:
        for name, value in hv.items():
            if name in secret_names:
                found.update(leaves(value))
                continue
            found.update(_structured_secrets(recipe, value))
            if name in arg_lists:
                found.update(arg_secrets(recipe, value))
    return found


# ----------------------------------------------------------------------------- the one redaction path


def redact(text, secrets):
    """``text`` with URL userinfo and every known secret value (``MIN_SEARCHED`` characters or more) hidden."""
    text = str(text)
    for m in reversed(_userinfos(text)):
        text = text[:m.start(2)] + HIDDEN + text[m.end(2):]
    for value in sorted((s for s in secrets if len(s.strip()) >= MIN_SEARCHED), key=len, reverse=True):
        text = text.replace(value, HIDDEN)
        if value.strip() != value:
            text = text.replace(value.strip(), HIDDEN)
    return text


def redact_problems(problems, secrets):
    """Problems (``{host, variable, message, fix}``) as they may leave the controller."""
    return [dict(p, **dict((k, redact(p[k], secrets)) for k in ("host", "variable", "message", "fix")
                           if p.get(k) is not None)) for p in problems]
