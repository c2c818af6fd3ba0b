"""Deployment state record, restart reasons (plugin_utils/rollout/state.py) and plan files (plugin_utils)."""
import json
import os

import pytest

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.rollout import state as ds
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.launch import secrets as launch_secrets
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import files as plan_files

LABEL = "io.gpufleet.kimi_k3.plan_hash"


def plan(image="img@sha256:a", h="h1", env=None, args=None, secret=()):
    return {"image": image, "env": env or {"A": "1"}, "secret_env": list(secret), "vllm_args": args or ["m", "--x"],
            "container": {"name": "vllm-kimi-k3", "labels": {LABEL: h}, "volumes": []}}


def test_upgrade_lifecycle_and_interrupted_text():
    r = ds.mark_ready(None, "p1", "img@a", "T0")
    assert r["deployed"] == {"plan_id": "p1", "image": "img@a", "at": "T0"} and ds.interrupted(r) is None
    r = ds.begin_upgrade(r, "img@a", "img@b", "p1", "p2", "T1")
    r = ds.upgrade_stage(r, "launch")
    assert ds.interrupted(r) == "An upgrade from img@a to img@b (started T1) was interrupted at the launch stage."
    r = ds.mark_failed(r, "p2", "T2", "x" * 5000)
    assert r["deployed"]["plan_id"] == "p1" and len(r["last_run"]["reason"]) == 2000
    assert ds.interrupted(ds.end_upgrade(r)) is None
    with pytest.raises(ValueError):
        ds.upgrade_stage(r, "dance")


def test_normalise_drops_junk():
    assert ds.normalise("nonsense") == ds.empty()
    assert ds.normalise({"deployed": 3, "upgrade": {"stage": "pull"}})["upgrade"] == {"stage": "pull"}


def test_plan_id_depends_on_every_host_hash_only():
    a = {"h1": plan(h="x"), "h2": plan(h="y")}
    assert ds.plan_id(a) == ds.plan_id({"h2": plan(h="y", image="other"), "h1": plan(h="x")})
    assert ds.plan_id(a) != ds.plan_id({"h1": plan(h="x"), "h2": plan(h="z")})
    assert len(ds.plan_id(a)) == 16


def test_changed_fields_names_never_values():
    old = plan(env={"A": "1", "B": "2"}, args=["m", "--x", "1"])
    new = plan(image="img@sha256:b", env={"A": "9", "C": "3"}, args=["m", "--x", "2", "--y"], h="h2")
    assert ds.changed_fields(old, new) == ["env.A", "env.B", "env.C", "image", "vllm_args (--y)"]
    assert ds.changed_fields(old, dict(old, vllm_args=["m", "--x", "5"])) == ["vllm_args (values)"]


def test_restart_reasons():
    new = {"head": plan(image="img@b", h="n1"), "w1": plan(image="img@b", h="n1"), "w2": plan(h="n2"),
           "w3": plan(h="n3")}
    statuses = {"head": {"exists": True, "running": True, "plan_hash": "o1"},
                "w1": {"exists": True, "running": True, "plan_hash": "zz"},
                "w2": {"exists": True, "running": False, "status": "exited", "exit_code": 137},
                "w3": {"exists": False}}
    kept = {"head": {"o1": plan(image="img@a", h="o1")}}
    assert ds.restart_reasons(new, statuses, ["head", "w1", "w2", "w3"], kept) == [
        "head: plan changed: image",
        "w1: plan hash zz -> n1",
        "w2: container exited (exit code 137)",
        "w3: no vLLM container"]
    assert ds.restart_reasons({"head": plan(h="o1")}, {"head": statuses["head"]}, ["head"],
                              {"head": {"o1": plan(h="o1")}}) == [
        "head: secret files changed, or the container differs from its plan"]


