"""Weight staging (docs/weights.md) from a real self-hosted Hugging Face mirror, on sim/simctl up --cluster gb300.

simctl runs olah (PyPI, offline) on 127.0.0.1:8090 serving a stand-in model repository it creates (a git repo with
LFS objects: 3 JSON files and 4 x 16 MiB shards; sim/.state/hf/repo.json has its revision, sizes and sha256), and
in front of it the fault proxy on 127.0.0.1:8089 (sim/kimisim/hfproxy.py: `simctl hf-fault throttle=BPS
tamper=PATH`, bytes sent per file at /_sim/stats). Each node stages into its own directory
(/var/tmp/kimi-weights-<node>, inside the node container); the two trays copy from each other through their peer
servers (127.0.0.11/12:29780). Timings of the first and the second run are written to build/weights-timings.json.
"""
import hashlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request

import pytest

from tests.helpers.runner import REPO, failed_tasks, run_playbook, task_results

pytestmark = pytest.mark.sim

RECORD = os.path.join(REPO, "sim", ".state", "hf", "repo.json")
SIMCTL = os.path.join(REPO, "sim", "simctl")
PROXY = "http://127.0.0.1:8089"
PLAN_TASK = "Validate the inventory and render every node's launch plan"
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
             "weights_hf_endpoint": hf.get("fault_endpoint") or PROXY,
             "weights_cache_dir": "/var/tmp/kimi-weights-{{ inventory_hostname }}",
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
        assert res["msg"] == "%s: %s already staged (%d files, %.2f GB verified): nothing transferred, nothing " \
            "re-read" % (host, hf["revision"], len(hf["files"]), hf["bytes_total"] / 1e9)
        assert res["files_rehashed"] == 0
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


# ------------------------------------------------------------------------------------------------- issue #38
def _hf_fault(*words):
    p = subprocess.run([SIMCTL, "hf-fault"] + list(words or ["--clear"]), capture_output=True, text=True, timeout=60,
                       check=False)
    assert p.returncode == 0, p.stderr


@pytest.fixture
def proxy(hf):
    """The fault proxy with its faults cleared and its counters zeroed; cleared again afterwards."""
    _hf_fault()
    urllib.request.urlopen(urllib.request.Request(PROXY + "/_sim/stats", method="DELETE"), timeout=10).read()
    yield lambda: json.loads(urllib.request.urlopen(PROXY + "/_sim/stats", timeout=10).read())
    _hf_fault()


