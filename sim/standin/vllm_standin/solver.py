"""The stand-in's "model" for checkable prompts: arithmetic, facts stated in the prompt, a record as JSON and the
needle of a long context. Anything else gets filler text (chat.py). Plus the wrong-answer corruption of the
faults (faults.py)."""
import json
import re

_NEEDLE_Q = re.compile(r"what is the secret code mentioned above", re.I)
_NEEDLE = re.compile(r"the secret code is ([^\s.]+(?:\.[^\s.]+)*)\.")
_FACT_Q = re.compile(r"question: what is (\w+)'s ([a-z ]+?)\?", re.I)
_JSON_Q = re.compile(r"as JSON: (.+?)\. Answer", re.I)
_ARITH_Q = re.compile(r"what is ([0-9+\-* ()]+)\?", re.I)
_TOKEN = re.compile(r"\s*(\d+|[-+*()])")


def _expr(tokens, pos):
    value, pos = _term(tokens, pos)
    while pos < len(tokens) and tokens[pos] in "+-":
        op = tokens[pos]
        rhs, pos = _term(tokens, pos + 1)
        value = value + rhs if op == "+" else value - rhs
    return value, pos


def _term(tokens, pos):
    value, pos = _atom(tokens, pos)
    while pos < len(tokens) and tokens[pos] == "*":
        rhs, pos = _atom(tokens, pos + 1)
        value *= rhs
    return value, pos


def _atom(tokens, pos):
    tok = tokens[pos]
    if tok == "(":
        value, pos = _expr(tokens, pos + 1)
        return value, pos + 1
    if tok == "-":
        value, pos = _atom(tokens, pos + 1)
        return -value, pos
    return int(tok), pos + 1


def arithmetic(text):
    """Integer value of an expression of + - * and parentheses; None when it does not parse."""
    tokens, pos = [], 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            return None
        tokens.append(m.group(1))
        pos = m.end()
    try:
        value, end = _expr(tokens, 0)
    except (IndexError, ValueError):
        return None
    return value if end == len(tokens) else None


def _record(pairs):
    out = {}
    for pair in pairs.split(","):
        key, _sep, value = pair.strip().partition("=")
        out[key.strip()] = int(value) if value.strip().isdigit() else value.strip()
    return json.dumps(out)


NO_NEEDLE = "I could not find a secret code in the text."


def is_needle_question(text):
    """Whether ``text`` asks for the long-context needle."""
    return bool(_NEEDLE_Q.search(text))


def solve(text):
    """The right answer to a checkable prompt, else None."""
    if _NEEDLE_Q.search(text):
        m = _NEEDLE.search(text)
        return m.group(1) if m else None
    m = _FACT_Q.search(text)
    if m:
        fact = re.search(r"%s's %s is ([^\s.]+(?:\.[^\s.]+)*)\." % (re.escape(m.group(1)), re.escape(m.group(2))),
                         text)
        return fact.group(1) if fact else None
    m = _JSON_Q.search(text)
    if m:
        return _record(m.group(1))
    m = _ARITH_Q.search(text)
    if m:
        value = arithmetic(m.group(1))
        return None if value is None else str(value)
    return None


def corrupt(answer):
    """A wrong answer of the same shape: the last digit run plus one (a reversed text when there is no digit)."""
    runs = list(re.finditer(r"\d+", answer))
    if not runs:
        return answer[::-1] if len(answer) > 1 else answer + "x"
    m = runs[-1]
    return answer[:m.start()] + str(int(m.group(0)) + 1) + answer[m.end():]
