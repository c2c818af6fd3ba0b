"""Weight staging (docs/weights.md) from a real self-hosted Hugging Face mirror, on sim/simctl up --cluster gb300.

simctl runs olah (PyPI, offline) on 127.0.0.1:8090 serving a stand-in model repository it creates (a git repo with
LFS objects: 3 JSON files and 4 x 16 MiB shards; sim/.state/hf/repo.json has its revision, sizes and sha256).
Each node stages into its own directory (/var/tmp/kimi-weights-<node>, inside the node container). Timings of the
first and the second run are written to build/weights-timings.json and printed.
"""
import json
import os
import time

import pytest

from tests.helpers.runner import REPO, failed_tasks, run_playbook, task_results

pytestmark = pytest.mark.sim

RECORD = os.path.join(REPO, "sim", ".state", "hf", "repo.json")
STAGE = "Stage the weights ({{ weights_model }})"
TIMINGS = os.path.join(REPO, "build", "weights-timings.json")


@pytest.fixture
def gb300(sim_cluster):
    return sim_cluster("gb300")


@pytest.fixture
def hf():
    if not os.path.exists(RECORD):
        pytest.skip("no HF mirror in the sim (olah not installed: sim/install.sh)")
    with open(RECORD) as f:
        return json.load(f)


def _cache(node):
    return "/var/tmp/kimi-weights-%s" % node


def _extra(hf, **kw):
    extra = {"kimi_k3_model": hf["repo"], "kimi_k3_model_revision": hf["revision"],
             "weights_hf_endpoint": hf["endpoint"], "weights_cache_dir": "/var/tmp/kimi-weights-{{ inventory_hostname }}",
             "weights_margin_gb": 0.01, "weights_round_seconds": 0.2}
    extra.update(kw)
    return extra


def _staged(r):
    """{host: result of the staging task}; the task name is the templated one."""
    out = {}
    for ev in r.events:
        d = ev.get("event_data", {})
        if ev.get("event") in ("runner_on_ok", "runner_on_failed") and d.get("task", "").startswith("Stage the weights ("):
            out[d["host"]] = d["res"]
    return out


def _clean(sim):
    for n in sim.nodes:
        sim.ssh(n["name"], "rm -rf %s" % _cache(n["name"]))


def _snapshot_sha256(sim, node, hf):
    snap = "%s/hub/models--%s/snapshots/%s" % (_cache(node), hf["repo"].replace("/", "--"), hf["revision"])
    out = sim.ssh(node, "cd %s && sha256sum -- *" % snap).stdout
    return dict(reversed(line.split(None, 1)) for line in out.strip().splitlines())


def test_staging_from_the_mirror_then_a_second_run_transfers_nothing(gb300, hf):
    _clean(gb300)
    timings = {}
    check = run_playbook("weights.yml", gb300.inventory, extravars=_extra(hf), check=True)
    assert check.status == "successful", failed_tasks(check)
    for host, res in _staged(check).items():
        assert res["changed"] and res["bytes_needed"] == hf["bytes_total"] and res["bytes_transferred"] == 0
        assert gb300.ssh(host, "test -e %s/hub" % _cache(host)).returncode != 0, "check mode wrote on %s" % host

    t0 = time.monotonic()
    first = run_playbook("weights.yml", gb300.inventory, extravars=_extra(hf))
    timings["first_run_playbook_s"] = round(time.monotonic() - t0, 2)
    assert first.status == "successful", failed_tasks(first)
    staged = _staged(first)
    assert set(staged) == {n["name"] for n in gb300.nodes}
    for host, res in staged.items():
        assert res["changed"] and res["bytes_transferred"] == hf["bytes_total"]
        assert res["files_transferred"] == len(hf["files"]) and res["verified"]["ok"], res
        assert res["msg"].startswith("%s: staged %s: %d files" % (host, hf["revision"], len(hf["files"])))
        assert _snapshot_sha256(gb300, host, hf) == {n: f["sha256"] for n, f in hf["files"].items()}
        timings["first_%s_s" % host] = res["elapsed_s"]
        timings["first_%s_rounds" % host] = res["rounds"]
    progress = [ev["stdout"] for ev in first.events if "GB (" in (ev.get("stdout") or "")]
    assert progress, "no progress line was printed"

    t0 = time.monotonic()
    second = run_playbook("weights.yml", gb300.inventory, extravars=_extra(hf))
    timings["second_run_playbook_s"] = round(time.monotonic() - t0, 2)
    assert second.status == "successful", failed_tasks(second)
    assert {h: c for h, c in second.stats.get("changed", {}).items() if c} == {}
    for host, res in _staged(second).items():
        assert not res["changed"] and res["bytes_transferred"] == 0 and res["files_transferred"] == 0
        assert res["msg"] == "%s: %s already staged (%d files, %.2f GB verified): nothing transferred" % (
            host, hf["revision"], len(hf["files"]), hf["bytes_total"] / 1e9)
        timings["second_%s_s" % host] = res["elapsed_s"]
    timings["bytes_per_node"] = hf["bytes_total"]
    os.makedirs(os.path.dirname(TIMINGS), exist_ok=True)
    with open(TIMINGS, "w") as f:
        json.dump(timings, f, indent=2, sort_keys=True)
    print("weights staging timings: %s" % json.dumps(timings, sort_keys=True))


