"""Verify of molecule/deploy-gb300: the GB300 pair runs what playbooks/plan.yml plans (shared checks) plus the
NVIDIA specifics: GPUs by device request (no device nodes other than the IMEX channel), head serves, follower
headless."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared"))

from verify_deploy import (  # noqa: E402
    container, node, plan, plans, test_api_as_planned, test_command_is_plan_vllm_args,
    test_container_runs_plan_image, test_env_contains_plan_env, test_host_config_as_planned,
    test_same_container_as_recorded_by_converge, _http_status)

# The shared checks and fixtures are imported so that pytest collects them in this scenario; exported on purpose.
__all__ = [
    "container", "node", "plan", "plans", "test_api_as_planned", "test_command_is_plan_vllm_args",
    "test_container_runs_plan_image", "test_env_contains_plan_env", "test_host_config_as_planned",
    "test_same_container_as_recorded_by_converge"]

testinfra_hosts = ["ansible://vllm_cluster"]


def test_nvidia_container_shape(container, plan):
    hc = container["HostConfig"]
    assert [r["Driver"] for r in hc["DeviceRequests"]] == ["nvidia"]
    assert [d["PathOnHost"] for d in hc["Devices"]] == ["/dev/nvidia-caps-imex-channels/channel0"]
    args = container["Config"]["Cmd"]
    assert args[args.index("--tensor-parallel-size") + 1] == "8" and args[args.index("--nnodes") + 1] == "2"


def test_head_serves_follower_headless(plans):
    head = [h for h, p in plans.items() if p["role"] == "head"]
    workers = [h for h, p in plans.items() if p["role"] != "head"]
    assert head == ["gb300-tray01"] and workers == ["gb300-tray02"]
    assert plans["gb300-tray01"]["serves_http"] and not plans["gb300-tray02"]["serves_http"]
    assert _http_status(plans["gb300-tray01"]["api_url"] + "/v1/models") == 200
