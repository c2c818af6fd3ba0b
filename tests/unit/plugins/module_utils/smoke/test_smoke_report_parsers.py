"""The smoke report names the tool and reasoning parsers the server ran (read from the plan's argv by the finalising
step) and the tool group's figures per stream mode, so a tool-call rate is read against what produced it."""
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import finalise as smoke_finalise
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import report as smoke_report

CPU_ARGV = ["vllm", "serve", "/models/x", "--enable-auto-tool-choice", "--tool-call-parser", "kimi_k2",
            "--tool-strict-level", "parameter", "--reasoning-parser", "kimi_k3", "--max-model-len", "4096"]


def _mode(cases, final_ok, attempts, first):
    return {"cases": cases, "final_ok": final_ok, "attempts": attempts, "first_attempt_success_rate": first}


def _facts():
    tc = {"cases": 12, "attempts": 20, "final_success_rate": 1.0, "first_attempt": {"k": 6, "n": 12},
          "by_mode": {"stream": _mode(6, 6, 11, 0.5), "non_stream": _mode(6, 6, 9, 0.5)}}
    return {"groups": {"tool_calling": {"status": "ok", "tool_calls": tc}}, "server": {}}


def test_parsers_are_read_from_both_argv_forms_and_the_last_one_wins():
    assert smoke_report.served_parsers(CPU_ARGV) == {"tool_call_parser": "kimi_k2", "tool_strict_level": "parameter",
                                                     "reasoning_parser": "kimi_k3"}
    argv = ["--tool-call-parser=kimi_k3", "--reasoning-parser", "kimi_k3", "--tool-call-parser", "kimi_k2"]
    assert smoke_report.served_parsers(argv) == {"tool_call_parser": "kimi_k2", "reasoning_parser": "kimi_k3"}
    # a flag without its value (a cut argv) and a router's empty argv name nothing
    assert smoke_report.served_parsers(["--reasoning-parser"]) == {}
    assert smoke_report.served_parsers([]) == {} and smoke_report.served_parsers(None) == {}


def test_finalise_keeps_the_parsers_not_the_argv():
    facts = smoke_finalise.finalise(_facts(), reproduction={"nodes": 2, "vllm_args": CPU_ARGV})
    rep = facts["reproduction"]
    assert "vllm_args" not in rep and rep["nodes"] == 2
    assert (rep["tool_call_parser"], rep["reasoning_parser"], rep["tool_strict_level"]) == (
        "kimi_k2", "kimi_k3", "parameter")


def test_report_names_the_parsers_and_both_stream_modes():
    facts = smoke_finalise.finalise(_facts(), reproduction={"vllm_args": CPU_ARGV})
    md = smoke_report.render_markdown(facts)
    assert ("- by stream mode: non_stream 6/6 cases valid (attempts 9, first-attempt 0.5); "
            "stream 6/6 cases valid (attempts 11, first-attempt 0.5)") in md
    assert "- server parsers: tool `kimi_k2` (strict level parameter), reasoning `kimi_k3`" in md
    assert "| reasoning_parser | kimi_k3 |" in md and "| tool_call_parser | kimi_k2 |" in md


def test_report_says_which_modes_were_not_sent_and_omits_unknown_parsers():
    facts = _facts()
    facts["groups"]["tool_calling"]["tool_calls"]["by_mode"]["stream"] = _mode(0, 0, 0, None)
    md = smoke_report.render_markdown(smoke_finalise.finalise(facts, reproduction={"nodes": 1}))
    assert "- by stream mode: non_stream 6/6 cases valid (attempts 9, first-attempt 0.5)\n" in md
    assert "server parsers" not in md
