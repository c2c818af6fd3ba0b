"""Private registries and mirrors (docs/image.md) on sim/simctl up --cluster gb300.

simctl runs a second registry on 127.0.0.1:5001 with htpasswd (bcrypt) authentication over the open registry's
storage (the same images by the same digests; credentials in sim/.state/registry/auth/credentials.json), and copies
standin-a to 127.0.0.1:5000/mirror/... with the same manifest bytes, i.e. the same digest (a site mirror).
Containers used here are named vllm-kimi-k3-regtest and removed at the end.
"""
import json
import os
import subprocess

import pytest

from tests.helpers.runner import REPO, failed_tasks, run_playbook, task_results

pytestmark = pytest.mark.sim

CREDS = os.path.join(REPO, "sim", ".state", "registry", "auth", "credentials.json")
CONTAINER = "vllm-kimi-k3-regtest"
LOGIN_CHECK = "Require every registry login"
VERDICT = "Record the verdict as the image_pulled fact"


@pytest.fixture
def gb300(sim_cluster):
    return sim_cluster("gb300")


@pytest.fixture
def creds():
    with open(CREDS) as f:
        return json.load(f)


def _auth_ref(sim):
    return sim.images["standin-a"].replace("127.0.0.1:5000/", "127.0.0.1:5001/", 1)


def _containers(sim):
    return {n["name"]: sim.docker(n["name"], "ps", "-a", "--format", "{{.Names}} {{.ID}} {{.Status}}").stdout
            for n in sim.nodes}


def _drop(sim, ref):
    for n in sim.nodes:
        sim.docker(n["name"], "image", "rm", ref, check=False)


def _events_text(r):
    return json.dumps(list(r.events), default=str)


def _stored_auths(sim):
    """Registries with credentials in root's Docker config on each node (the modules run as root there)."""
    out = {}
    for n in sim.nodes:
        p = sim.ssh(n["name"], "cat /root/.docker/config.json 2>/dev/null || echo '{}'")
        assert p.returncode == 0, p.stderr
        out[n["name"]] = sorted(json.loads(p.stdout or "{}").get("auths", {}))
    return out


def test_the_authenticated_registry_refuses_an_anonymous_pull(gb300, tmp_path):
    env = dict(gb300.docker_env(gb300.nodes[0]["name"]), DOCKER_CONFIG=str(tmp_path))
    p = subprocess.run(["docker", "pull", _auth_ref(gb300)], env=env, capture_output=True, text=True, timeout=120,
                       check=False)
    assert p.returncode != 0 and ("no basic auth credentials" in p.stderr or "unauthorized" in p.stderr), p.stderr


def test_wrong_password_fails_at_the_login_on_every_node_before_anything_changes(gb300, creds):
    ref = _auth_ref(gb300)
    _drop(gb300, ref)
    before = _containers(gb300)
    wrong = dict(creds, password="not-" + creds["password"])
    extra = {"kimi_k3_image": ref, "kimi_k3_container_name": CONTAINER, "image_registry_credentials": [wrong]}
    r = run_playbook("deploy.yml", gb300.inventory, extravars=extra, tags="image,launch")
    assert r.status == "failed"
    failures = failed_tasks(r)
    assert sorted(h for h, _t, _m in failures) == sorted(n["name"] for n in gb300.nodes), failures
    for host, task, msg in failures:
        assert task == LOGIN_CHECK
        assert msg.startswith("%s: cannot log in to 127.0.0.1:5001 as 'kimi-sim' (image_registry_credentials[0]): "
                              % host), msg
        assert "Fix the username/password in the vault" in msg
    assert wrong["password"] not in _events_text(r), "the password reached the callback events"
    assert not task_results(r, "Pull the image by digest"), "a pull ran after the failed login"
    assert _containers(gb300) == before
    for n in gb300.nodes:
        assert gb300.docker(n["name"], "image", "inspect", ref, check=False).returncode != 0
    assert _stored_auths(gb300) == {n["name"]: [] for n in gb300.nodes}


