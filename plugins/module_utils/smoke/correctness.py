# -*- coding: utf-8 -*-
"""The correctness suite's prompts and judgements: checkable answers, the needle in a haystack, accuracy and the
router/backend agreement. Pure functions, no I/O.

Answers are judged by their normalised value, not their text (greedy output drifts after a few tokens across
kernels, field-failures.md §2): a number answer by the last number in it, a fact by the normalised code it must
contain, a JSON extraction by the parsed object, the receipt by the tokens the OCR must contain.

Needle placement: the haystack is filler repeated ``reps`` times with the needle in the middle. How many tokens a
repetition costs is measured, not assumed: two probe prompts (``reps`` a and b) give ``usage.prompt_tokens`` p_a and
p_b, so per repetition = (p_b - p_a) / (b - a) and the fixed overhead = p_a - a * per repetition
(:func:`fit_tokens_per_rep`). The effective context is ``min(max_model_len, budget)``; the prompt aims at
``NEEDLE_FRACTION`` of it less the answer's budget, and the run fails when the server counted fewer than
``NEEDLE_FRACTION`` x effective context prompt tokens. ``budget`` (default ``NEEDLE_TOKEN_BUDGET``) caps a 1 M
context: prefilling a million tokens takes minutes on one deployment and holds a large share of the KV pool, which
does not fit a smoke that must finish in three minutes; 131,072 tokens still crosses the 128 k mark where long-context
kernels and chunked prefill take over.
"""
from __future__ import annotations

import json
import random
import re
import unicodedata

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import verifier as smoke_verifier
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import vision as smoke_vision

NEEDLE_FRACTION = 0.9
NEEDLE_TOKEN_BUDGET = 131072
NEEDLE_ANSWER_TOKENS = 256
FILLER = "The quick brown fox jumps over the lazy dog while the GPU cluster hums quietly in the data hall. "
NAMES = ("Mira", "Tomas", "Lena", "Ravi", "Ines", "Omar", "Yuki", "Sven")
FIELDS = ("locker code", "badge code", "desk code")
NUMBER, FACT, JSON_KIND, OCR = "number", "fact", "json", "ocr"


def _arithmetic(rng, idx):
    a, b, c = rng.randint(11, 99), rng.randint(11, 99), rng.randint(2, 40)
    op = rng.choice(("+", "-"))
    value = a * b + c if op == "+" else a * b - c
    return {"id": "arith-%d" % idx, "kind": NUMBER, "expected": value,
            "prompt": "What is %d * %d %s %d? Answer with the number only." % (a, b, op, c)}


