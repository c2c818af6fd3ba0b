"""image and teardown roles without a cluster: argument specs match defaults, refusals happen before any host
is contacted (the example inventory's hosts are not reachable from here)."""
import os

import pytest
import yaml

from tests.helpers.runner import REPO, failed_tasks, run_playbook, task_results

EXAMPLE = os.path.join(REPO, "inventories", "gb300-cluster")


@pytest.fixture
def inventory(tmp_path):
    """The gb300-cluster example with its hosts moved to closed loopback ports (nothing may reach them)."""
    hosts = _load("inventories", "gb300-cluster", "hosts.yml")
    for group in hosts["vllm_cluster"]["children"].values():
        for i, (name, hv) in enumerate(sorted(group.get("hosts", {}).items())):
            hv.update(ansible_host="127.0.0.%d" % (201 + len(name) % 10 + i), ansible_port=1)
    inv = tmp_path / "inv"
    inv.mkdir()
    (inv / "hosts.yml").write_text(yaml.safe_dump(hosts))
    os.symlink(os.path.join(EXAMPLE, "group_vars"), str(inv / "group_vars"))
    return str(inv)


REFUSAL = "Refuse to delete the weights without the confirmation phrase"


def _load(*parts):
    with open(os.path.join(REPO, *parts)) as handle:
        return yaml.safe_load(handle)


@pytest.mark.parametrize("role", ["image", "teardown", "weights"])
def test_argument_specs_document_every_default_with_the_role_prefix(role):
    defaults = _load("roles", role, "defaults", "main.yml")
    options = _load("roles", role, "meta", "argument_specs.yml")["argument_specs"]["main"]["options"]
    for name in defaults:
        assert name.startswith(role + "_"), name
    public = set(defaults) - {"image_allow_unpinned", "image_lookup_names"}
    assert public == set(options), set(options) ^ public
    for name, spec in options.items():
        if "default" in spec:
            assert spec["default"] == defaults[name], name


def test_defaults_are_commented():
    for role in ("image", "teardown", "weights"):
        with open(os.path.join(REPO, "roles", role, "defaults", "main.yml")) as handle:
            lines = handle.read().splitlines()
        for i, line in enumerate(lines):
            if line and not line.startswith((" ", "#", "-")) and ":" in line:
                assert lines[i - 1].startswith("#"), "%s: %s has no comment above it" % (role, line)


def test_tag_only_image_reference_is_refused_on_every_node_before_contacting_it(inventory):
    r = run_playbook("image.yml", inventory, extravars=dict(image_reference="vllm/vllm-openai:latest"))
    assert r.status == "failed"
    failures = failed_tasks(r)
    hosts = {h for h, task, _msg in failures if task == "Check the image reference"}
    assert hosts and len(hosts) == len(failures), failures
    for host, _task, msg in failures:
        assert msg.startswith(host + ": 'vllm/vllm-openai:latest' is not pinned by digest")
        assert "kimi_k3_allow_unpinned_image" in msg


def test_cache_removal_without_the_phrase_is_refused_before_contacting_nodes(inventory):
    r = run_playbook("teardown.yml", inventory,
                     extravars=dict(teardown_remove_cache=True, teardown_confirm_remove_cache="yes"))
    assert r.status == "failed"
    failures = failed_tasks(r)
    assert failures and all(t == REFUSAL for _host, t, _msg in failures)
    assert all("yes-delete-weights" in msg for _host, _task, msg in failures)


def test_shallow_cache_dir_is_refused_even_with_the_phrase(inventory):
    r = run_playbook("teardown.yml", inventory,
                     extravars=dict(teardown_remove_cache=True, teardown_confirm_remove_cache="yes-delete-weights",
                                    teardown_model_cache_dir="/data"))
    failures = failed_tasks(r)
    assert failures and all(t == REFUSAL for _host, t, _msg in failures)


D1 = "sha256:" + "1" * 64


def _only_task(r, task):
    failures = failed_tasks(r)
    assert r.status == "failed" and failures and {t for _h, t, _m in failures} == {task}, failures
    return failures


def test_bad_mirror_rule_is_refused_on_every_node_before_contacting_it(inventory):
    r = run_playbook("image.yml", inventory, extravars={"image_reference": "vllm/vllm-openai@" + D1,
                                                        "image_mirror": {"docker.io/": "harbor.example/hub"}})
    # The plan checks role variables first (plugin_utils/plan/role_variables.py), with the role's own rule.
    for _host, _t, msg in _only_task(r, "Validate the inventory and render every node's launch plan"):
        assert msg.startswith("The inventory was refused before contacting any host (1 problem(s)):")
        assert ("gb300-tray01: image_mirror: image_mirror['docker.io/']: the mirror 'harbor.example/hub' must be a "
                "prefix ending in / as the source is.") in msg


SOURCE = "Take where to pull from"


def _sources(inventory, extravars):
    """{host: image_source} the image role takes, before its pull (which fails: the hosts are unreachable)."""
    r = run_playbook("image.yml", inventory, extravars=extravars)
    return dict((h, res["ansible_facts"]["image_source"]) for h, res in task_results(r, SOURCE).items())


