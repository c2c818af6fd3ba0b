# -*- coding: utf-8 -*-
"""The judgements of the quick profile's groups (the default smoke of every deploy). Pure functions, no I/O.

Every response of the ``text`` group is judged on four things, each of which has let a broken deployment pass a
smoke that only asked for a non-empty answer:

- the answer: the prompts are the correctness suite's checkable ones (numbers and names, ``smoke_correctness``),
  compared by normalised value; garbage output (vLLM issues 51798, 52442) fails here. Not judged when the plan says
  the weights are not meaningful (``judge_accuracy: false``, the rehearsal's random-weight model);
- the reasoning split: no think marker in ``content`` (a reasoning parser that is not wired, ``smoke_api``); not
  judged either for weights that are not meaningful (a random model emits think markers as any other token);
- the served name: the response's ``model`` is the plan's served name (a response can name another model than
  ``/v1/models`` lists when a router or a wrong container answers);
- ``usage.prompt_tokens`` is plausible for the prompt's length (``smoke_api.judge_prompt_tokens``).

A problem names the group, the prompt and what came back, so the play's failure says which answer was wrong.
"""
from __future__ import annotations

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import api as smoke_api
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import correctness as smoke_correctness

TEXT_KINDS = (smoke_correctness.NUMBER, smoke_correctness.FACT)
PROMPT_SHOWN = 90
ANSWER_SHOWN = 120


def text_items(n, seed=0):
    """``n`` checkable prompts for the text group: the correctness suite's arithmetic and fact prompts, alternating
    (seeded, so reruns send the same prompts)."""
    n = max(1, int(n))
    items = [i for i in smoke_correctness.build_prompts(seed=seed, per_kind=-(-n // len(TEXT_KINDS)))
             if i["kind"] in TEXT_KINDS]
    return items[:n]


def shown(text, limit):
    """``text`` as a report quotes it: at most ``limit`` characters, the end kept (where a question asks)."""
    text = str(text or "")
    return text if len(text) <= limit else "..." + text[-(limit - 3):]


def expected_names(expected):
    """The plan's served names (vLLM answers under the name the request used, which may be any of them); [] when
    the plan names none."""
    if isinstance(expected, (list, tuple)):
        return [str(n) for n in expected if n]
    return [str(expected)] if expected else []


def response_problems(group, prompt, res, served_name=None, text_only=True):
    """What is wrong with one successful response besides its answer: think markers in ``content``, another served
    name, an implausible ``usage.prompt_tokens`` (``text_only``: the prompt was ``prompt`` alone; an image's tokens
    depend on the vision encoder, so an image prompt is not counted). ``prompt``: the user text sent. These hold
    for any weights, ``judge_accuracy: false`` too: markers in ``content`` are the reasoning parser's fault."""
    out = []
    content = res.get("content") or ""
    markers = [m for m in smoke_api.REASONING_MARKERS if m in content]
    if markers:
        out.append("%s: reasoning markers %s in content (the reasoning parser is not wired) for prompt %r: %r"
                   % (group, ", ".join(markers), shown(prompt, PROMPT_SHOWN), shown(res.get("content"), ANSWER_SHOWN)))
    want = expected_names(served_name)
    if want and res.get("model") not in want:
        out.append("%s: the response names model %r, the plan serves %s (prompt %r)"
                   % (group, res.get("model"), " / ".join(repr(n) for n in want), shown(prompt, PROMPT_SHOWN)))
    tokens = smoke_api.judge_prompt_tokens(res.get("prompt_tokens"), len(prompt or ""))
    if text_only and not tokens["ok"]:
        out.append("%s: %s (prompt %r)" % (group, tokens["error"], shown(prompt, PROMPT_SHOWN)))
    return out


def answer_problem(group, item, res):
    """A wrong answer to a checkable prompt as a problem (None when right)."""
    verdict = smoke_correctness.judge(item, res.get("content"))
    if verdict["ok"]:
        return None
    return ("%s: wrong answer to %r: expected %s, got %r (read as %r)"
            % (group, shown(item["prompt"], PROMPT_SHOWN), item["expected"], shown(res.get("content"), ANSWER_SHOWN),
               verdict["value"]))


def judge_text(items, results, judge_answers=True, served_name=None):
    """``{"judged", "right", "n", "problems"}`` over the text group's results (``results[i]`` answers
    ``items[i]``); failed requests are the group's transport errors, not judged here."""
    problems, right, n = [], 0, 0
    for item, res in zip(items, results):
        if not res.get("ok"):
            continue
        n += 1
        wrong = answer_problem("text", item, res) if judge_answers else None
        right += 0 if wrong else 1
        problems += ([wrong] if wrong else []) + response_problems("text", item["prompt"], res, served_name)
    return {"judged": bool(judge_answers), "right": right if judge_answers else None, "n": n, "problems": problems}


def summary_error(problems, limit=3):
    """The group's ``error`` text: how many problems, then the first few (the policy shows 300 characters)."""
    if not problems:
        return None
    head = "%d problem(s): " % len(problems) if len(problems) > 1 else ""
    return head + "; ".join(problems[:limit])


def needle_problem(answer, needle, prompt_tokens):
    """The long-context group's verdict: the needle must be in the answer (None when it is)."""
    if smoke_correctness.normalise_name(needle) in smoke_correctness.normalise_name(answer):
        return None
    return ("long_context: needle %s not found in the answer to the %s-token prompt (got %r)"
            % (needle, prompt_tokens, shown(answer, ANSWER_SHOWN)))