def test_plan_files_keep_every_plan_and_point_at_the_deployed_one(tmp_path):
    d = str(tmp_path)
    p1, p2 = {"h": plan(h="a")}, {"h": plan(h="b", image="img@b")}
    pid1, changed = plan_files.write_plan(d, {"h.json": (json.dumps(p1["h"]), 0o600)}, p1)
    assert changed == ["h.json", "plans/%s/h.json" % pid1]
    plan_files.write_state(d, ds.mark_ready(plan_files.read_state(d), pid1, "img@a", "T"))
    pid2 = plan_files.write_plan(d, {"h.json": (json.dumps(p2["h"]), 0o600)}, p2)[0]
    # a later (failed) rendering does not touch the deployed record or its files
    assert plan_files.read_state(d)["deployed"]["plan_id"] == pid1
    assert os.readlink(os.path.join(d, "deployed")) == os.path.join("plans", pid1)
    assert plan_files.read_plans(d, pid1)["h"]["image"] == "img@sha256:a"
    assert plan_files.read_plans(d, pid2)["h"]["image"] == "img@b"
    assert set(plan_files.plans_by_hash(d)["h"]) == {"a", "b"}
    assert plan_files.write_plan(d, {"h.json": (json.dumps(p2["h"]), 0o600)}, p2) == (pid2, [])


def test_check_mode_writes_nothing(tmp_path):
    d = str(tmp_path / "x")
    pid, changed = plan_files.write_plan(d, {"h.json": ("{}", 0o600)}, {"h": plan()}, check_mode=True)
    assert changed and not os.path.exists(d)


def test_prune_keeps_the_deployed_plan(tmp_path):
    d = str(tmp_path)
    ids = []
    for i in range(5):
        pid = plan_files.write_plan(d, {"h.json": (str(i), 0o600)}, {"h": plan(h=str(i))})[0]
        os.utime(os.path.join(d, "plans", pid), (i, i))
        ids.append(pid)
    plan_files.write_state(d, ds.mark_ready(None, ids[0], "img", "T"))
    gone = plan_files.prune(d, keep=2)
    assert sorted(gone) == sorted(ids[1:3])
    assert sorted(os.listdir(os.path.join(d, "plans"))) == sorted([ids[0], ids[3], ids[4]])


def test_unreadable_state_is_empty(tmp_path):
    (tmp_path / "state.json").write_text("{broken")
    assert plan_files.read_state(str(tmp_path)) == ds.empty()


def test_secrets_become_read_only_files_named_in_env():
    got = launch_secrets.container_secrets(plan(secret=["VLLM_API_KEY", "HF_TOKEN"]), "/etc/kimi-k3/v.secrets",
                                           ["vllm", "serve"])
    assert got["env"] == {"HF_TOKEN_PATH": "/run/secrets/kimi-k3/HF_TOKEN",
                          "VLLM_API_KEY_FILE": "/run/secrets/kimi-k3/VLLM_API_KEY",
                          "KIMI_K3_SECRET_FILES": "VLLM_API_KEY"}
    assert got["volumes"] == ["/etc/kimi-k3/v.secrets:/run/secrets/kimi-k3:ro"]
    assert got["entrypoint"][:2] == ["/bin/sh", "-c"]
    assert got["entrypoint"][-3:] == ["kimi-k3-secrets", "vllm", "serve"]
    assert got["files"] == {"HF_TOKEN": "/etc/kimi-k3/v.secrets/HF_TOKEN",
                            "VLLM_API_KEY": "/etc/kimi-k3/v.secrets/VLLM_API_KEY"}
    only_token = launch_secrets.container_secrets(plan(secret=["HF_TOKEN"]), "/d", ["vllm", "serve"])
    assert only_token["entrypoint"] is None and only_token["env"] == {"HF_TOKEN_PATH": "/run/secrets/kimi-k3/HF_TOKEN"}
    none = launch_secrets.container_secrets(plan(), "/d", ["vllm", "serve"])
    assert none == {"env": {}, "volumes": [], "entrypoint": None, "files": {}}


def test_wrapper_exports_the_key_from_its_file(tmp_path):
    import subprocess
    (tmp_path / "VLLM_API_KEY").write_text("sk-test")
    got = launch_secrets.container_secrets(plan(secret=["VLLM_API_KEY"]), str(tmp_path), ["sh", "-c",
                                                                                          'echo "$VLLM_API_KEY"'])
    env = dict(os.environ, VLLM_API_KEY_FILE=str(tmp_path / "VLLM_API_KEY"), KIMI_K3_SECRET_FILES="VLLM_API_KEY")
    p = subprocess.run(got["entrypoint"], env=env, capture_output=True, text=True, check=False)
    assert (p.returncode, p.stdout.strip()) == (0, "sk-test")
    env["VLLM_API_KEY_FILE"] = str(tmp_path / "missing")
    p = subprocess.run(got["entrypoint"], env=env, capture_output=True, text=True, check=False)
    assert p.returncode == 1 and "cannot read VLLM_API_KEY_FILE" in p.stderr


