"""The preflight role end to end on this (GPU-less) machine: two local "nodes" planned as B200 trays.

Nothing here has an NVIDIA stack, so every node fails at the root (vendor) with its dependents skipped; the report
is written by the judging action, and the recap charges every failing node - not just the one that judged. The
NVFP4 case proves preflight looks for the weights of the model the plan serves (the NVFP4 variant's, not the
default model's).
"""
import json
import os
import sys

import pytest
import yaml

from tests.helpers.runner import failed_tasks, run_playbook, task_results

DIGEST = "vllm/vllm-openai@sha256:" + "b" * 64
PROBE_TASK = "Probe the node (read-only; runs in check mode too)"
FAIL_TASK = "Stop here when any node fails a check"
SPEC_TASK = "Validating arguments against arg spec 'main'"


def inventory(tmp_path, host_vars=None, **cluster_vars):
    hosts = {"vllm_cluster": {"children": {
        "vllm_head": {"hosts": {"node01": {"ansible_host": "127.0.0.1", "kimi_k3_api_host": "127.0.0.1"}}},
        "vllm_workers": {"hosts": {"node02": {"ansible_host": "127.0.0.2"}}}}}}
    group = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
             "kimi_k3_accelerator": "b200", "kimi_k3_strategy": "multi_node_tp", "kimi_k3_interconnect": "rdma",
             "kimi_k3_socket_ifname": "lo", "kimi_k3_image": DIGEST,
             "kimi_k3_model_cache_dir": str(tmp_path / "cache"), "kimi_k3_api_port": 18431,
             "kimi_k3_master_port": 18432, "kimi_k3_dp_rpc_port": 18433,
             # the plan refuses an API without a key and remote code at no pinned revision
             "kimi_k3_api_key": "test-key", "kimi_k3_allow_unpinned_remote_code": True}
    group.update(cluster_vars)
    inv = tmp_path / "inv"
    (inv / "group_vars").mkdir(parents=True)
    (inv / "hosts.yml").write_text(yaml.safe_dump(hosts))
    (inv / "group_vars" / "vllm_cluster.yml").write_text(yaml.safe_dump(group))
    for host, values in (host_vars or {}).items():
        (inv / "host_vars").mkdir(exist_ok=True)
        (inv / "host_vars" / ("%s.yml" % host)).write_text(yaml.safe_dump(values))
    return str(inv)


def fake_weights(cache, model):
    snap = cache / "hub" / ("models--" + model.replace("/", "--")) / "snapshots" / ("c" * 40)
    snap.mkdir(parents=True)
    (snap / "model-00001-of-00001.safetensors").write_bytes(b"\0" * 64)
    (snap / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"w": "model-00001-of-00001.safetensors"}}))


def preflight(tmp_path, extravars=None, host_vars=None, **cluster_vars):
    art = tmp_path / "art"
    r = run_playbook("preflight.yml", inventory(tmp_path, host_vars, **cluster_vars),
                     extravars=dict({"preflight_artifacts_dir": str(art), "preflight_min_free_disk_gb": 10 ** 6},
                                    **(extravars or {})))
    with open(str(art / "preflight-report.json")) as handle:
        return r, json.load(handle)


def by(report, host, check):
    return [f for f in report["findings"] if f["host"] == host and f["check"] == check]


@pytest.fixture(scope="module")
def healthy_gpu_less(tmp_path_factory):
    return preflight(tmp_path_factory.mktemp("pf"))


def test_no_gpu_stack_is_one_root_failure_per_node_with_dependents_skipped(healthy_gpu_less):
    r, report = healthy_gpu_less
    assert r.status == "failed"
    for host in ("node01", "node02"):
        fails = sorted(f["check"] for f in report["findings"] if f["host"] == host and f["status"] == "fail")
        assert "vendor" in fails and not [c for c in fails if c.startswith(("gpu_", "cuda", "gpudirect"))], fails
        assert by(report, host, "gpu_tools")[0]["observed"] == "not checked: depends on vendor"
        assert by(report, host, "gpu_driver")[0]["status"] == "skip"
        assert "nvidia" in by(report, host, "vendor")[0]["fix"]


