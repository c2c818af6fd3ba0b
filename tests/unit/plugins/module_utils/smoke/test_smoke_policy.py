"""The smoke fail policy: every criterion on and off, at and across its boundary, with the exact messages."""
import pytest

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import policy as sp


def facts(ttft=(0.5, 1.0), status="ok", rate=(12, 12), findings=None, preemptions=0):
    """Two groups (text, tool_calling) with mean TTFTs ``ttft``; ``rate``: (first attempts right, cases)."""
    return {
        "groups": {"text": {"status": status, "error": "boom" if status != "ok" else None,
                            "ttft_s": {"mean": ttft[0]}},
                   "tool_calling": {"status": "ok", "ttft_s": {"mean": ttft[1]},
                                    "tool_calls": {"first_attempt": {"k": rate[0], "n": rate[1]}}}},
        "log_findings": {"tray01": {"readable": True, "errors": 0}} if findings is None else findings,
        "server": {"window": {"num_preemptions": preemptions}},
    }


def test_healthy_result_passes_every_criterion():
    policy = {"fail_on_group_failure": True, "min_tool_call_success_rate": 0.9, "max_ttft_s": 2.0,
              "fail_on_log_errors": True, "fail_on_preemptions": True}
    assert sp.evaluate_policy(facts(), policy) == []


def test_group_failure_is_on_by_default_and_can_be_turned_off():
    assert sp.evaluate_policy(facts(status="failed"), None) == ["group text failed: boom"]
    assert sp.evaluate_policy(facts(status="failed"), {}) == ["group text failed: boom"]
    assert sp.evaluate_policy(facts(status="failed"), {"fail_on_group_failure": False}) == []


def test_a_group_without_status_counts_as_failed():
    f = {"groups": {"text": {}}}
    assert sp.evaluate_policy(f, {}) == ["group text failed: "]


@pytest.mark.parametrize("rate,limit,violations", [
    ((3, 4), 0.9, []),                  # one recovered hiccup in 4 cases: the upper bound 0.954 is above
    ((11, 12), 0.9, []),
    ((40, 50), 0.9, ["group tool_calling: first-attempt tool-call success 40/50 (0.8, 95 % Wilson interval "
                     "0.669629..0.887562): even the upper bound is below 0.9"]),
    ((41, 50), 0.9, []),                # upper bound 0.902: passes
    ((2, 4), 0.9, ["group tool_calling: first-attempt tool-call success 2/4 (0.5, 95 % Wilson interval "
                   "0.150039..0.849961): even the upper bound is below 0.9"]),
    ((0, 0), 0.5, ["group tool_calling: first-attempt tool-call success 0/0 (None, 95 % Wilson interval "
                   "None..None): even the upper bound is below 0.5"]),
    ((0, 12), None, []),                # no limit given: off
    ((0, 12), 0.0, []),                 # 0 = every rate passes (the cpu rehearsal's random weights)
])
def test_tool_call_success_rate(rate, limit, violations):
    policy = {} if limit is None else {"min_tool_call_success_rate": limit}
    assert sp.evaluate_policy(facts(rate=rate), policy) == violations


def test_tool_call_rate_needs_the_tool_calling_group():
    f = facts()
    del f["groups"]["tool_calling"]
    assert sp.evaluate_policy(f, {"min_tool_call_success_rate": 0.9}) == []


@pytest.mark.parametrize("limit,violations", [
    (0, []),                            # 0 = off
    (None, []),
    (2.0, []),
    (1.0, []),                          # the slowest group is exactly at the limit: passes
    (0.75, ["group tool_calling mean TTFT 1.000s above 0.750s"]),
    (0.25, ["group text mean TTFT 0.500s above 0.250s", "group tool_calling mean TTFT 1.000s above 0.250s"]),
    (-1.0, []),
])
def test_max_ttft(limit, violations):
    assert sp.evaluate_policy(facts(), {"max_ttft_s": limit}) == violations


