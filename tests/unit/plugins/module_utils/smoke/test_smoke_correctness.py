"""Correctness judgements: normalised answers, accuracy, router/backend agreement, needle calibration."""
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import correctness as c


def test_prompts_are_seeded_and_cover_every_kind():
    a, b = c.build_prompts(seed=1, per_kind=2), c.build_prompts(seed=1, per_kind=2)
    assert a == b and a != c.build_prompts(seed=2, per_kind=2)
    assert [p["kind"] for p in a] == ["number", "fact", "json"] * 2
    with_ocr = c.build_prompts(seed=1, per_kind=1, ocr_tokens=["NORTHWIND"])
    assert with_ocr[-1] == {"id": "ocr-receipt", "kind": "ocr", "expected": ["NORTHWIND"], "prompt": None}
    first = a[0]
    assert first["prompt"].startswith("What is ") and first["prompt"].endswith("Answer with the number only.")


def test_number_judged_by_the_last_number():
    item = {"kind": "number", "expected": 893}
    assert c.judge(item, "37 * 24 + 5 = 893") == {"ok": True, "value": 893}
    assert c.judge(item, "The answer is 893.") == {"ok": True, "value": 893}
    assert c.judge(item, "**893**\n") == {"ok": True, "value": 893}
    assert c.judge(item, "894") == {"ok": False, "value": 894}
    assert c.judge(item, "I don't know") == {"ok": False, "value": None}
    assert c.judge({"kind": "number", "expected": 1250}, "1,250") == {"ok": True, "value": 1250}
    assert c.judge({"kind": "number", "expected": -7}, "-7") == {"ok": True, "value": -7}


def test_fact_judged_by_the_normalised_code():
    item = {"kind": "fact", "expected": "QX-4417"}
    assert c.judge(item, "qx 4417") == {"ok": True, "value": "QX4417"}
    assert c.judge(item, "Tomas's code is QX-4417.")["ok"] is True
    assert c.judge(item, "QX-4418")["ok"] is False


def test_json_judged_by_the_parsed_object():
    item = {"kind": "json", "expected": {"id": "R-5", "qty": 3, "colour": "red"}}
    assert c.judge(item, '```json\n{"id": "R-5", "qty": 3, "colour": "Red"}\n```')["ok"] is True
    assert c.judge(item, '{"qty": 3.0, "colour": "red", "id": "R-5"}') == {
        "ok": True, "value": '{"colour": "red", "id": "R-5", "qty": 3.0}'}
    assert c.judge(item, '{"id": "R-5", "qty": "3", "colour": "red"}')["ok"] is False  # a string, not a number
    assert c.judge(item, '{"id": "R-5", "qty": 4, "colour": "red"}')["ok"] is False
    assert c.judge(item, '{"id": "R-5", "qty": 3}')["ok"] is False  # a key missing
    assert c.judge(item, '{"id": "R-5", "qty": true, "colour": "red"}')["ok"] is False
    assert c.judge(item, "no json here") == {"ok": False, "value": None}


def test_parse_json_answer():
    assert c.parse_json_answer('x {"a": 1} y {"b": 2}') == {"a": 1}  # the first object
    assert c.parse_json_answer('x {"a": {"b": 1}} tail }') == {"a": {"b": 1}}
    assert c.parse_json_answer("[1, 2]") is None
    assert c.parse_json_answer('{"a": 1') is None


def test_ocr_judged_by_required_tokens():
    item = {"kind": "ocr", "expected": ["NORTHWIND", "18.09"]}
    assert c.judge(item, "Northwind ... TOTAL 18.09")["ok"] is True
    assert c.judge(item, "Northwind ... TOTAL 18.90")["ok"] is False


def test_accuracy_and_agreement_exact():
    assert c.accuracy([{"ok": True}] * 30 + [{"ok": False}] * 2) == {
        "k": 30, "n": 32, "rate": 0.9375, "ci95": [0.798529, 0.982689]}
    router = {"a": 1, "b": "X", "c": None, "d": 4}
    backend = {"a": 1, "b": "Y", "c": 3, "d": 4, "e": 5}
    assert c.agreement(router, backend) == {"k": 2, "n": 3, "rate": 0.666667, "ci95": [0.20766, 0.938508]}
    assert c.agreement({}, backend)["rate"] is None


def test_needle_calibration_exact():
    per, overhead = c.fit_tokens_per_rep(100, 2580, 300, 7640)
    assert (per, overhead) == (25.3, 50.0)
    with pytest.raises(ValueError, match="must differ in length"):
        c.fit_tokens_per_rep(100, 2580, 100, 2580)
    assert c.effective_context(1048576) == 131072
    assert c.effective_context(32768) == 32768
    assert c.effective_context(1048576, budget=0) == 1048576
    assert c.effective_context(None) is None
    reps = c.needle_reps(131072, per, overhead)
    assert reps == 4661
    assert overhead + reps * per >= 0.9 * 131072
    # a context too small for 90 % plus the answer's room keeps the room
    assert c.needle_reps(2048, per, overhead, answer_tokens=256) == 68


def test_needle_judgement():
    ok = c.judge_needle("The code is K3-7731.", "K3-7731", 118000, 131072)
    assert ok == {"found": True, "fraction": 0.9003, "ok": True, "error": None}
    short = c.judge_needle("K3-7731", "K3-7731", 100000, 131072)
    assert short["ok"] is False and short["error"] == (
        "needle prompt was 100000 prompt tokens, 0.7629 of the 131072-token effective context (< 0.9)")
    missed = c.judge_needle("no idea", "K3-7731", 118000, 131072)
    assert missed["error"] == "needle K3-7731 missed (answer: 'no idea')"


