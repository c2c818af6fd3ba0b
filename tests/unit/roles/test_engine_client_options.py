"""Every task that talks to a node's container engine passes the plan's engine client options with its
``docker_host``: community.docker's modules each of tls, validate_certs, ca_path, client_cert, client_key and
use_ssh_client from the same ``docker_client`` mapping; the collection's own modules the mapping as
``docker_client``. A task that passes only ``docker_host`` would ask a TLS or ssh engine without them."""
import glob
import os
import re

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
OWN = ("gpufleet.kimi_k3.vllm_node_status", "gpufleet.kimi_k3.vllm_wait", "gpufleet.kimi_k3.node_probe",
       "gpufleet.kimi_k3.fabric_wait",
       "gpufleet.kimi_k3.vllm_container_log")
CLIENT = ("tls", "validate_certs", "ca_path", "client_cert", "client_key", "use_ssh_client")
FILES = sorted(glob.glob(os.path.join(REPO, "roles", "*", "tasks", "*.yml"))
               + glob.glob(os.path.join(REPO, "playbooks", "*.yml")))


def _tasks(node):
    """Every task mapping under ``node`` (plays, blocks, rescue/always included)."""
    if isinstance(node, list):
        for item in node:
            yield from _tasks(item)
    elif isinstance(node, dict):
        if any(isinstance(k, str) and (k.startswith("community.docker.") or k in OWN) for k in node):
            yield node
        for key in ("tasks", "pre_tasks", "post_tasks", "handlers", "block", "rescue", "always"):
            if key in node:
                yield from _tasks(node[key])


def engine_tasks():
    found = []
    for path in FILES:
        with open(path) as handle:
            doc = yaml.safe_load(handle)
        for task in _tasks(doc):
            module = next(k for k in task if k.startswith("community.docker.") or k in OWN)
            found.append((os.path.relpath(path, REPO), task.get("name", "?"), module, task[module] or {}))
    return found


TASKS = engine_tasks()


def test_the_engine_tasks_are_found():
    modules = set(t[2] for t in TASKS)
    assert {"community.docker.docker_container", "community.docker.docker_image_pull", "gpufleet.kimi_k3.vllm_wait",
            "gpufleet.kimi_k3.node_probe", "gpufleet.kimi_k3.vllm_container_log"} <= modules
    assert len(TASKS) >= 26


@pytest.mark.parametrize("path,name,module,args", TASKS, ids=["%s: %s" % (t[0], t[1]) for t in TASKS])
def test_engine_task_passes_the_client_options(path, name, module, args):
    host = args.get("docker_host")
    assert host, "%s: %s passes no docker_host" % (path, name)
    source = re.fullmatch(r"\{\{ (.*)docker_host \}\}", host).group(1)
    client = source + "docker_client"
    if module in OWN:
        assert args.get("docker_client") == "{{ %s }}" % client, (path, name)
        return
    for option in CLIENT:
        assert client + "." + option in str(args.get(option)), (path, name, option)
