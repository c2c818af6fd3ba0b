"""Verify of molecule/deploy-mi355x: the MI355X pair (DEP, hybrid load balancing, RDMA) runs what
playbooks/plan.yml plans (shared checks) plus the ROCm specifics: /dev/kfd, /dev/dri, /dev/infiniband, group video,
seccomp=unconfined, no device request, every node serves HTTP, and the smoke report of the idempotence run (a
converged re-deploy) carries the used and total GPU memory of every node."""
import glob
import json
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


def test_converged_redeploy_smoke_report_has_used_and_total_gpu_memory(plans):
    """The smoke report reads the preflight probe. The idempotence step re-ran deploy.yml over the running
    deployment (same extra vars, same artifacts directory), so the last report was written while the stand-in held
    its --gpu-memory-utilization share of every faked MI355X: the report shows it, not None."""
    art = os.path.join(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/nonexistent"), "artifacts")
    reports = glob.glob(os.path.join(art, "smoke", "smoke-*.json"))
    assert reports, "no smoke report under %s" % art
    with open(reports[0]) as handle:
        memory = json.load(handle)["gpu_memory"]
    assert sorted(memory) == sorted(plans)
    for host, mem in memory.items():
        assert mem["gpus"] == 8 and mem["total_mib"] == 8 * 294896, (host, mem)
        assert mem["used_mib"] is not None and 0.5 < mem["used_frac"] <= 1.0, (host, mem)