def test_needle_prompt_places_the_needle_in_the_middle():
    text = c.needle_prompt(10, "K3-1")
    assert text.count(c.FILLER) == 10
    assert text.index("K3-1") == len(c.FILLER * 5) + len("\nRemember: the secret code is ")


@given(st.text(max_size=200))
def test_judges_never_raise(answer):
    for item in c.build_prompts(seed=0, per_kind=1, ocr_tokens=["A"]):
        assert c.judge(item, answer)["ok"] in (True, False)


def test_generated_prompts_exact_for_seed_0():
    items = c.build_prompts(seed=0, per_kind=1)
    assert [i["id"] for i in items] == ["arith-0", "fact-0", "json-0"]
    for item in items:
        assert c.judge(item, str(item["expected"]) if item["kind"] != "json" else
                       __import__("json").dumps(item["expected"]))["ok"], item
    arith, fact, rec = items
    a, b, op, cc = __import__("re").match(r"What is (\d+) \* (\d+) ([+-]) (\d+)\?", arith["prompt"]).groups()
    assert 11 <= int(a) <= 99 and 11 <= int(b) <= 99 and 2 <= int(cc) <= 40
    assert arith["expected"] == int(a) * int(b) + (int(cc) if op == "+" else -int(cc))
    assert fact["prompt"].count("'s ") == 5 and fact["prompt"].endswith("Answer with the code only.")
    assert __import__("re").fullmatch(r"[A-Z]{2}-\d{4}", fact["expected"])
    assert "%s." % fact["expected"] in fact["prompt"]
    assert set(rec["expected"]) == {"id", "qty", "colour"} and 1 <= rec["expected"]["qty"] <= 60
    assert rec["prompt"] == ("Return this record as JSON: id=%s, qty=%d, colour=%s. Answer with JSON only, numbers as "
                             "numbers." % (rec["expected"]["id"], rec["expected"]["qty"], rec["expected"]["colour"]))
    assert c.build_prompts(seed=0, per_kind=0) == []


def test_number_and_needle_edges():
    assert c.last_number("v1.5 then 2,500.25") == 2500.25
    assert c.last_number("-3 and -4") == -4
    assert c.last_number(None) is None
    assert c.judge_needle("", "K3-1", None, 100) == {
        "found": False, "fraction": None, "ok": False,
        "error": "needle K3-1 missed (answer: ''); needle prompt was None prompt tokens, None of the 100-token "
                 "effective context (< 0.9)"}
    assert c.judge_needle("K3-1", "K3-1", 90, 100)["ok"] is True
    assert c.judge_needle("K3-1", "K3-1", 89, 100)["ok"] is False
    assert c.fit_tokens_per_rep(10, 300, 20, 550) == (25.0, 50.0)
    with pytest.raises(ValueError):
        c.fit_tokens_per_rep(10, 300, 20, 300)
    assert c.needle_reps(1000, 10.0, 0.0, answer_tokens=0) == 91
    assert c.needle_reps(1000, 10.0, 5000.0) == 1


@pytest.mark.parametrize("text, value", [
    ("1\u202f250", 1250),                   # narrow no-break space between digit groups
    ("1\u00a0250\u00a0000", 1250000),
    ("\u22127", -7),                        # Unicode minus
    ("The result: **2,500**.", 2500),
    ("3.0", 3.0),
    ("12 apples, then 4 pears", 4),
    ("1 25", 25),                           # a plain space separates numbers, it groups none
    ("9" * 5000, float("9" * 5000)),        # past int()'s digit limit: a float, no exception
    ("", None),
])
def test_last_number_exact(text, value):
    assert c.last_number(text) == value


@pytest.mark.parametrize("text, value", [
    ("Tomás", "TOMAS"), ("qx-4417", "QX4417"), ("\uff31\uff38\uff0d\uff14\uff14\uff11\uff17", "QX4417"),
    ("  Ravi's code is AB-1234. ", "RAVISCODEISAB1234."), (None, ""), ("ß", "SS"),
])
def test_normalise_name_exact(text, value):
    assert c.normalise_name(text) == value


def test_huge_and_deep_answers_are_judged_not_raised():
    assert c.judge({"kind": "number", "expected": 7}, "1" * 4400) == {"ok": False, "value": float("1" * 4400)}
    assert c.judge({"kind": "number", "expected": 7}, "7.0") == {"ok": True, "value": 7.0}
    assert c.parse_json_answer("{" * 5000 + "}" * 5000) is None  # no object in the first 64 tries; fast
    assert c.judge({"kind": "json", "expected": {"a": 1}}, '{"a": %s}' % ("9" * 4000))["ok"] is False


@given(st.integers(min_value=-10 ** 12, max_value=10 ** 12), st.sampled_from([",", "\u202f", "\u00a0", ""]))
def test_last_number_reads_grouped_integers(n, sep):
    grouped = "{:,}".format(n).replace(",", sep)
    assert c.last_number("The answer is %s." % grouped.replace("-", "\u2212")) == n


@given(st.text(max_size=300))
def test_normalisers_never_raise(text):
    for kind in (c.NUMBER, c.FACT, c.JSON_KIND, c.OCR):
        c.normalised_answer(kind, text)
    assert set(c.normalise_name(text)) <= set("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ.")
