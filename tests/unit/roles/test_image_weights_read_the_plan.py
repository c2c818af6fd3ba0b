"""The image and weights roles take the engine socket, the tag-only acceptance, the model, its revision and the cache
directory from the node's plan: their derived defaults, evaluated after the real plan role, equal the
plan's values - also when the inventory sets the kimi_k3_* variables the plan resolves - and both roles refuse to run
without a plan. Contacts no host (the example inventory's hosts are moved to closed loopback ports)."""
import json
import os

import yaml

from tests.helpers.runner import REPO, failed_tasks, run_playbook, task_results
from tests.unit.roles import test_image_roles

inventory = test_image_roles.inventory  # the example inventory on closed ports (a fixture)

TAG = "vllm/vllm-openai:v0.28.0"
REV = "0123456789abcdef0123456789abcdef01234567"
SHOW = "Show the derived role variables"


def _playbook(tmp_path, with_plan=True):
    plays = [{"hosts": "vllm_cluster", "gather_facts": False,
              "roles": [{"role": "gpufleet.kimi_k3.plan", "plan_write_files": False}] if with_plan else [],
              "tasks": [
                  {"name": "Load the image role's defaults",
                   "ansible.builtin.include_vars": os.path.join(REPO, "roles", "image", "defaults", "main.yml")},
                  {"name": "Load the weights role's defaults",
                   "ansible.builtin.include_vars": os.path.join(REPO, "roles", "weights", "defaults", "main.yml")},
                  {"name": SHOW, "ansible.builtin.debug": {"msg": "{{ {'docker_host': image_docker_host, "
                                                                  "'allow_unpinned': image_allow_unpinned, "
                                                                  "'image': image_reference, 'model': weights_model, "
                                                                  "'revision': weights_revision, "
                                                                  "'cache_dir': weights_cache_dir} | to_json }}"}}]}]
    path = tmp_path / "derived.yml"
    path.write_text(yaml.safe_dump(plays))
    return str(path)


def _derived(tmp_path, inventory, extravars):
    r = run_playbook(_playbook(tmp_path), inventory, extravars=extravars)
    assert r.status == "successful", failed_tasks(r)
    return dict((host, json.loads(res["msg"])) for host, res in task_results(r, SHOW).items())


def test_derived_values_are_the_plans(tmp_path, inventory):
    extra = {"kimi_k3_docker_host": "tcp://127.0.0.1:2375", "kimi_k3_model_revision": REV,
             "kimi_k3_model_cache_dir": "/srv/hf-cache", "kimi_k3_variant": "nvfp4"}
    got = _derived(tmp_path, inventory, extra)
    assert len(got) >= 2
    for host, values in got.items():
        assert values["docker_host"] == "tcp://127.0.0.1:2375", host
        assert values["allow_unpinned"] is False, host
        assert values["image"].startswith("vllm/vllm-openai@sha256:"), host
        # the variant decides the model: the plan's, never a second default of the role
        assert values["model"] == "RedHatAI/Kimi-K3-NVFP4", values
        assert (values["revision"], values["cache_dir"]) == (REV, "/srv/hf-cache"), host


def test_a_tag_only_image_is_accepted_only_when_the_plan_accepted_it(tmp_path, inventory):
    got = _derived(tmp_path, inventory, {"kimi_k3_image": TAG, "kimi_k3_allow_unpinned_image": True})
    assert got and all(v["allow_unpinned"] is True and v["image"] == TAG for v in got.values()), got


def test_defaults_without_overrides_are_the_inventory_defaults_resolved_by_the_plan(tmp_path, inventory):
    got = _derived(tmp_path, inventory, {})
    for host, values in got.items():
        assert values["docker_host"] == "unix:///var/run/docker.sock", host
        assert values["cache_dir"] == "/data/hf-cache", host
        assert values["revision"] == "4c1d7e2a9b3f5d6e8a0c2b4d6f8e1a3c5b7d9f0e", host


def test_both_roles_refuse_to_run_without_the_plan(tmp_path, inventory):
    for role in ("image", "weights"):
        pb = tmp_path / ("%s-no-plan.yml" % role)
        pb.write_text(yaml.safe_dump([{"hosts": "vllm_cluster", "gather_facts": False,
                                       "roles": ["gpufleet.kimi_k3.%s" % role]}]))
        r = run_playbook(str(pb), inventory)
        failures = failed_tasks(r)
        assert r.status == "failed" and failures, role
        for host, task, msg in failures:
            assert task == "Require this node's plan (plan_result from gpufleet.kimi_k3.plan)", (role, task)
            assert msg.startswith(host + ": plan_result is not set") and "gpufleet.kimi_k3.plan" in msg, msg


def test_weights_refuse_a_plan_without_a_revision_on_every_node_before_contacting_them(inventory):
    r = run_playbook("weights.yml", inventory,
                     extravars={"kimi_k3_model_revision": None, "kimi_k3_allow_unpinned_remote_code": True})
    failures = failed_tasks(r)
    assert r.status == "failed" and failures
    assert {t for _h, t, _m in failures} == {"Require a pinned revision (before contacting any node)"}, failures
    for host, _t, msg in failures:
        assert msg.startswith(host + ": weight staging downloads a pinned revision, but the model revision of "
                              "moonshotai/Kimi-K3 is unset: set kimi_k3_model_revision"), msg