def _fact(rng, idx):
    names = rng.sample(NAMES, 4)
    field = rng.choice(FIELDS)
    codes = ["%s-%d" % ("".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ") for _i in range(2)), rng.randint(1000, 9999))
             for _n in names]
    facts = " ".join("%s's %s is %s." % (n, field, c) for n, c in zip(names, codes))
    pick = rng.randrange(len(names))
    return {"id": "fact-%d" % idx, "kind": FACT, "expected": codes[pick],
            "prompt": "Facts: %s Question: what is %s's %s? Answer with the code only." % (facts, names[pick], field)}


def _json(rng, idx):
    record = {"id": "R-%d" % rng.randint(100, 999), "qty": rng.randint(1, 60), "colour": rng.choice(
        ("red", "green", "blue", "amber"))}
    pairs = ", ".join("%s=%s" % (k, v) for k, v in record.items())
    return {"id": "json-%d" % idx, "kind": JSON_KIND, "expected": record,
            "prompt": "Return this record as JSON: %s. Answer with JSON only, numbers as numbers." % pairs}


def build_prompts(seed=0, per_kind=4, ocr_tokens=None):
    """The checkable prompts: ``per_kind`` arithmetic, fact and JSON prompts (seeded), plus the receipt when
    ``ocr_tokens`` (the strings the OCR answer must contain) is given."""
    rng = random.Random("kimi-k3-correctness:%s" % seed)
    out = []
    for idx in range(per_kind):
        out += [_arithmetic(rng, idx), _fact(rng, idx), _json(rng, idx)]
    if ocr_tokens:
        out.append({"id": "ocr-receipt", "kind": OCR, "expected": list(ocr_tokens), "prompt": None})
    return out


_NUM = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
# Digit-group separators besides the comma (no-break, narrow no-break and thin spaces: "1 234 567") and the
# Unicode minus a model may write for "-".
_GROUP_SPACE = re.compile(r"(?<=\d)[\u00a0\u202f\u2009](?=\d{3})")
_MINUS = dict.fromkeys(map(ord, "\u2212\u2012\u2013\ufe63\uff0d"), "-")


def last_number(text):
    """The last number in ``text`` (thousands separators dropped, Unicode minus read as "-") as int or float; None
    when there is none. Never raises: a digit run too long for ``int`` (Python's 4,300-digit limit) is a float."""
    found = _NUM.findall(_GROUP_SPACE.sub("", str(text or "").translate(_MINUS)))
    if not found:
        return None
    raw = found[-1].replace(",", "")
    if "." in raw:
        return float(raw)
    try:
        return int(raw)
    except ValueError:
        return float(raw)


def normalise_name(text):
    """A name or code as it is compared: compatibility-decomposed (full-width forms, accents split off), then
    ``smoke_vision.normalise_text`` (upper case, letters, digits and '.' only): 'Tomás' -> 'TOMAS',
    'qx-4417' -> 'QX4417'."""
    decomposed = unicodedata.normalize("NFKD", str(text or ""))
    return smoke_vision.normalise_text("".join(ch for ch in decomposed if not unicodedata.combining(ch)))


_DECODER = json.JSONDecoder()
JSON_STARTS = 64  # '{' positions tried: each try reads one value, so a brace-heavy answer stays linear


def parse_json_answer(text):
    """The first JSON object in ``text`` (code fences and text around it allowed); None when none parses (a nesting
    too deep for the parser included). Each of the first ``JSON_STARTS`` '{' is tried with ``raw_decode``, which
    reads one value and ignores what follows."""
    text = str(text or "")
    start = text.find("{")
    for _try in range(JSON_STARTS):
        if start < 0:
            break
        try:
            value, _end = _DECODER.raw_decode(text, start)
        except (ValueError, RecursionError):
            start = text.find("{", start + 1)
            continue
        return value if isinstance(value, dict) else None
    return None


def _same_json(expected, got):
    if not isinstance(got, dict) or set(got) != set(expected):
        return False
    for k, v in expected.items():
        g = got[k]
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            if not isinstance(g, (int, float)) or isinstance(g, bool) or g != v:
                return False
        elif str(g).strip().lower() != str(v).strip().lower():
            return False
    return True


def normalised_answer(kind, answer):
    """The value an answer is judged (and compared across endpoints) by."""
    if kind == NUMBER:
        return last_number(answer)
    if kind == JSON_KIND:
        got = parse_json_answer(answer)
        return None if got is None else json.dumps(got, sort_keys=True)
    return normalise_name(answer)


def judge(item, answer):
    """``{"ok", "value"}`` for one prompt's answer."""
    kind, expected = item["kind"], item["expected"]
    value = normalised_answer(kind, answer)
    if kind == NUMBER:
        # int == float compares exactly in Python; float() of a huge int would overflow
        ok = value is not None and value == expected
    elif kind == JSON_KIND:
        ok = value is not None and _same_json(expected, json.loads(value))
    elif kind == OCR:
        ok = smoke_vision.ocr_check(answer, expected)["ok"]
    else:
        ok = normalise_name(expected) in (value or "")
    return {"ok": bool(ok), "value": value}


def accuracy(judged):
    """Share of correct answers with its Wilson interval; ``judged``: [{"ok"}] (failed requests count as wrong)."""
    return smoke_verifier.rate_with_interval(sum(1 for j in judged if j.get("ok")), len(judged))


def agreement(reference, other):
    """Router/backend agreement: share of the prompts both answered whose normalised values are equal.

    ``reference`` / ``other``: ``{prompt_id: value}`` (None = no answer, left out)."""
    common = [pid for pid in sorted(reference) if reference[pid] is not None and other.get(pid) is not None]
    return smoke_verifier.rate_with_interval(sum(1 for pid in common if reference[pid] == other[pid]), len(common))


def fit_tokens_per_rep(reps_a, tokens_a, reps_b, tokens_b):
    """``(tokens per filler repetition, fixed overhead)`` from two probes' ``usage.prompt_tokens``."""
    if reps_b == reps_a or tokens_b <= tokens_a:
        raise ValueError("the probes must differ in length and the longer must count more tokens "
                         "(got %s reps -> %s tokens, %s reps -> %s tokens)" % (reps_a, tokens_a, reps_b, tokens_b))
    per = (tokens_b - tokens_a) / float(reps_b - reps_a)
    return per, tokens_a - reps_a * per


def effective_context(max_model_len, budget=NEEDLE_TOKEN_BUDGET):
    """Tokens the needle prompt is measured against: the served max_model_len, capped by ``budget`` (0 = no cap)."""
    if not max_model_len:
        return None
    return min(int(max_model_len), int(budget)) if budget else int(max_model_len)


def needle_reps(context, per_rep, overhead, answer_tokens=NEEDLE_ANSWER_TOKENS):
    """Filler repetitions that put the prompt at ``NEEDLE_FRACTION`` of ``context``, leaving room for the answer
    (when the context is too small for both, the answer's room wins)."""
    target = min(NEEDLE_FRACTION * context + per_rep, context - answer_tokens)
    return max(1, int((target - overhead) // per_rep))


def needle_prompt(reps, needle):
    half = reps // 2
    return (FILLER * half + "\nRemember: the secret code is %s.\n" % needle + FILLER * (reps - half)
            + "\nWhat is the secret code mentioned above? Answer with the code only.")


def judge_needle(answer, needle, prompt_tokens, context):
    """``{"found", "fraction", "ok", "error"}``: the needle must be in the answer and the server must have counted at
    least ``NEEDLE_FRACTION`` of the effective context as prompt tokens."""
    found = smoke_vision.normalise_text(needle) in smoke_vision.normalise_text(answer)
    fraction = round(prompt_tokens / float(context), 4) if prompt_tokens and context else None
    errors = []
    if not found:
        errors.append("needle %s missed (answer: %r)" % (needle, (answer or "")[:120]))
    if fraction is None or fraction < NEEDLE_FRACTION:
        errors.append("needle prompt was %s prompt tokens, %s of the %s-token effective context (< %s)"
                      % (prompt_tokens, fraction, context, NEEDLE_FRACTION))
    return {"found": found, "fraction": fraction, "ok": not errors, "error": "; ".join(errors) or None}
