"""Every task that talks to a node's container engine uses the plan's engine client options: community.docker's
modules through ``module_defaults`` of ``group/community.docker.docker`` set to the plan's ``engine_client`` (on the
task or a block around it, so the options are written once, not per task); the collection's own modules pass
``docker_host`` and the ``docker_client`` mapping. A task that set ``docker_host`` alone would ask a TLS or ssh
engine without the rest, and one that set any client option itself would override the plan's."""
import glob
import os
import re

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
OWN = ("gpufleet.kimi_k3.vllm_node_status", "gpufleet.kimi_k3.vllm_wait", "gpufleet.kimi_k3.node_probe",
       "gpufleet.kimi_k3.fabric_wait",
       "gpufleet.kimi_k3.vllm_container_log")
GROUP = "group/community.docker.docker"
CLIENT = ("docker_host", "tls", "validate_certs", "ca_path", "client_cert", "client_key", "use_ssh_client")
FILES = sorted(glob.glob(os.path.join(REPO, "roles", "*", "tasks", "*.yml"))
               + glob.glob(os.path.join(REPO, "playbooks", "*.yml")))


def _tasks(node, defaults=None):
    """Every engine task under ``node`` (plays, blocks, rescue/always included) with the module_defaults of
    ``group/community.docker.docker`` it gets from itself or the nearest block around it."""
    if isinstance(node, list):
        for item in node:
            yield from _tasks(item, defaults)
    elif isinstance(node, dict):
        defaults = (node.get("module_defaults") or {}).get(GROUP, defaults)
        if any(isinstance(k, str) and (k.startswith("community.docker.") or k in OWN) for k in node):
            yield node, defaults
        for key in ("tasks", "pre_tasks", "post_tasks", "handlers", "block", "rescue", "always"):
            if key in node:
                yield from _tasks(node[key], defaults)


def engine_tasks():
    found = []
    for path in FILES:
        with open(path) as handle:
            doc = yaml.safe_load(handle)
        for task, defaults in _tasks(doc):
            module = next(k for k in task if k.startswith("community.docker.") or k in OWN)
            found.append((os.path.relpath(path, REPO), task.get("name", "?"), module, task[module] or {}, defaults))
    return found


TASKS = engine_tasks()


def test_the_engine_tasks_are_found():
    modules = set(t[2] for t in TASKS)
    assert {"community.docker.docker_container", "community.docker.docker_image_pull", "gpufleet.kimi_k3.vllm_wait",
            "gpufleet.kimi_k3.node_probe", "gpufleet.kimi_k3.vllm_container_log"} <= modules
    assert len(TASKS) >= 26


@pytest.mark.parametrize("path,name,module,args,defaults", TASKS, ids=["%s: %s" % (t[0], t[1]) for t in TASKS])
def test_engine_task_uses_the_plans_client_options(path, name, module, args, defaults):
    if module in OWN:
        # community.docker's group defaults do not reach the collection's own modules (not in that group): they
        # take the plan's docker_host and docker_client themselves, inside such a block or not
        host = args.get("docker_host")
        assert host, "%s: %s passes no docker_host" % (path, name)
        source = re.fullmatch(r"\{\{ (.*)docker_host \}\}", host).group(1)
        assert args.get("docker_client") == "{{ %sdocker_client }}" % source, (path, name)
        return
    assert re.fullmatch(r"\{\{ (\S*\.|image_)engine_client \}\}", str(defaults)), (path, name, defaults)
    assert not set(CLIENT) & set(args), (path, name, "set by module_defaults")


def test_the_client_options_are_spelled_out_once():
    """The options come from the plan's engine_client; no task file names the docker_client mapping's members."""
    for path in FILES:
        with open(path) as handle:
            assert "docker_client." not in handle.read(), path
