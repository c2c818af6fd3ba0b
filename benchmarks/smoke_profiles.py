#!/usr/bin/env python3
"""Wall time of the quick and full smoke profiles against one stand-in process with the rehearsal timings.

Starts `sim/standin/bin/vllm serve` on a loopback address (TTFT `--ttft-ms`, ITL `--itl-ms`, the given
`--max-model-len`, tool and reasoning parsers on), runs `smoke_runner.run_smoke` once per profile with the role's
defaults (concurrency 4, correctness concurrency 32, max_tokens 2048, reasoning_effort low) and prints the wall time,
each group's wall time and the policy verdict. The full profile's target is at most 3 minutes on the rehearsal
cluster; this is one process on one core's worth of client, so it is a floor, not that figure.

usage: .venv/bin/python benchmarks/smoke_profiles.py [--ttft-ms 50] [--itl-ms 10] [--max-model-len 1048576]
"""
import argparse
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "build", "collections"))
sys.path.insert(0, os.path.join(REPO, "sim", "standin"))

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import runner as sr  # noqa: E402
from vllm_standin import testing  # noqa: E402


def params(base_url, profile):
    return {"base_url": base_url + "/v1", "model": None, "api_key": None, "groups": list(sr.QUICK_GROUPS),
            "profile": profile, "max_tokens": 2048, "reasoning_effort": "low", "extra_body": None, "timeout": 600.0,
            "concurrency": 4, "long_context_tokens": 32000, "tool_call_retries": 2, "tool_call_rounds": 1,
            "tool_choice": "auto", "image": None, "image_expected_tokens": None, "metrics_urls": None,
            "metrics_interval": 0.5, "reproduction": None, "correctness_concurrency": 32, "correctness_seed": 0,
            "backends": [], "judge_accuracy": True, "expected_served_name": "moonshotai/Kimi-K3",
            "expected_version": "0.28.0", "reasoning_key": "reasoning", "needle_token_budget": 131072,
            "previous_tool_figures": None, "pd_limits": None, "fail_policy": {"fail_on_group_failure": True}}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ttft-ms", default="50")
    ap.add_argument("--itl-ms", default="10")
    ap.add_argument("--max-model-len", default="1048576")
    args = ap.parse_args()
    host = testing.loopback_ip()
    port = testing.free_port(host)
    proc = testing.Proc(["serve", "moonshotai/Kimi-K3", "--host", host, "--port", str(port), "-tp", "8",
                         "--max-model-len", args.max_model_len, "--enable-auto-tool-choice", "--tool-call-parser",
                         "kimi_k3", "--reasoning-parser", "kimi_k3"],
                        env=testing.fast_env(VLLM_STANDIN_TTFT_MS=args.ttft_ms, VLLM_STANDIN_ITL_MS=args.itl_ms,
                                             VLLM_STANDIN_ACCESS_LOG="0"))
    try:
        if not testing.wait_status(host, port, 200, proc=proc):
            sys.exit("stand-in did not become healthy:\n" + proc.log()[-2000:])
        for profile in sr.PROFILES:
            t0 = time.perf_counter()
            facts = sr.run_smoke(params("http://%s:%d" % (host, port), profile))
            print("%-5s  wall %6.1f s  policy %s %s" % (profile, time.perf_counter() - t0,
                                                        "PASS" if facts["policy"]["passed"] else "FAIL",
                                                        facts["policy"]["violations"][:3]))
            for name, group in facts["groups"].items():
                print("       %-14s %-6s %s s" % (name, group.get("status"), group.get("wall_s")))
    finally:
        proc.stop()


if __name__ == "__main__":
    main()