def test_recap_charges_every_failing_node_not_the_judge(healthy_gpu_less):
    r, report = healthy_gpu_less
    assert r.stats["failures"] == {"node01": 1, "node02": 1}
    msgs = dict((h, m) for h, t, m in failed_tasks(r) if t == FAIL_TASK)
    assert sorted(msgs) == ["node01", "node02"]
    assert msgs["node02"].startswith("Preflight failed on node02 - node02 vendor: ")   # the root cause first
    assert "Not checked until that is fixed:" in msgs["node02"] and "gpu_tools" in msgs["node02"]


def hosts_of(r, task_prefix, role=None):
    """Hosts with a result (ok, failed or skipped) of the task whose name starts with task_prefix (of ``role``
    only, when given: the plan and preflight roles' argument-spec tasks share their name)."""
    return sorted(set(ev["event_data"]["host"] for ev in r.events if ev.get("event", "").startswith("runner_on_")
                      and (ev["event_data"].get("task") or "").startswith(task_prefix)
                      and role in (None, ev["event_data"].get("role"))))


def test_failing_nodes_are_stopped_one_by_one_and_the_options_checked_once(healthy_gpu_less):
    """The playbook applies the role with run_once - Ansible's argument-spec check of the role runs once, the
    probe on every node, and with nodes at fault the stop task runs per host (the recap test above)."""
    r, _report = healthy_gpu_less
    assert hosts_of(r, SPEC_TASK, role="preflight") == ["node01"]
    assert hosts_of(r, PROBE_TASK) == ["node01", "node02"]
    assert hosts_of(r, FAIL_TASK) == ["node01", "node02"]


def test_nothing_to_stop_is_one_skipped_task_not_one_per_node(tmp_path):
    """With no node to stop (here preflight_fail_on_error: false) the stop task runs once and is skipped -
    no worker process per node; the run passes, nothing is charged."""
    r, report = preflight(tmp_path, extravars={"preflight_fail_on_error": False})
    assert r.status == "successful" and not report["summary"]["ok"]
    assert hosts_of(r, PROBE_TASK) == ["node01", "node02"]
    assert hosts_of(r, FAIL_TASK) == ["node01"]
    assert [ev["event"] for ev in r.events if (ev.get("event_data") or {}).get("task") == FAIL_TASK
            and ev["event"].startswith("runner_on_") and ev["event"] != "runner_on_start"] == ["runner_on_skipped"]
    assert r.stats["failures"] == {}


def test_a_bad_probe_option_on_another_node_is_refused_by_the_plan_naming_that_node(tmp_path):
    """The role's argument-spec check runs once (first host); the plan checks every host's role variables against
    the same spec first, so a per-node option set wrong on another node is refused before any node is probed."""
    r = run_playbook("preflight.yml", inventory(tmp_path, {"node02": {"preflight_command_timeout": "soon"}}),
                     extravars={"preflight_artifacts_dir": str(tmp_path / "art")})
    (failure,) = [f for f in failed_tasks(r) if f[1] == "Validate the inventory and render every node's launch plan"]
    assert "node02: preflight_command_timeout: argument 'preflight_command_timeout' is of type str" in failure[2]
    assert "roles/preflight/meta/argument_specs.yml" in failure[2]
    assert not os.path.exists(str(tmp_path / "art" / "preflight-report.json"))


