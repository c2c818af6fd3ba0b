"""image and teardown roles on the rehearsal cluster (sim/simctl up --cluster gb300).

Touches only what it creates: the sim's alternative image (standin-b, removed first only when no container uses
it), a tarball of it, and containers named vllm-kimi-k3-imgtest. The cluster is never brought up or down here.
"""
import json
import time

import pytest

from tests.helpers.runner import failed_tasks, run_playbook, task_results

pytestmark = pytest.mark.sim

VERDICT = "Record the verdict as the image_pulled fact"
CONTAINER = "vllm-kimi-k3-imgtest"


@pytest.fixture
def gb300(sim_cluster):
    return sim_cluster("gb300")


def _changed(r):
    return {h: n for h, n in (r.stats or {}).get("changed", {}).items() if n}


def _present(sim, node, ref):
    return sim.docker(node["name"], "image", "inspect", ref, check=False).returncode == 0


def _remove_if_unused(sim, ref):
    """Remove ``ref`` from every node unless a container uses it. {node: True when the image is now absent}."""
    out = {}
    for n in sim.nodes:
        sim.docker(n["name"], "image", "rm", ref, check=False)
        out[n["name"]] = not _present(sim, n, ref)
    return out


def _gone(sim, node, name, wait_s=15):
    """The container is absent (allowing the engine a few seconds to finish a delete it has acknowledged)."""
    deadline = time.monotonic() + wait_s
    while sim.docker(node["name"], "inspect", name, check=False).returncode == 0:
        if time.monotonic() > deadline:
            return False
        time.sleep(1)
    return True


def _pulled(r):
    return {h: res["ansible_facts"]["image_pulled"] for h, res in task_results(r, VERDICT).items()}


def test_pull_by_digest_on_every_node_verifies_repo_digests_and_is_idempotent(gb300):
    ref = gb300.images["standin-b"]
    extra = {"kimi_k3_image": ref}
    absent = _remove_if_unused(gb300, ref)

    check = run_playbook("image.yml", gb300.inventory, extravars=extra, check=True)
    assert check.status == "successful", failed_tasks(check)
    for n in gb300.nodes:
        fact = _pulled(check)[n["name"]]
        assert fact["pending"] is absent[n["name"]]
        assert _present(gb300, n, ref) is not absent[n["name"]], "check mode pulled on %s" % n["name"]

    first = run_playbook("image.yml", gb300.inventory, extravars=extra)
    assert first.status == "successful", failed_tasks(first)
    facts = _pulled(first)
    assert set(facts) == {n["name"] for n in gb300.nodes}
    for n in gb300.nodes:
        fact = facts[n["name"]]
        assert fact["reference"] == ref and fact["verified_by"] == "repo_digests" and not fact["pending"]
        assert ref in fact["repo_digests"]
        assert fact["changed"] is absent[n["name"]]
        inspect = json.loads(gb300.docker(n["name"], "image", "inspect", ref).stdout)[0]
        assert fact["id"] == inspect["Id"] and ref in inspect["RepoDigests"]
    assert set(_changed(first)) == {h for h, a in absent.items() if a}

    second = run_playbook("image.yml", gb300.inventory, extravars=extra)
    assert second.status == "successful", failed_tasks(second)
    assert _changed(second) == {}


def test_digest_missing_from_the_registry_fails_naming_every_node_and_the_reference(gb300):
    ref = gb300.images["standin-a"]
    missing = ref.split("@sha256:")[0] + "@sha256:" + "0" * 64
    r = run_playbook("image.yml", gb300.inventory, extravars={"kimi_k3_image": missing})
    assert r.status == "failed"
    failures = failed_tasks(r)
    assert sorted(h for h, _task, _msg in failures) == sorted(n["name"] for n in gb300.nodes), failures
    for host, task, msg in failures:
        assert task == "Require the pinned digest on every node"
        assert msg.startswith("%s: cannot pull %s: " % (host, missing)), msg
        assert "manifest unknown" in msg or "not found" in msg
        assert "docker buildx imagetools inspect %s" % missing in msg


def test_unreachable_registry_fails_with_the_engine_error(gb300):
    ref = "127.0.0.1:5999/vllm/vllm-openai@sha256:" + "0" * 64
    r = run_playbook("image.yml", gb300.inventory, extravars={"kimi_k3_image": ref})
    failures = failed_tasks(r)
    assert sorted(h for h, _task, _msg in failures) == sorted(n["name"] for n in gb300.nodes), failures
    for host, _task, msg in failures:
        assert msg.startswith("%s: cannot pull %s: " % (host, ref)) and "127.0.0.1:5999" in msg
        assert "Check that the registry is reachable from the node" in msg


