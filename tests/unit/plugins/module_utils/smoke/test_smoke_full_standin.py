"""The full smoke profile against real stand-in processes (started here, one per scenario): a healthy server passes
every gate; each serving fault fails the gate it targets and no other."""
import time

import pytest

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import runner as sr

from vllm_standin import testing

pytest.importorskip("openai")
pytest.importorskip("jsonschema")

SERVED = "moonshotai/Kimi-K3"
GATES = ("correctness", "api", "pd", "tool_verifier")


class Server(object):
    def __init__(self, **env):
        self.host = testing.loopback_ip()
        self.port = testing.free_port(self.host)
        self.proc = testing.Proc(["serve", SERVED, "--host", self.host, "--port", str(self.port), "-tp", "8",
                                  "--max-model-len", "32768", "--enable-auto-tool-choice", "--tool-call-parser",
                                  "kimi_k3", "--reasoning-parser", "kimi_k3"],
                                 env=testing.fast_env(VLLM_STANDIN_NATURAL_TOKENS="16", **env))
        assert testing.wait_status(self.host, self.port, 200, proc=self.proc), self.proc.log()

    @property
    def url(self):
        return "http://%s:%d" % (self.host, self.port)


@pytest.fixture
def servers():
    started = []

    def start(**env):
        started.append(Server(**env))
        return started[-1]

    yield start
    for s in started:
        s.proc.stop()


def params(base_url, **kw):
    p = {"base_url": base_url + "/v1", "model": None, "api_key": None, "groups": [], "profile": "full",
         "max_tokens": 512, "reasoning_effort": "low", "extra_body": None, "timeout": 30.0, "concurrency": 4,
         "long_context_tokens": 4000, "tool_call_retries": 2, "tool_call_rounds": 1, "tool_choice": "auto",
         "image": None, "image_expected_tokens": None, "metrics_urls": None, "metrics_interval": 0.2,
         "reproduction": None, "correctness_concurrency": 32, "correctness_seed": 0, "backends": [],
         "judge_accuracy": True, "expected_served_name": SERVED, "expected_version": "0.28.0",
         "reasoning_key": "reasoning", "needle_token_budget": 131072, "previous_tool_figures": None,
         "pd_limits": None, "fail_policy": {"fail_on_group_failure": True}}
    p.update(kw)
    return p


def gates_hit(facts):
    return sorted({v.split(":", 1)[0] for v in facts["policy"]["violations"]})


def test_healthy_stand_in_passes_every_gate(servers):
    s = servers()
    t0 = time.perf_counter()
    facts = sr.run_smoke(params(s.url))
    print("full suite against one stand-in: %.1f s" % (time.perf_counter() - t0))
    assert facts["policy"] == {"passed": True, "violations": []}, facts["policy"]
    c = facts["groups"]["correctness"]["correctness"]["targets"]["endpoint"]
    assert c["accuracy"]["rate"] == 1.0 and c["accuracy"]["n"] == 32
    assert c["needle"]["ok"] and c["needle"]["fraction"] >= 0.9
    t = facts["groups"]["tool_verifier"]["tool_verifier"]
    assert (t["cases"], t["schema_accuracy"], t["tool_call_f1"], t["first_attempt_success"]) == (106, 1.0, 1.0, 1.0)
    assert facts["groups"]["api"]["api"]["errors"] == []


@pytest.mark.parametrize("env, gate, needle", [
    ({"VLLM_STANDIN_REASONING_LEAK": "1"}, "api", "reasoning markers </think> in content"),
    ({"VLLM_STANDIN_SERVED_NAME": "someone/else"}, "api", "the plan's name is moonshotai/Kimi-K3"),
    ({"VLLM_STANDIN_INVALID_PARAM_STATUS": "500"}, "api", "answered with HTTP 500 instead of 400"),
    ({"VLLM_STANDIN_REPORTED_VERSION": "0.27.1"}, "api", "/version reports 0.27.1, the plan deploys 0.28.0"),
    ({"VLLM_STANDIN_WRONG_ANSWERS_ABOVE": "2", "VLLM_STANDIN_ITL_MS": "5"}, "correctness", "checkable prompts right"),
    ({"VLLM_STANDIN_TOOL_FAULT": "schema_violation", "VLLM_STANDIN_TOOL_FAULT_RATE": "0.3"}, "tool_verifier",
     "schema_accuracy"),
])
def test_each_fault_fails_its_gate_and_no_other(servers, env, gate, needle):
    s = servers(**env)
    facts = sr.run_smoke(params(s.url))
    assert gates_hit(facts) == [gate], facts["policy"]["violations"]
    assert any(needle in v for v in facts["policy"]["violations"]), facts["policy"]["violations"]