def test_cluster_report_flags_drift_and_mixed_images():
    plans = {"head": plan(h="n1", image="img@b"), "w1": plan(h="n1", image="img@b"), "w2": plan(h="n1", image="img@b")}
    statuses = {"head": {"exists": True, "running": True, "status": "running", "plan_hash": "n1", "image": "img@b",
                         "healthy": True, "repo_digests": ["repo@sha256:bb"]},
                "w1": {"exists": True, "running": True, "status": "running", "plan_hash": "o1", "image": "img@a",
                       "healthy": True},
                "w2": {"exists": False, "status": "absent"}}
    kept = {"w1": {"o1": plan(h="o1", image="img@a")}}
    record = ds.begin_upgrade(ds.mark_ready(None, "p1", "img@a", "T0"), "img@a", "img@b", "p1", "p2", "T1")
    rep = ds.cluster_report(plans, statuses, kept, record)
    assert rep["drift"] and not rep["healthy"]
    assert rep["lines"] == [
        "deployed (state record): plan p1, image img@a, at T0",
        "An upgrade from img@a to img@b (started T1) was interrupted at the pull stage. The next deploy.yml or "
        "upgrade.yml rolls it back.",
        "MIXED: the nodes run 2 different images",
        "head: container running, image img@b, plan n1, healthy, matches the inventory",
        "w1: container running, image img@a, plan o1, healthy, DRIFT: runs plan o1, the inventory plans n1 (image)",
        "w2: container absent, image None, plan None, not healthy, DRIFT: no vLLM container"]
    assert rep["nodes"][0]["digest"] == "sha256:bb"
    clean = ds.cluster_report({"head": plans["head"]}, {"head": statuses["head"]}, {}, None)
    assert not clean["drift"] and clean["healthy"] and clean["lines"][0] == "deployed (state record): none recorded"
    assert clean["unhealthy"] == []


def test_a_dead_follower_is_unhealthy_though_the_head_answers():
    plans = {"head": plan(h="n1", image="img@b"), "w1": plan(h="n1", image="img@b"), "w2": plan(h="n1", image="img@b")}
    statuses = {"head": {"exists": True, "running": True, "status": "running", "plan_hash": "n1", "image": "img@b",
                         "healthy": True},
                # killed follower: same plan, no drift; its health URL is the head's, which still answers
                "w1": {"exists": True, "running": False, "status": "exited", "plan_hash": "n1", "image": "img@b",
                       "healthy": False},
                "w2": {"exists": True, "running": True, "status": "running", "plan_hash": "n1", "image": "img@b",
                       "healthy": False}}
    rep = ds.cluster_report(plans, statuses, {}, None)
    assert not rep["drift"] and not rep["healthy"]
    assert rep["unhealthy"] == [
        "w1: its vLLM container is exited; the deployment is degraded (run playbooks/recover.yml, or deploy.yml, to "
        "restart it)",
        "w2: its container runs but the health check fails; the deployment is degraded (run playbooks/recover.yml, "
        "or deploy.yml, to restart it)"]


def test_ready_again_on_the_same_plan_keeps_the_record_and_its_time():
    first = ds.mark_ready(None, "p1", "img@a", "T0")
    assert ds.mark_ready(first, "p1", "img@a", "T9") == first
    # after a failed run of the same plan, ready is news again
    failed = ds.mark_failed(first, "p1", "T1", "stalled")
    again = ds.mark_ready(failed, "p1", "img@a", "T2")
    assert again["last_run"] == {"plan_id": "p1", "outcome": "ready", "at": "T2", "reason": ""}
    assert again["deployed"] == {"plan_id": "p1", "image": "img@a", "at": "T2"}
    # another image or plan is recorded
    assert ds.mark_ready(first, "p1", "img@b", "T3")["deployed"] == {"plan_id": "p1", "image": "img@b", "at": "T3"}
    assert ds.mark_ready(first, "p2", "img@a", "T4")["last_run"]["plan_id"] == "p2"