def test_max_ttft_skips_groups_without_a_ttft():
    f = facts()
    f["groups"]["vision"] = {"status": "ok", "ttft_s": {"mean": None}}
    f["groups"]["long_context"] = {"status": "ok"}
    assert sp.evaluate_policy(f, {"max_ttft_s": 0.75}) == ["group tool_calling mean TTFT 1.000s above 0.750s"]


def test_log_errors():
    findings = {"tray02": {"readable": True, "errors": 3}, "tray01": {"readable": True, "errors": 0}}
    assert sp.evaluate_policy(facts(findings=findings), {"fail_on_log_errors": True}) == [
        "3 error line(s) in the container log of tray02"]
    assert sp.evaluate_policy(facts(findings=findings), {"fail_on_log_errors": False}) == []
    assert sp.evaluate_policy(facts(findings=findings), {}) == []


def test_an_unreadable_log_fails_the_log_policy():
    findings = {"tray01": {"readable": True, "errors": 0},
                "tray02": {"readable": False, "error": "vllm_container_log rc 4: permission denied",
                           "errors": None}}
    assert sp.evaluate_policy(facts(findings=findings), {"fail_on_log_errors": True}) == [
        "the container log of tray02 could not be read: vllm_container_log rc 4: permission denied"]
    assert sp.evaluate_policy(facts(findings=findings), {}) == []


def test_no_log_at_all_fails_the_log_policy():
    assert sp.evaluate_policy(facts(findings={}), {"fail_on_log_errors": True}) == [
        "no container log was read, so its error lines could not be counted (fail_on_log_errors)"]


def test_preemptions():
    assert sp.evaluate_policy(facts(preemptions=2), {"fail_on_preemptions": True}) == [
        "2 preemption(s) during the smoke window"]
    assert sp.evaluate_policy(facts(preemptions=2), {}) == []
    assert sp.evaluate_policy(facts(preemptions=0), {"fail_on_preemptions": True}) == []
    assert sp.evaluate_policy({"groups": {}}, {"fail_on_preemptions": True}) == []


def test_violations_come_in_a_fixed_order():
    f = facts(status="failed", rate=(2, 4), preemptions=1,
              findings={"tray01": {"readable": True, "errors": 1}})
    policy = {"min_tool_call_success_rate": 0.9, "max_ttft_s": 0.75, "fail_on_log_errors": True,
              "fail_on_preemptions": True}
    assert sp.evaluate_policy(f, policy) == [
        "group text failed: boom", "group tool_calling: first-attempt tool-call success 2/4 (0.5, 95 % Wilson "
        "interval 0.150039..0.849961): even the upper bound is below 0.9",
        "group tool_calling mean TTFT 1.000s above 0.750s", "1 error line(s) in the container log of tray01",
        "1 preemption(s) during the smoke window"]


def test_findings_without_the_readable_flag_count_as_read():
    """Facts of an earlier collection version have no ``readable`` key."""
    assert sp.evaluate_policy(facts(findings={"h": {"errors": 0}}), {"fail_on_log_errors": True}) == []
    assert sp.evaluate_policy(facts(findings={"h": {"errors": 2}}), {"fail_on_log_errors": True}) == [
        "2 error line(s) in the container log of h"]


def test_max_ttft_off_means_off_even_for_slow_groups():
    assert sp.evaluate_policy(facts(ttft=(2.0, 3.0)), {"max_ttft_s": None}) == []
    assert sp.evaluate_policy(facts(ttft=(2.0, 3.0)), {"max_ttft_s": 0}) == []
    assert sp.evaluate_policy(facts(ttft=(2.0, 3.0)), {}) == []


def test_long_group_errors_are_cut_to_300_characters():
    f = facts(status="failed")
    f["groups"]["text"]["error"] = "e" * 400
    assert sp.evaluate_policy(f, {}) == ["group text failed: " + "e" * 300]