def test_wrong_answers_on_one_replica_show_in_its_accuracy_and_agreement(servers):
    good, bad = servers(), servers(VLLM_STANDIN_WRONG_ANSWERS_ABOVE="2", VLLM_STANDIN_ITL_MS="5")
    facts = sr.run_smoke(params(good.url, backends=[{"url": good.url, "kind": "worker"},
                                                    {"url": bad.url, "kind": "worker"}]))
    targets = facts["groups"]["correctness"]["correctness"]["targets"]
    assert targets["endpoint"]["accuracy"]["rate"] == 1.0 and targets[good.url]["agreement"]["rate"] == 1.0
    assert targets[bad.url]["accuracy"]["rate"] < 1.0 and targets[bad.url]["agreement"]["rate"] < 1.0
    violations = facts["policy"]["violations"]
    assert gates_hit(facts) == ["correctness"] and all(bad.url in v for v in violations), violations


def test_random_weights_model_is_not_judged(servers):
    s = servers(VLLM_STANDIN_WRONG_ANSWERS_ABOVE="1")
    facts = sr.run_smoke(params(s.url, judge_accuracy=False))
    c = facts["groups"]["correctness"]["correctness"]
    assert c["judged"] is False and c["note"].startswith("accuracy not judged")
    assert "accuracy" not in c["targets"]["endpoint"]
    assert facts["policy"]["passed"] is True, facts["policy"]["violations"]


def quick(base_url, **kw):
    return params(base_url, profile="quick", groups=list(sr.QUICK_GROUPS), max_tokens=256, **kw)


def test_healthy_stand_in_passes_the_default_profile(servers):
    s = servers()
    t0 = time.perf_counter()
    facts = sr.run_smoke(quick(s.url))
    print("quick profile against one stand-in: %.1f s" % (time.perf_counter() - t0))
    assert facts["policy"] == {"passed": True, "violations": []}, facts["policy"]
    g = facts["groups"]
    assert g["text"]["answers"] == {"judged": True, "right": 4, "n": 4, "problems": []}
    assert g["long_context"]["needle_found"] is True and g["vision"]["ocr"]["ok"] is True
    assert g["tool_calling"]["tool_calls"]["first_attempt"]["n"] == 12


@pytest.mark.parametrize("env, failed, needle", [
    # 0: every checkable answer is wrong, the needle's too (1 would spare a request alone in flight)
    ({"VLLM_STANDIN_WRONG_ANSWERS_ABOVE": "0"}, ["long_context", "text"], "wrong answer to "),
    ({"VLLM_STANDIN_REASONING_LEAK": "1"}, ["long_context", "text", "vision"], "reasoning markers </think> in content"),
    ({"VLLM_STANDIN_NEEDLE_LOST_ABOVE": "2000"}, ["long_context"], "needle K3-7731 not found"),
    ({"VLLM_STANDIN_SERVED_NAME": "someone/else"}, ["long_context", "text", "vision"],
     "the response names model 'someone/else', the plan serves 'moonshotai/Kimi-K3'"),
])
def test_each_serving_fault_fails_the_default_profile(servers, env, failed, needle):
    s = servers(**env)
    facts = sr.run_smoke(quick(s.url))
    violations = facts["policy"]["violations"]
    assert sorted(n for n, g in facts["groups"].items() if g["status"] != "ok") == failed, violations
    assert any(v.startswith("group %s failed: " % failed[-1]) and needle in v for v in violations), violations
