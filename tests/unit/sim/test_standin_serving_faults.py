"""The stand-in's checkable answers, its serving faults, its tool calls against the smoke's verifier cases, and the
measured tool-call failure rate against the injected one (Wilson interval)."""
import random

import pytest

from vllm_standin import chat, config, engine, faults, flags, solver

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import correctness as corr
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import toolcases as cases_mod
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import verifier as ver

pytest.importorskip("jsonschema")


def behaviour(monkeypatch, serving=None, **env):
    for k in ("VLLM_STANDIN_TOOL_FAULT", "VLLM_STANDIN_TOOL_FAULT_RATE", "VLLM_STANDIN_SEED",
              "VLLM_ENFORCE_STRICT_TOOL_CALLING"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    snap = flags.Snapshot(flags.load_snapshot("0.28.0"))
    argv = ["m", "-tp", "8", "--enable-auto-tool-choice", "--tool-call-parser", "kimi_k3",
            "--reasoning-parser", "kimi_k3"]
    _model, values, _explicit = flags.parse_args(argv, snap)
    return chat.ChatBehaviour(config.Deployment("m", values, snap), 131072, faults=serving)


def answer(beh, messages, **body):
    req = {"messages": messages, "max_tokens": 4000}
    req.update(body)
    return beh.prepare(req)[1]


def test_solver_answers_exactly():
    assert solver.arithmetic("37 * 24 + 5") == 893
    assert solver.arithmetic("2 * (3 - 10)") == -14
    assert solver.arithmetic("2 ** 3") is None
    assert solver.solve("What is 12 * 11 - 7? Answer with the number only.") == "125"
    assert solver.solve("Facts: Ana's desk code is QX-1234. Bo's desk code is ZZ-9. Question: what is Bo's desk "
                        "code? Answer with the code only.") == "ZZ-9"
    assert solver.solve("Return this record as JSON: id=R-5, qty=3, colour=red. Answer with JSON only.") == \
        '{"id": "R-5", "qty": 3, "colour": "red"}'
    assert solver.solve(corr.needle_prompt(4, "K3-7731")) == "K3-7731"
    assert solver.solve("Explain a KV cache.") is None


def test_corrupt_changes_the_last_number_or_reverses():
    assert solver.corrupt("9023") == "9024"
    assert solver.corrupt("QX-4417") == "QX-4418"
    assert solver.corrupt('{"id": "R-5", "qty": 3}') == '{"id": "R-5", "qty": 4}'
    assert solver.corrupt("abc") == "cba"
    assert solver.corrupt("a") == "ax"


def test_every_correctness_prompt_is_answered_right_and_corruption_is_judged_wrong(monkeypatch):
    beh = behaviour(monkeypatch)
    for item in corr.build_prompts(seed=3, per_kind=5):
        plan = answer(beh, [{"role": "user", "content": item["prompt"]}], reasoning_effort="none")
        text = "".join(plan.content)
        assert plan.answer == text
        assert corr.judge(item, text)["ok"], (item, text)
        assert not corr.judge(item, solver.corrupt(text))["ok"], (item, text)


def test_serving_fault_switches():
    f = faults.Faults({"VLLM_STANDIN_WRONG_ANSWERS_ABOVE": "8", "VLLM_STANDIN_REASONING_LEAK": "1",
                       "VLLM_STANDIN_SERVED_NAME": "other/model", "VLLM_STANDIN_INVALID_PARAM_STATUS": "500",
                       "VLLM_STANDIN_DECODE_RECOMPUTE": "yes"})
    assert (f.answers_wrong(7), f.answers_wrong(8), f.answers_wrong(30)) == (False, True, True)
    assert f.served_names(["moonshotai/Kimi-K3"]) == ["other/model"]
    assert (f.status_of(400), f.status_of(404), f.status_of(500)) == (500, 404, 500)
    assert f.reasoning_leak and f.decode_recompute
    none = faults.Faults({"VLLM_STANDIN_WRONG_ANSWERS_ABOVE": "x"})
    assert not none.answers_wrong(10 ** 6) and none.status_of(400) == 400
    lost = faults.Faults({"VLLM_STANDIN_NEEDLE_LOST_ABOVE": "1000"})
    assert (lost.needle_lost(1000), lost.needle_lost(1001), none.needle_lost(10 ** 6)) == (False, True, False)
    assert none.served_names(["a", "b"]) == ["a", "b"]


def test_only_the_needle_question_is_marked_for_the_needle_fault(monkeypatch):
    beh = behaviour(monkeypatch)
    needle = answer(beh, [{"role": "user", "content": corr.needle_prompt(4, "K3-7731")}])
    arith = answer(beh, [{"role": "user", "content": "What is 2 * 3 + 1?"}])
    assert (needle.needle, needle.answer, arith.needle, arith.answer) == (True, "K3-7731", False, "7")
    assert solver.NO_NEEDLE and not solver.solve(solver.NO_NEEDLE)


def test_reasoning_leak_puts_think_text_and_end_marker_into_content(monkeypatch):
    healthy = answer(behaviour(monkeypatch), [{"role": "user", "content": "What is 2 * 3 + 1?"}])
    assert healthy.reasoning and "</think>" not in "".join(healthy.content)
    leak = answer(behaviour(monkeypatch, faults.Faults({"VLLM_STANDIN_REASONING_LEAK": "1"})),
                  [{"role": "user", "content": "What is 2 * 3 + 1?"}])
    content = "".join(leak.content)
    assert leak.reasoning == [] and content == "".join(healthy.reasoning) + "</think>7"


def _judge_case(case, plan, stream_mode=False):
    calls = plan.tool_calls
    valid = ver.k2vv_tool_calls_valid(plan.finish_reason, calls, case["tools"])
    return {"finish_reason": plan.finish_reason, "names": [c["name"] for c in calls], "valid": valid,
            "id_errors": cases_mod.id_format_errors(calls, case["messages"])}


def test_every_tool_case_gets_the_expected_trigger_names_ids_and_schema_valid_calls(monkeypatch):
    beh = behaviour(monkeypatch)
    cases = cases_mod.build_cases()
    assert len(cases) >= 50
    for case in cases:
        plan = answer(beh, case["messages"], tools=case["tools"], tool_choice="auto")
        got = _judge_case(case, plan)
        if case["expect_call"]:
            assert got["finish_reason"] == "tool_calls" and got["valid"] is True, (case["id"], plan.tool_calls)
            assert got["names"] == case["expected_tools"] and got["id_errors"] == [], (case["id"], got)
        else:
            assert got["finish_reason"] == "stop" and got["names"] == [], (case["id"], got)


def test_multi_turn_next_call_is_numbered_after_the_history(monkeypatch):
    case = next(c for c in cases_mod.build_cases() if c["kind"] == "multi_turn_next")
    plan = answer(behaviour(monkeypatch), case["messages"], tools=case["tools"])
    assert plan.tool_calls[0]["id"] == "functions.%s:1" % case["expected_tools"][0]


def test_injected_parser_failure_rate_lies_in_the_measured_wilson_interval(monkeypatch):
    beh = behaviour(monkeypatch, VLLM_STANDIN_TOOL_FAULT="schema_violation", VLLM_STANDIN_TOOL_FAULT_RATE="0.08",
                    VLLM_STANDIN_SEED="29")
    cases = [c for c in cases_mod.build_cases() if c["kind"] == "single"]
    n = 600
    failed = 0
    for i in range(n):
        case = cases[i % len(cases)]
        plan = answer(beh, case["messages"], tools=case["tools"], tool_choice="auto")
        failed += ver.k2vv_tool_calls_valid(plan.finish_reason, plan.tool_calls, case["tools"]) is not True
    lo, hi = ver.wilson_interval(failed, n)
    # the stand-in's draw per request: random.Random("<seed>:<request counter>").random() < rate
    injected = sum(random.Random("29:%d" % k).random() < 0.08 for k in range(1, n + 1))
    assert failed == injected == 37  # every injected failure is detected, nothing else is
    assert lo < 0.08 < hi
    assert (round(lo, 4), round(hi, 4)) == (0.0451, 0.0838)


def test_engine_counts_prompt_tokens_by_source_and_prefill_computed(monkeypatch):
    eng = engine.Engine(0, 10 ** 6, 8)
    for source, tokens in (("external_kv_transfer", 3000), ("local_compute", 500)):
        req = engine.Request("r-" + source, tokens, 2)
        req.source = source
        eng.admit(req)
        eng.release(req, "stop")
    assert dict(eng.by_source) == {"external_kv_transfer": 3000, "local_compute": 500}
    assert (eng.h_kv_computed.sum, eng.h_kv_computed.count) == (500.0, 2)
    group = engine.EngineGroup([0], 10 ** 6, 8)
    group.engines[0] = eng
    text = engine.render_metrics(group, "m", {"block_size": "1536"})
    assert 'vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="external_kv_transfer"} 3000.0' \
        in text
    assert 'vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="local_cache_hit"} 0.0' in text
    assert 'vllm:request_prefill_kv_computed_tokens_sum{engine="0",model_name="m"} 500.0' in text