def test_the_image_role_pulls_the_name_the_plan_hands_over(inventory):
    image = _load("inventories", "gb300-cluster", "group_vars", "vllm_cluster.yml")["kimi_k3_image"]
    sources = _sources(inventory, {"image_mirror": {"docker.io/": "harbor.example/hub/"}})
    assert len(sources) >= 2
    for host, source in sources.items():
        assert source == {"reference": image, "pinned": True, "pull": "harbor.example/hub/" + image, "mirrored": True,
                          "rule": "docker.io/ -> harbor.example/hub/"}, host


def test_a_hand_set_image_reference_is_pulled_under_that_name(inventory):
    sources = _sources(inventory, {"image_mirror": {"docker.io/": "harbor.example/hub/"},
                                   "image_reference": "harbor.example/v/vllm@" + D1})
    hand_set = "harbor.example/v/vllm@" + D1
    assert sources and all(s == {"reference": hand_set, "pinned": True, "pull": hand_set, "mirrored": False,
                                 "rule": None} for s in sources.values()), sources


def test_a_mirror_given_to_the_image_role_alone_is_refused_before_contacting_nodes(inventory, tmp_path):
    playbook = tmp_path / "image-param.yml"
    playbook.write_text(yaml.safe_dump([{"hosts": "vllm_cluster", "gather_facts": False, "roles": [
        {"role": "gpufleet.kimi_k3.plan", "run_once": True, "plan_write_files": False},
        {"role": "gpufleet.kimi_k3.image", "image_mirror": {"docker.io/": "harbor.example/hub/"}}]}]))
    failures = _only_task(run_playbook(str(playbook), inventory), "Refuse an image_mirror the plan did not see")
    assert len(failures) >= 2
    for host, _t, msg in failures:
        assert msg.startswith(host + ": image_mirror is set for the image role only") and "-e" in msg, msg


def test_incomplete_credentials_are_refused_before_contacting_nodes_without_showing_passwords(inventory):
    creds = [{"registry": "harbor.example", "username": "robot", "password": "hunter2"},
             {"registry": "other.example", "username": "robot"}]
    r = run_playbook("image.yml", inventory, extravars={"image_reference": "harbor.example/v/vllm@" + D1,
                                                        "image_registry_credentials": creds})
    for _host, _t, msg in _only_task(r, "Validate the inventory and render every node's launch plan"):
        assert "image_registry_credentials: image_registry_credentials[1] (other.example) has no password." in msg
    assert "hunter2" not in str(list(r.events))


def test_weights_refuse_an_unpinned_revision_before_contacting_nodes(inventory):
    # The plan (first play of weights.yml) refuses a revision that is not a commit, before any node is contacted.
    r = run_playbook("weights.yml", inventory, extravars={"kimi_k3_model_revision": "main"})
    for _host, _t, msg in _only_task(r, "Validate the inventory and render every node's launch plan"):
        assert "kimi_k3_model_revision" in msg and "40-character" in msg


def _tasks(*parts):
    return _load("roles", *parts)


def test_image_role_logs_out_after_the_pull_whatever_happened():
    """The login and the pull share a block whose always section logs out of the same registries: a failed login,
    a failed pull or a refusal in between still leaves no credentials in the node's Docker config."""
    blocks = [t for t in _tasks("image", "tasks", "main.yml") if "block" in t]
    login = [b for b in blocks if "Log in to the registries" in [t["name"] for t in b["block"]]]
    assert len(login) == 1
    names = [t["name"] for t in login[0]["block"]]
    assert names.index("Log in to the registries") < names.index("Pull the image by digest")
    logout = login[0]["always"]
    assert [t["community.docker.docker_login"]["state"] for t in logout] == ["absent"]
    assert logout[0]["loop"] == "{{ image_logins.logins | map(attribute='registry_url') | list }}"
    assert "password" not in logout[0]["community.docker.docker_login"]
    flat = [t for t in _tasks("image", "tasks", "main.yml") if "community.docker.docker_login" in t]
    assert flat == [], "a docker_login outside the login/pull/logout block"
    # a failed logout is not swallowed: the role's last task names it, after the pull's verdict
    assert logout[0]["register"] == "image_logout" and logout[0]["ignore_errors"] is True
    last = _tasks("image", "tasks", "main.yml")[-1]
    assert last["name"] == "Require the logouts" and "image_logout_failed" in last["ansible.builtin.assert"]["that"]


def test_teardown_logs_out_of_the_image_registry():
    tasks = [t for top in _tasks("teardown", "tasks", "main.yml") for t in top.get("block", [top])]
    logout = [t for t in tasks if "community.docker.docker_login" in t]
    assert len(logout) == 1 and logout[0]["community.docker.docker_login"]["state"] == "absent"
    names = [t["name"] for t in tasks]
    assert names.index(logout[0]["name"]) < names.index("Remove the image")


def test_teardown_logout_list_is_the_image_role_login_list():
    """The registries teardown logs out of: those the image role logs into for the same (mirror-rewritten) image,
    each once, never a password."""
    from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.image.reference import registry_logins

    creds = [{"registry": "https://harbor.example/", "username": "a", "password": "p1"},
             {"registry": "harbor.example", "username": "b", "password": "p2"},
             {"registry": "docker.io", "username": "c", "password": "p3"}]
    got = registry_logins(creds, "harbor.example/v/vllm@" + D1)
    assert sorted({x["registry_url"] for x in got["logins"]}) == ["harbor.example"]
    hub = registry_logins(creds, "vllm/vllm-openai@" + D1)
    assert [x["registry_url"] for x in hub["logins"]] == ["https://index.docker.io/v1/"]
