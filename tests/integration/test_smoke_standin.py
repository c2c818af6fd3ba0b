"""vllm_smoke and vllm_capacity_step logic against a locally started stand-in vLLM (sim/standin), no Docker.

Each test starts `sim/standin/bin/vllm serve` on 127.0.0.5 with VLLM_STANDIN_* knobs, waits for /health and stops
the process it started (by PID).
"""
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VLLM = os.path.join(REPO, "sim", "standin", "bin", "vllm")

pytestmark = pytest.mark.skipif(not os.path.exists(VLLM), reason="sim/standin not present")

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.capacity import runner as cr  # noqa: E402
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import runner as sr  # noqa: E402


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.5", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Standin(object):
    def __init__(self, max_model_len=32768, **env):
        self.port = free_port()
        self.base_url = "http://127.0.0.5:%d/v1" % self.port
        e = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_")}
        e.update({"VLLM_STANDIN_LOAD_S": "0", "VLLM_STANDIN_TTFT_MS": "30", "VLLM_STANDIN_ITL_MS": "5"})
        e.update({k: str(v) for k, v in env.items()})
        self.proc = subprocess.Popen(
            [sys.executable, VLLM, "serve", "moonshotai/Kimi-K3", "--host", "127.0.0.5", "--port", str(self.port),
             "--max-model-len", str(max_model_len), "--trust-remote-code", "--tensor-parallel-size", "8",
             "--enable-auto-tool-choice", "--tool-call-parser", "kimi_k3", "--reasoning-parser", "kimi_k3"],
            env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    def __enter__(self):
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("stand-in exited: %s" % self.proc.stdout.read().decode()[-2000:])
            try:
                if urllib.request.urlopen(self.base_url[:-3] + "/health", timeout=1).status == 200:
                    return self
            except Exception:
                time.sleep(0.2)
        raise RuntimeError("stand-in not healthy in 60 s")

    def __exit__(self, *exc):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log = self.proc.stdout.read().decode("utf-8", "replace")


def params(base_url, **kw):
    p = {"base_url": base_url, "model": None, "api_key": None, "groups": list(sr.QUICK_GROUPS), "max_tokens": 512,
         "reasoning_effort": "low", "extra_body": None, "timeout": 60.0, "concurrency": 4,
         "long_context_tokens": 8000, "tool_call_retries": 1, "tool_call_rounds": 1, "tool_choice": "auto",
         "image": None, "image_expected_tokens": None, "metrics_urls": None, "metrics_interval": 0.1,
         "reproduction": None,
         "fail_policy": {"fail_on_group_failure": True, "min_tool_call_success_rate": 0.9}}
    p.update(kw)
    return p


def test_all_groups_pass_and_server_facts_are_read():
    with Standin(VLLM_STANDIN_TTFT_MS=80, VLLM_STANDIN_ITL_MS=10) as s:
        facts = sr.run_smoke(params(s.base_url))
    assert {k: v["status"] for k, v in facts["groups"].items()} == {g: "ok" for g in sr.QUICK_GROUPS}, facts["groups"]
    assert facts["policy"]["passed"]
    assert facts["groups"]["vision"]["ocr"]["ok"]
    assert facts["server"]["version"] and facts["server"]["max_model_len"] == 32768
    assert facts["server"]["kv_cache_size_tokens"] > 0
    # configured TTFT 80 ms, ITL 10 ms (client within a few ms at concurrency <= 4)
    assert 0.075 <= facts["groups"]["text"]["ttft_s"]["p50"] < 0.2
    assert 0.009 <= facts["groups"]["text"]["itl_s"]["p50"] < 0.02


@pytest.mark.parametrize("fault,cls", [
    ("no_call", "no_call"), ("invalid_json", "invalid_json"), ("schema_violation", "schema_violation"),
    ("unknown_tool", "unknown_tool"), ("leak_tokens", "leaked_control_tokens"), ("empty_args", "empty_arguments"),
])
def test_tool_faults_of_the_standin_are_classified(fault, cls):
    with Standin(VLLM_STANDIN_TOOL_FAULT=fault) as s:
        facts = sr.run_smoke(params(s.base_url, groups=["tool_calling"]))
    tc = facts["groups"]["tool_calling"]
    assert tc["status"] == "failed"
    assert cls in tc["tool_calls"]["failures"], tc["tool_calls"]
    assert tc["retries"].get(cls, 0) >= 1


def test_capacity_sweep_reads_kv_budget_and_sweeps():
    with Standin(max_model_len=8192, VLLM_STANDIN_ITL_MS=2) as s:
        out = cr.run_sweep({"base_url": s.base_url, "model": None, "api_key": None, "max_model_len": None,
                            "concurrency_levels": [1, 2, 4], "max_concurrency": 4, "requests_per_level": 1,
                            "output_tokens": 16, "prompt_fraction": 0.25, "max_prompt_tokens": None,
                            "ttft_limit_s": 0, "plateau_gain": 0.05, "stop_on_saturation": False,
                            "reasoning_effort": "low", "extra_body": None, "metrics_urls": None,
                            "metrics_interval": 0.1, "log_text": None, "restarted": False, "timeout": 60})
    assert out["kv"]["kv_cache_size_tokens"] > 0
    assert [st["concurrency"] for st in out["steps"]] == [1, 2, 4]
    assert all(st["failed_requests"] == 0 for st in out["steps"])
    assert out["steps"][-1]["throughput_tok_s"] > out["steps"][0]["throughput_tok_s"]