def test_probe_arguments_come_from_the_plan(healthy_gpu_less):
    r, _report = healthy_gpu_less
    facts = task_results(r, PROBE_TASK)["node02"]["ansible_facts"]["node_probe"]
    assert facts["weights"]["model"] == "moonshotai/Kimi-K3"
    assert facts["engine"]["docker_host"] == "unix:///var/run/docker.sock"
    assert facts["deployment"]["container"] == "vllm-kimi-k3"
    assert facts["disk"]["path"].endswith("/cache")                        # kimi_k3_model_cache_dir via the plan
    assert [(p["name"], p["port"], p["address"]) for p in facts["ports"]] == [
        ("api", 18431, "0.0.0.0"), ("master", 18432, "127.0.0.2"), ("dp_rpc", 18433, "127.0.0.2")]


@pytest.mark.parametrize("variant,model,present", [
    ("default", "moonshotai/Kimi-K3", True),
    ("nvfp4", "RedHatAI/Kimi-K3-NVFP4", False),     # only the default model's weights are in the cache
])
def test_weights_checked_are_the_model_the_plan_serves(tmp_path, variant, model, present):
    fake_weights(tmp_path / "cache", "moonshotai/Kimi-K3")
    r, report = preflight(tmp_path, kimi_k3_variant=variant)
    assert task_results(r, PROBE_TASK)["node01"]["ansible_facts"]["node_probe"]["weights"]["model"] == model
    disk = by(report, "node01", "disk")[0]
    assert model in disk["expected"]
    assert (disk["status"] == "pass") is present, disk
    assert disk["observed"].startswith("weights present") is present


def test_nvfp4_weights_present_pass_the_disk_check(tmp_path):
    fake_weights(tmp_path / "cache", "RedHatAI/Kimi-K3-NVFP4")
    _r, report = preflight(tmp_path, kimi_k3_variant="nvfp4")
    disk = by(report, "node02", "disk")[0]
    assert disk["status"] == "pass" and "models--RedHatAI--Kimi-K3-NVFP4" in disk["observed"]


def test_standalone_role_without_the_plan_is_refused_clearly(tmp_path):
    pb = tmp_path / "pf_no_plan.yml"
    pb.write_text("- hosts: vllm_cluster\n  gather_facts: false\n  roles:\n    - gpufleet.kimi_k3.preflight\n")
    r = run_playbook(str(pb), inventory(tmp_path))
    assert r.status == "failed"
    msgs = [m for _h, _t, m in failed_tasks(r)]
    assert msgs and all("plan_result is not set - run the gpufleet.kimi_k3.plan role first" in m for m in msgs)
    assert not os.path.exists(str(tmp_path / "art"))


@pytest.mark.parametrize("revision,present", [("c" * 40, True), ("d" * 40, False)])
def test_weights_must_be_the_pinned_revision(tmp_path, revision, present):
    """With kimi_k3_model_revision the snapshot of that commit must be there (or the disk for it)."""
    fake_weights(tmp_path / "cache", "moonshotai/Kimi-K3")               # snapshot cccc...
    _r, report = preflight(tmp_path, kimi_k3_model_revision=revision)
    disk = by(report, "node01", "disk")[0]
    assert ("moonshotai/Kimi-K3@" + revision) in disk["expected"]
    assert (disk["status"] == "pass") is present, disk


def test_access_paths_default_to_each_nodes_launch_env_dir(tmp_path):
    """preflight_access_paths defaults to each node's launch_env_dir (the launch role's), /etc/kimi-k3 where the
    inventory does not set it (an inline if, not the default filter, which loads the filter plugins in every
    worker); the model cache directory comes from the plan through preflight_probe_args."""
    env02 = str(tmp_path / "env-node02")
    r, _report = preflight(tmp_path, host_vars={"node02": {"launch_env_dir": env02}})
    probed = task_results(r, PROBE_TASK)
    paths = dict((h, sorted(probed[h]["ansible_facts"]["node_probe"]["access"]["paths"])) for h in probed)
    assert paths == {"node01": sorted(["/etc/kimi-k3", str(tmp_path / "cache")]),
                     "node02": sorted([env02, str(tmp_path / "cache")])}