def test_tarball_without_repo_digests_needs_the_expected_id(gb300, tmp_path):
    ref = gb300.images["standin-b"]
    head = gb300.nodes[0]
    gb300.docker(head["name"], "pull", ref, timeout=300)
    image_id = json.loads(gb300.docker(head["name"], "image", "inspect", ref).stdout)[0]["Id"]
    tarball = str(tmp_path / "standin-b.tar")
    gb300.docker(head["name"], "save", "-o", tarball, ref, timeout=300)
    absent = _remove_if_unused(gb300, ref)
    if not any(absent.values()):
        pytest.skip("%s is in use by containers on every node; nothing to load" % ref)
    extra = {"kimi_k3_image": ref, "image_tarball": tarball}

    r = run_playbook("image.yml", gb300.inventory, extravars=extra)
    res = task_results(r, VERDICT)
    for n in gb300.nodes:
        if absent[n["name"]]:
            verdict = task_results(r, "Judge the node")[n["name"]]["ansible_facts"]["image_verdict"]
            if verdict["ok"]:
                # containerd image store: the archive kept the digest
                assert res[n["name"]]["ansible_facts"]["image_pulled"]["verified_by"] == "repo_digests"
            else:
                assert "image_expected_id" in verdict["msg"] and tarball in verdict["msg"]

    extra["image_expected_id"] = image_id
    r = run_playbook("image.yml", gb300.inventory, extravars=extra)
    assert r.status == "successful", failed_tasks(r)
    for n in gb300.nodes:
        fact = _pulled(r)[n["name"]]
        assert fact["source"] == "tarball" and fact["id"] == image_id
        assert fact["verified_by"] in ("repo_digests", "image_id")
        out = gb300.ssh(n["name"], "ls /var/tmp/standin-b.tar")
        assert out.returncode != 0, "the copied tarball was left on %s" % n["name"]
    again = run_playbook("image.yml", gb300.inventory, extravars=extra)
    assert again.status == "successful", failed_tasks(again)
    assert _changed(again) == {}
    # give the nodes the digest reference back (a pull of a present ID only adds the RepoDigest)
    for n in gb300.nodes:
        gb300.docker(n["name"], "pull", ref, timeout=300)


def test_teardown_removes_the_container_everywhere_then_changes_nothing(gb300):
    ref = gb300.images["standin-a"]
    for n in gb300.nodes:
        gb300.docker(n["name"], "rm", "-f", CONTAINER, check=False)
        gb300.docker(n["name"], "run", "-d", "--name", CONTAINER, "--network", "none", "--entrypoint", "sleep",
                     ref, "600", timeout=300)
    # sleep as PID 1 ignores SIGTERM: a short grace keeps the test fast (SIGKILL after 5 s)
    extra = {"kimi_k3_container_name": CONTAINER, "teardown_stop_timeout_s": 5}
    try:
        check = run_playbook("teardown.yml", gb300.inventory, extravars=extra, check=True)
        assert check.status == "successful", failed_tasks(check)
        assert set(_changed(check)) == {n["name"] for n in gb300.nodes}
        for n in gb300.nodes:
            assert gb300.docker(n["name"], "inspect", CONTAINER, check=False).returncode == 0, "check mode removed it"

        first = run_playbook("teardown.yml", gb300.inventory, extravars=extra)
        assert first.status == "successful", failed_tasks(first)
        assert set(_changed(first)) == {n["name"] for n in gb300.nodes}
        head = gb300.nodes[0]["name"]
        order = [ev["event_data"]["task"] for ev in first.events
                 if ev.get("event") == "runner_on_ok" and ev["event_data"].get("res", {}).get("changed")]
        assert order.index("Remove the vLLM container on the followers") < order.index(
            "Remove the vLLM container on the head")
        assert task_results(first, "Remove the vLLM container on the head")[head]["changed"]
        for n in gb300.nodes:
            assert _gone(gb300, n, CONTAINER), "%s still exists on %s" % (CONTAINER, n["name"])
            assert _present(gb300, n, ref), "teardown removed the image without teardown_remove_image"

        second = run_playbook("teardown.yml", gb300.inventory, extravars=extra)
        assert second.status == "successful", failed_tasks(second)
        assert _changed(second) == {}
    finally:
        for n in gb300.nodes:
            gb300.docker(n["name"], "rm", "-f", CONTAINER, check=False)


def test_teardown_with_confirmation_deletes_only_the_given_cache_dir(gb300):
    cache = "/var/tmp/kimi-imgtest-cache"
    for n in gb300.nodes:
        assert gb300.ssh(n["name"], "mkdir -p %s/hub && touch %s/hub/weights.bin" % (cache, cache)).returncode == 0
    extra = {"kimi_k3_container_name": CONTAINER, "teardown_remove_cache": True,
             "teardown_confirm_remove_cache": "yes-delete-weights", "kimi_k3_model_cache_dir": cache}
    r = run_playbook("teardown.yml", gb300.inventory, extravars=extra)
    assert r.status == "successful", failed_tasks(r)
    for n in gb300.nodes:
        assert gb300.ssh(n["name"], "test -e %s" % cache).returncode != 0
    again = run_playbook("teardown.yml", gb300.inventory, extravars=extra)
    assert _changed(again) == {}
