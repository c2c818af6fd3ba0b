"""The quick profile judges what it asks: exact verdicts of smoke_quick, and each wrong server behaviour failing its
group through the run against the in-test fake server (test_smoke_fake.FakeVLLM)."""
import pytest

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import quick as q
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import runner as sr

from tests.unit.plugins.module_utils.smoke.test_smoke_fake import FakeVLLM
from tests.unit.plugins.module_utils.smoke.test_smoke_runner import params

ITEM = {"id": "arith-0", "kind": "number", "expected": 893, "prompt": "What is 37 * 24 + 5? Answer with the number only."}
SERVED = "moonshotai/Kimi-K3"


def res(content, model=SERVED, prompt_tokens=20, ok=True):
    return {"ok": ok, "content": content, "model": model, "prompt_tokens": prompt_tokens}


def test_text_items_alternate_numbers_and_names():
    items = q.text_items(5)
    assert [i["id"] for i in items] == ["arith-0", "fact-0", "arith-1", "fact-1", "arith-2"]
    assert q.text_items(5) == items and q.text_items(0) == items[:1]


def test_a_right_answer_has_no_problem():
    assert q.judge_text([ITEM], [res("37 * 24 + 5 = 893")], served_name=[SERVED, "k3"]) == {
        "judged": True, "right": 1, "n": 1, "problems": []}
    # a request under the plan's second served name is answered under that name
    assert q.judge_text([ITEM], [res("893", model="k3")], served_name=[SERVED, "k3"])["problems"] == []
    assert q.response_problems("text", "p" * 40, res("893", model="x"), [SERVED, "k3"]) == [
        "text: the response names model 'x', the plan serves 'moonshotai/Kimi-K3' / 'k3' (prompt '%s')" % ("p" * 40)]


def test_every_problem_names_the_group_the_prompt_and_what_came_back():
    got = q.judge_text([ITEM, ITEM, ITEM], [res("894"), res("thinking</think>893", model="other/model"),
                                            res("x", ok=False)], served_name=SERVED)
    assert got == {"judged": True, "right": 1, "n": 2, "problems": [
        "text: wrong answer to 'What is 37 * 24 + 5? Answer with the number only.': expected 893, got '894' "
        "(read as 894)",
        "text: reasoning markers </think> in content (the reasoning parser is not wired) for prompt 'What is 37 * 24 "
        "+ 5? Answer with the number only.': 'thinking</think>893'",
        "text: the response names model 'other/model', the plan serves 'moonshotai/Kimi-K3' (prompt 'What is 37 * "
        "24 + 5? Answer with the number only.')"]}


def test_unjudged_answers_still_check_the_response():
    got = q.judge_text([ITEM], [res("894", prompt_tokens=5000)], judge_answers=False)
    assert got == {"judged": False, "right": None, "n": 1, "problems": [
        "text: usage.prompt_tokens 5000 for a 49-character prompt is outside 6..544 (prompt 'What is 37 * 24 + 5? "
        "Answer with the number only.')"]}


def test_unjudged_answers_still_have_their_markers_name_and_usage_judged():
    # judge_accuracy false (the rehearsal model) leaves the answer alone, not what the parsers and the server did
    got = q.judge_text([ITEM], [res("1897 <think> 316", model="other/model")], judge_answers=False, served_name=SERVED)
    assert got["right"] is None
    assert got["problems"] == [
        "text: reasoning markers <think> in content (the reasoning parser is not wired) for prompt "
        "'What is 37 * 24 + 5? Answer with the number only.': '1897 <think> 316'",
        "text: the response names model 'other/model', the plan serves 'moonshotai/Kimi-K3' "
        "(prompt 'What is 37 * 24 + 5? Answer with the number only.')"]
    assert q.response_problems("long_context", "p" * 40, res("a <think> b"), SERVED)[0].startswith(
        "long_context: reasoning markers <think> in content")


def test_shown_keeps_the_end_and_summary_counts():
    assert q.shown("a" * 10 + "question?", 12) == "...question?"
    assert q.summary_error([]) is None
    assert q.summary_error(["one"]) == "one"
    assert q.summary_error(["a", "b", "c", "d"]) == "4 problem(s): a; b; c"


def test_needle_problem():
    assert q.needle_problem("The code is k3 7731.", "K3-7731", 30000) is None
    assert q.needle_problem("K3-7732", "K3-7731", 30000) == (
        "long_context: needle K3-7731 not found in the answer to the 30000-token prompt (got 'K3-7732')")


@pytest.mark.parametrize("knob, value, group, needle", [
    ("wrong_answers", True, "text", "group text failed: 4 problem(s): text: wrong answer to "),
    ("wrong_answers", True, "long_context", "group long_context failed: long_context: needle K3-7731 not found"),
    ("think_in_content", True, "text", "reasoning markers </think> in content"),
    ("response_model", "someone/else", "text", "the response names model 'someone/else'"),
])
def test_each_wrong_behaviour_fails_its_group(knob, value, group, needle):
    with FakeVLLM() as f:
        setattr(f, knob, value)
        facts = sr.run_smoke(params(f.base_url, groups=[group], expected_served_name=SERVED))
    assert facts["groups"][group]["status"] == "failed"
    assert any(v.startswith("group %s failed: " % group) and needle in v for v in facts["policy"]["violations"]), \
        facts["policy"]["violations"]


def test_random_weights_skip_the_answers_not_the_response_checks():
    with FakeVLLM() as f:
        f.wrong_answers = True
        facts = sr.run_smoke(params(f.base_url, groups=["text", "long_context"], judge_accuracy=False))
    assert facts["policy"]["passed"] is True, facts["policy"]["violations"]
    assert facts["groups"]["text"]["answers"]["judged"] is False
    assert facts["groups"]["long_context"]["needle_judged"] is False


def test_a_custom_image_without_expected_strings_is_refused():
    with FakeVLLM() as f:
        facts = sr.run_smoke(params(f.base_url, groups=["vision"], image="https://example.invalid/receipt.png"))
        sent = len(f.requests)
    assert facts["groups"]["vision"] == {"status": "failed", "error": sr.NO_IMAGE_STRINGS, "retries": {}}
    assert sent == 0


def test_tool_case_plan_exact():
    both = sr.tool_case_plan(["stream", "non_stream"])
    assert len(both) == 12 and [m for _p, _t, m in both[:2]] == ["stream", "non_stream"]
    assert {p for p, _t, _m in both} == {p for p, _t in sr.TOOL_CASES}
    one = sr.tool_case_plan(["non_stream"], rounds=2)
    assert len(one) == 24 and {m for _p, _t, m in one} == {"non_stream"}
    assert sr.tool_case_plan([]) == []