def test_an_interrupted_file_is_completed_and_only_it_is_transferred(gb300, hf):
    node = gb300.nodes[1]["name"]
    shard = "model-00002-of-%05d.safetensors" % sum(1 for n in hf["files"] if n.endswith(".safetensors"))
    r = run_playbook("weights.yml", gb300.inventory, extravars=_extra(hf), limit=node)
    assert r.status == "successful", failed_tasks(r)
    repo_dir = "%s/hub/models--%s" % (_cache(node), hf["repo"].replace("/", "--"))
    blob = "%s/blobs/%s" % (repo_dir, hf["files"][shard]["sha256"])
    cut = gb300.ssh(node, "mv %s %s.incomplete && truncate -s 5000000 %s.incomplete && rm %s/snapshots/%s/%s"
                    % (blob, blob, blob, repo_dir, hf["revision"], shard))
    assert cut.returncode == 0, cut.stderr
    again = run_playbook("weights.yml", gb300.inventory, extravars=_extra(hf), limit=node)
    assert again.status == "successful", failed_tasks(again)
    res = _staged(again)[node]
    assert res["files_transferred"] == 1 and res["verified"]["ok"]
    # olah's local-mirror mode answers a Range request with the whole file (200): the stager starts that file over
    assert res["restarted"] == [shard] and res["bytes_transferred"] == hf["files"][shard]["size"]
    assert _snapshot_sha256(gb300, node, hf)[shard] == hf["files"][shard]["sha256"]


def test_no_room_is_refused_before_any_transfer(gb300, hf):
    node = gb300.nodes[0]["name"]
    gb300.ssh(node, "rm -rf %s" % _cache(node))
    r = run_playbook("weights.yml", gb300.inventory, extravars=_extra(hf, weights_margin_gb=10 ** 9), limit=node)
    assert r.status == "failed"
    (host, task, msg), = failed_tasks(r)
    assert host == node and task.startswith("Stage the weights")
    assert msg.startswith("%s: weight staging failed: staging needs %.1f GB more in %s" % (
        node, hf["bytes_total"] / 1e9, _cache(node))), msg
    assert "kimi_k3_model_cache_dir" in msg
    assert gb300.ssh(node, "test -e %s/hub/models--%s/blobs" % (_cache(node), hf["repo"].replace("/", "--"))).returncode != 0


def test_an_unpinned_revision_is_refused_on_the_controller(gb300, hf):
    r = run_playbook("weights.yml", gb300.inventory, extravars=_extra(hf, kimi_k3_model_revision="main"))
    assert r.status == "failed"
    failures = failed_tasks(r)
    # the plan refuses it (first play of weights.yml, on the controller): no node is contacted
    assert {t for _h, t, _m in failures} == {"Validate the inventory and render every node's launch plan"}
    assert all("kimi_k3_model_revision" in m and "40-character lowercase hex commit hash" in m
               for _h, _t, m in failures), failures
    # no revision at all (the plan accepts that with the remote-code opt-in): the weights role refuses, every node
    r = run_playbook("weights.yml", gb300.inventory,
                     extravars=_extra(hf, kimi_k3_model_revision=None, kimi_k3_allow_unpinned_remote_code=True))
    assert r.status == "failed"
    failures = failed_tasks(r)
    assert {t for _h, t, _m in failures} == {"Require a pinned revision (before contacting any node)"}
    assert {h for h, _t, _m in failures} == {n["name"] for n in gb300.nodes}
    assert all("set kimi_k3_model_revision to the 40-hex commit hash" in m for _h, _t, m in failures)


def test_deploy_runs_the_weights_stage_only_when_asked(gb300, hf):
    _clean(gb300)
    others = "preflight,image,launch,smoke"
    plain = run_playbook("deploy.yml", gb300.inventory, extravars=_extra(hf), skip_tags=others)
    assert plain.status == "successful", failed_tasks(plain)
    assert _staged(plain) == {} and set(task_results(plain, "Stage the weights when asked")) == {
        n["name"] for n in gb300.nodes}
    asked = run_playbook("deploy.yml", gb300.inventory, extravars=_extra(hf, weights_stage=True), skip_tags=others)
    assert asked.status == "successful", failed_tasks(asked)
    assert {h for h, res in _staged(asked).items() if res["bytes_transferred"] == hf["bytes_total"]} == {
        n["name"] for n in gb300.nodes}
    tagged = run_playbook("deploy.yml", gb300.inventory, extravars=_extra(hf), tags="weights")
    assert tagged.status == "successful", failed_tasks(tagged)
    assert {h for h, res in _staged(tagged).items() if not res["changed"]} == {n["name"] for n in gb300.nodes}