def _git_blob_id(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _mirror_bytes(hf, path):
    url = "%s/%s/resolve/%s/%s" % (hf["endpoint"], hf["repo"], hf["revision"], path)
    with urllib.request.urlopen(url, timeout=30) as r:
        return r.read()


def _report(tmp_path):
    with open(os.path.join(str(tmp_path), "weights-report.json")) as f:
        return json.load(f)


def test_each_file_leaves_the_endpoint_once_and_the_report_says_so(gb300, hf, proxy, tmp_path):
    _clean(gb300)
    first = run_playbook("weights.yml", gb300.inventory, extravars=_extra(hf, weights_artifacts_dir=str(tmp_path)))
    assert first.status == "successful", failed_tasks(first)
    staged = _staged(first)
    assert proxy()["bytes"] == hf["bytes_total"], proxy()          # one copy for the whole cluster
    assert sum(r["bytes_from_endpoint"] for r in staged.values()) == hf["bytes_total"]
    for host, res in staged.items():
        assert res["bytes_from_endpoint"] + res["bytes_from_peers"] == hf["bytes_total"], res
        assert res["bytes_from_peers"] > 0 and res["files_verified"] == len(hf["files"]) and res["refused"] == []
        assert _snapshot_sha256(gb300, host, hf) == {n: f["sha256"] for n, f in hf["files"].items()}
    report = _report(tmp_path)
    assert report["ok"] and report["total"]["endpoint_copies"] == 1.0
    assert {n["node"] for n in report["nodes"]} == set(staged)
    assert os.path.exists(os.path.join(str(tmp_path), "weights-report.md"))
    assert [ev for ev in first.events if (ev.get("stdout") or "").lstrip().startswith("[cluster] 2 node(s)")]
    second = run_playbook("weights.yml", gb300.inventory, extravars=_extra(hf, weights_artifacts_dir=str(tmp_path)))
    assert second.status == "successful", failed_tasks(second)
    assert {h: c for h, c in second.stats.get("changed", {}).items() if c} == {}
    assert proxy()["bytes"] == hf["bytes_total"]                  # the second run took nothing from the endpoint
    for res in _staged(second).values():
        assert (res["bytes_transferred"], res["files_rehashed"], res["changed"]) == (0, 0, False)


def test_a_tampered_file_is_refused_on_every_node_and_never_reaches_a_peer(gb300, hf, proxy, tmp_path):
    _clean(gb300)
    good = _mirror_bytes(hf, "config.json")
    bad = bytearray(good)
    bad[len(good) // 2] ^= 1
    expected, actual = _git_blob_id(good), _git_blob_id(bytes(bad))
    _hf_fault("tamper=config.json")
    r = run_playbook("weights.yml", gb300.inventory, extravars=_extra(hf, weights_artifacts_dir=str(tmp_path)))
    assert r.status == "failed"
    failures = failed_tasks(r)
    assert {h for h, _t, _m in failures} == {n["name"] for n in gb300.nodes}
    for host, task, msg in failures:
        assert task.startswith("Stage the weights (")
        assert ("%s: config.json refused: endpoint %s/%s/resolve/%s/config.json sent content whose git-sha1 is %s, "
                "but %s lists %s" % (host, PROXY, hf["repo"], hf["revision"], actual, PROXY, expected)) in msg, msg
        repo_dir = "%s/hub/models--%s" % (_cache(host), hf["repo"].replace("/", "--"))
        assert gb300.ssh(host, "test -e %s/blobs/%s" % (repo_dir, expected)).returncode != 0
        assert gb300.ssh(host, "test -e %s/snapshots/%s/config.json" % (repo_dir, hf["revision"])).returncode != 0
        # the shards were verified and are in place: only the tampered file is missing
        assert gb300.ssh(host, "test -L %s/snapshots/%s/model-00001-of-00004.safetensors"
                         % (repo_dir, hf["revision"])).returncode == 0
    # every node took config.json from the endpoint itself (its origin's refusal sent it there): no peer served it
    assert proxy()["by_path"]["config.json"] == len(gb300.nodes) * len(good)
    # the failed staging stopped its peer servers too (a server left up holds the port against the next run)
    assert [n["name"] for n in gb300.nodes if _listening(n["address"], 29780)] == []
    report = _report(tmp_path)
    assert not report["ok"] and report["total"]["refused"] == len(gb300.nodes)
    for node in report["nodes"]:
        (refusal,) = node["refused"]
        assert (refusal["expected"], refusal["actual"], refusal["source"].split()[0]) == (expected, actual, "endpoint")


def _listening(address, port):
    try:
        socket.create_connection((address, port), timeout=2).close()
    except OSError:
        return False
    return True


def _playbook_cmd(gb300, hf, tmp_path):
    extra = json.dumps(_extra(hf, weights_artifacts_dir=str(tmp_path), weights_round_seconds=1))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_INJECT_FACT_VARS="false",
               KIMI_K3_API_KEY=os.environ.get("KIMI_K3_API_KEY", "test-placeholder-api-key"))
    env["PATH"] = os.path.join(REPO, ".venv", "bin") + os.pathsep + env.get("PATH", "")
    cmd = ["ansible-playbook", os.path.join(REPO, "playbooks", "weights.yml"), "-i", gb300.inventory, "-e", extra]
    return cmd, env


def test_killed_mid_transfer_then_verified_on_the_next_run(gb300, hf, proxy, tmp_path):
    _clean(gb300)
    _hf_fault("throttle=2000000")                          # ~34 s for one copy of the 67 MB checkpoint
    cmd, env = _playbook_cmd(gb300, hf, tmp_path)
    out, err = tmp_path / "killed-run.out", tmp_path / "killed-run.err"
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        proc = subprocess.Popen(cmd, env=env, stdout=stdout, stderr=stderr, start_new_session=True)
    parts = "ls %s/hub/models--*/blobs/*.incomplete 2>/dev/null | wc -l"
    deadline = time.monotonic() + 180
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if any(int((gb300.ssh(n["name"], parts % _cache(n["name"])).stdout or "0").strip() or 0)
                   for n in gb300.nodes):
                break
            time.sleep(0.5)
        else:
            pytest.fail("no partial file appeared (playbook exit %s); its output ends:\n%s\nstderr:\n%s"
                        % (proc.poll(), out.read_text(errors="replace")[-4000:], err.read_text(errors="replace")[-2000:]))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)            # the controller dies ...
        proc.wait(30)
    # ... and so does the staging on the nodes: the processes holding a partial file open (the module runs from
    # stdin with pipelining, so no command line names it; the peer servers hold no partial file and stay)
    holders = ("for p in /proc/[0-9]*; do ls -l $p/fd 2>/dev/null | grep -q '[.]incomplete$' && kill -9 ${p#/proc/}; "
               "done; true")
    for n in gb300.nodes:
        gb300.ssh(n["name"], holders)
    _hf_fault()
    again = run_playbook("weights.yml", gb300.inventory, extravars=_extra(hf, weights_artifacts_dir=str(tmp_path)))
    assert again.status == "successful", failed_tasks(again)
    for host, res in _staged(again).items():
        assert res["verified"]["ok"] and res["refused"] == [], res
        assert _snapshot_sha256(gb300, host, hf) == {n: f["sha256"] for n, f in hf["files"].items()}
    # olah answers Range with the whole file, so a cut shard starts over from the endpoint; never twice per node
    assert proxy()["bytes"] <= len(gb300.nodes) * hf["bytes_total"]
    assert _report(tmp_path)["ok"]


def test_a_token_with_a_plain_http_endpoint_off_loopback_is_refused_at_plan_time(gb300, hf):
    token = "hf_simtoken0123456789"
    r = run_playbook("weights.yml", gb300.inventory, extravars=_extra(
        hf, weights_hf_endpoint="http://hf-mirror.invalid:8090", kimi_k3_hf_token=token))
    assert r.status == "failed"
    failures = failed_tasks(r)
    assert {t for _h, t, _m in failures} == {PLAN_TASK}
    assert all("weights_hf_endpoint: weights_hf_endpoint http://hf-mirror.invalid:8090 is plain http to a host that "
               "is not loopback, and a Hugging Face token is set" in m for _h, _t, m in failures), failures
    assert _staged(r) == {}
    assert not [ev for ev in r.events if token in json.dumps(ev)], "the token reached an event"
