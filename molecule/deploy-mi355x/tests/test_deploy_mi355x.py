"""Verify of molecule/deploy-mi355x: the MI355X pair (DEP, hybrid load balancing, RDMA) runs what
playbooks/plan.yml plans (shared checks) plus the ROCm specifics: /dev/kfd, /dev/dri, /dev/infiniband, group video,
seccomp=unconfined, no device request, and every node serves HTTP."""
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


def test_rocm_container_shape(container):
    hc = container["HostConfig"]
    assert sorted(d["PathOnHost"] for d in hc["Devices"]) == ["/dev/dri", "/dev/infiniband", "/dev/kfd"]
    assert hc["GroupAdd"] == ["video"]
    assert "seccomp=unconfined" in hc["SecurityOpt"]
    assert not hc.get("DeviceRequests")
    args = container["Config"]["Cmd"]
    assert "--data-parallel-hybrid-lb" in args and "--headless" not in args


def test_every_node_serves(plans):
    assert sorted(plans) == ["mi355x-node01", "mi355x-node02"]
    for h, p in plans.items():
        assert p["serves_http"], h
        assert _http_status(p["api_url"] + "/health") == 200, h
        assert _http_status(p["api_url"] + "/v1/models") == 200, h
