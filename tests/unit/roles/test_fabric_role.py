"""The fabric role on two local "nodes" (B200 pair planned for multi-node TP) without a container engine:
check mode says what would run and starts nothing; a real run fails both nodes at the job's start with the
engine's error and the host named, the report written - nothing is left behind to remove."""
import json

from tests.helpers.runner import failed_tasks, run_playbook, task_results
from tests.unit.roles.test_preflight_role import inventory

SAY = "Say what runs (progress)"


def fabric(tmp_path, check):
    inv = inventory(tmp_path, kimi_k3_docker_host="unix://%s" % (tmp_path / "no-engine.sock"))
    art = tmp_path / "art"
    r = run_playbook("fabric.yml", inv, extravars={"fabric_artifacts_dir": str(art),
                                                   "fabric_node_dir": str(tmp_path / "fabric")}, check=check,
                     timeout=600)
    return r, art


def test_check_mode_says_what_would_run_and_starts_nothing(tmp_path):
    r, art = fabric(tmp_path, check=True)
    assert r.status == "successful", failed_tasks(r)
    say = list(task_results(r, SAY).values())[0]
    assert say["msg"].startswith("fabric main: would start nccl job (16 ranks, 8 per node) in "
                                 "vllm/vllm-openai@sha256:" + "b" * 64 + " on node01, node02; master 127.0.0.1:18432;")
    assert not (art / "fabric-report.json").exists() and not (tmp_path / "fabric").exists()


def test_a_node_whose_engine_refuses_the_job_is_named_and_nothing_is_left(tmp_path):
    r, art = fabric(tmp_path, check=False)
    assert r.status == "failed"
    fails = dict((host, msg) for host, task, msg in failed_tasks(r)
                 if task == "Require a healthy fabric on every node (host, pair, setting and fix in the message)")
    assert sorted(fails) == ["node01", "node02"]
    assert fails["node01"].startswith("Fabric failed on node01 - job: Start the job container: ")
    report = json.loads((art / "fabric-report.json").read_text())
    assert [(f["host"], f["check"], f["status"]) for f in report["findings"]] == [
        ("node01", "job", "fail"), ("node02", "job", "fail")]
    assert not list((tmp_path / "fabric" / "main").glob("result.json"))