def test_teardown_logs_out_of_what_an_interrupted_run_left(gb300, creds):
    """Credentials a run interrupted between login and logout (or an earlier release) left: teardown removes them."""
    ref = _auth_ref(gb300)
    for n in gb300.nodes:
        p = gb300.ssh(n["name"], "mkdir -p /root/.docker && printf '%s' > /root/.docker/config.json" % json.dumps(
            {"auths": {"127.0.0.1:5001": {"auth": "a2ltaS1zaW06eA=="}}}))
        assert p.returncode == 0, p.stderr
    extra = {"kimi_k3_image": ref, "kimi_k3_container_name": CONTAINER, "image_registry_credentials": [creds],
             "teardown_stop_timeout_s": 5}
    r = run_playbook("teardown.yml", gb300.inventory, extravars=extra)
    assert r.status == "successful", failed_tasks(r)
    assert _stored_auths(gb300) == {n["name"]: [] for n in gb300.nodes}
    assert creds["password"] not in _events_text(r)


def test_right_password_deploys_from_the_authenticated_registry(gb300, creds):
    ref = _auth_ref(gb300)
    _drop(gb300, ref)
    extra = {"kimi_k3_image": ref, "kimi_k3_container_name": CONTAINER, "image_registry_credentials": [creds]}
    try:
        r = run_playbook("deploy.yml", gb300.inventory, extravars=extra, tags="image,launch")
        assert r.status == "successful", failed_tasks(r)
        assert creds["password"] not in _events_text(r)
        for n in gb300.nodes:
            fact = task_results(r, VERDICT)[n["name"]]["ansible_facts"]["image_pulled"]
            assert fact["pulled_reference"] == ref and fact["verified_by"] == "repo_digests" and fact["changed"]
            image = gb300.docker(n["name"], "inspect", "--format", "{{.Config.Image}}", CONTAINER).stdout.strip()
            assert image == ref
        # logged out after the pull: no node keeps the registry's credentials
        assert _stored_auths(gb300) == {n["name"]: [] for n in gb300.nodes}
        again = run_playbook("deploy.yml", gb300.inventory, extravars=extra, tags="image,launch")
        assert again.status == "successful", failed_tasks(again)
        assert {h: c for h, c in again.stats.get("changed", {}).items() if c} == {}
        assert _stored_auths(gb300) == {n["name"]: [] for n in gb300.nodes}
    finally:
        run_playbook("teardown.yml", gb300.inventory,
                     extravars={"kimi_k3_container_name": CONTAINER, "teardown_stop_timeout_s": 5})


def test_mirror_rewritten_image_is_pulled_and_launched_by_the_same_digest(gb300):
    digest = gb300.images["standin-a"].split("@", 1)[1]
    original = "docker.io/vllm/vllm-openai@" + digest    # unreachable here: only the mirror can serve it
    mirrored = "127.0.0.1:5000/mirror/vllm/vllm-openai@" + digest
    _drop(gb300, mirrored)
    extra = {"kimi_k3_image": original, "kimi_k3_container_name": CONTAINER,
             "image_mirror": {"docker.io/": "127.0.0.1:5000/mirror/"}}
    try:
        r = run_playbook("deploy.yml", gb300.inventory, extravars=extra, tags="image,launch")
        assert r.status == "successful", failed_tasks(r)
        for n in gb300.nodes:
            fact = task_results(r, VERDICT)[n["name"]]["ansible_facts"]["image_pulled"]
            assert fact["reference"] == original and fact["pulled_reference"] == mirrored
            assert fact["mirror"] == "docker.io/ -> 127.0.0.1:5000/mirror/" and fact["verified_by"] == "repo_digests"
            inspect = json.loads(gb300.docker(n["name"], "image", "inspect", mirrored).stdout)[0]
            assert mirrored in inspect["RepoDigests"]
            image = gb300.docker(n["name"], "inspect", "--format", "{{.Config.Image}}", CONTAINER).stdout.strip()
            assert image == mirrored
    finally:
        run_playbook("teardown.yml", gb300.inventory,
                     extravars={"kimi_k3_container_name": CONTAINER, "teardown_stop_timeout_s": 5})
