"""Testinfra checks shared by the deploy-* molecule scenarios: the running deployment matches the plan.

The plan is rendered again here (playbooks/plan.yml -e plan_dir=<tmp>, controller only) and compared with what
each node's engine reports for the container (community.docker.docker_container_info through testinfra's ansible
backend, so the inventory's templated connection variables apply). HTTP checks go from the controller to the
planned API URLs, as a client would.

A scenario's test module sets ``testinfra_hosts = ["ansible://vllm_cluster"]`` and imports the tests below.
"""
import json
import os
import socket
import subprocess
import tempfile
import urllib.error
import urllib.request

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INVENTORY = os.environ.get("KIMI_K3_MOLECULE_INVENTORY", "")
RECORD_DIR = os.path.join(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/nonexistent"), "containers")


def render_plan(inventory, extra=None):
    """{host: plan dict} from playbooks/plan.yml run into a temp dir."""
    out = tempfile.mkdtemp(prefix="molecule-plan-")
    cmd = [os.path.join(REPO, ".venv", "bin", "ansible-playbook"), "-i", inventory,
           os.path.join(REPO, "playbooks", "plan.yml"), "-e", "plan_dir=" + out]
    for k, v in (extra or {}).items():
        cmd += ["-e", "%s=%s" % (k, v)]
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"))
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    plans = {}
    for name in os.listdir(out):
        if name.endswith(".json"):
            with open(os.path.join(out, name)) as f:
                plans[name[:-5]] = json.load(f)
    return plans


@pytest.fixture(scope="session")
def plans():
    assert INVENTORY, "KIMI_K3_MOLECULE_INVENTORY is not set (molecule.yml ansible.env)"
    return render_plan(INVENTORY)


@pytest.fixture()
def node(host):
    return host.backend.get_pytest_id().replace("ansible://", "")


@pytest.fixture()
def plan(plans, node):
    return plans[node]


_INFO = {}


def _module(host, node, module, args):
    """Run a read-only module on the node once per session (each call is an ansible process)."""
    key = (node, module, args)
    if key not in _INFO:
        _INFO[key] = host.ansible(module, args, check=False)
    return _INFO[key]


@pytest.fixture()
def container(host, node, plan):
    res = _module(host, node, "community.docker.docker_container_info", "name=%s" % plan["container"]["name"])
    assert res.get("exists"), "no container %s: %s" % (plan["container"]["name"], res)
    return res["container"]


def _http_status(url, timeout=5):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def _bind(spec):
    parts = spec.split(":")
    return parts[0], parts[1], parts[2] if len(parts) > 2 else "rw"


def _device_paths(spec):
    parts = spec.split(":")
    return parts[0], parts[1] if len(parts) > 1 else parts[0]


def test_container_runs_plan_image(host, node, container, plan):
    assert container["State"]["Running"] is True and container["State"]["Restarting"] is False
    assert container["Config"]["Image"] == plan["image"], container["Config"]["Image"]
    # the image the container was created from is the one the plan's digest resolves to on this node
    img = _module(host, node, "community.docker.docker_image_info", "name=%s" % plan["image"])
    assert len(img["images"]) == 1, img
    assert container["Image"] == img["images"][0]["Id"], (container["Image"], img["images"][0]["Id"])
    digests = [d.split("@", 1)[1] for d in img["images"][0]["RepoDigests"]]
    assert plan["image"].split("@", 1)[1] in digests, digests


def test_command_is_plan_vllm_args(container, plan):
    assert container["Config"]["Cmd"] == plan["vllm_args"], container["Config"]["Cmd"]
    assert container["Config"]["Entrypoint"] == ["vllm", "serve"], container["Config"]["Entrypoint"]


def test_env_contains_plan_env(container, plan):
    env = dict(e.split("=", 1) for e in container["Config"]["Env"])
    missing = {k: v for k, v in plan["env"].items() if env.get(k) != v}
    assert missing == {}, "env differs from the plan: %s" % {k: (v, env.get(k)) for k, v in missing.items()}


def test_host_config_as_planned(container, plan):
    hc, pc = container["HostConfig"], plan["container"]
    assert hc["NetworkMode"] == pc["network_mode"], hc["NetworkMode"]
    assert hc["IpcMode"] == pc["ipc_mode"], hc["IpcMode"]
    assert hc["Privileged"] is False
    got_dev = sorted((d["PathOnHost"], d["PathInContainer"]) for d in hc.get("Devices") or [])
    assert got_dev == sorted(_device_paths(d) for d in pc["devices"]), got_dev
    got_ul = sorted("%s:%s:%s" % (u["Name"], u["Soft"], u["Hard"]) for u in hc.get("Ulimits") or [])
    assert got_ul == sorted(pc["ulimits"]), got_ul

    def norm(caps):
        return sorted(c.upper().replace("CAP_", "") for c in caps or [])

    assert norm(hc.get("CapAdd")) == norm(pc["capabilities"]), hc.get("CapAdd")
    assert sorted(hc.get("GroupAdd") or []) == sorted(pc["groups"]), hc.get("GroupAdd")
    assert set(pc["security_opts"]) <= set(hc.get("SecurityOpt") or []), hc.get("SecurityOpt")
    got_req = [{"driver": r["Driver"], "count": r["Count"], "capabilities": r["Capabilities"]}
               for r in hc.get("DeviceRequests") or []]
    assert got_req == pc["device_requests"], got_req
    assert sorted(map(_bind, hc.get("Binds") or [])) == sorted(map(_bind, pc["volumes"])), hc.get("Binds")
    labels = container["Config"]["Labels"] or {}
    assert {k: labels.get(k) for k in pc["labels"]} == pc["labels"], labels


def test_api_as_planned(plan):
    """Nodes that serve HTTP answer /health 200; headless followers open no API port."""
    if plan["serves_http"]:
        status = _http_status(plan["api_url"] + "/health")
        assert status == 200, "%s/health answered %s" % (plan["api_url"], status)
        assert "--headless" not in plan["vllm_args"]
    else:
        assert plan["api_url"] is None and "--headless" in plan["vllm_args"]
        port = int(next((plan["vllm_args"][i + 1] for i, a in enumerate(plan["vllm_args"]) if a == "--port"), 8000))
        s = socket.socket()
        s.settimeout(3)
        try:
            assert s.connect_ex((plan["internal_address"], port)) != 0, "headless follower answers on its API port"
        finally:
            s.close()


def test_same_container_as_recorded_by_converge(node, container):
    """The idempotence converge kept each container (same Id and StartedAt as recorded by converge)."""
    path = os.path.join(RECORD_DIR, node + ".json")
    if not os.path.exists(path):
        pytest.skip("no converge record (verify run without converge)")
    with open(path) as f:
        rec = json.load(f)
    live = (container["Id"], container["State"]["StartedAt"])
    assert live == (rec["Id"], rec["StartedAt"]), "container replaced or restarted: %s, recorded %s" % (live, rec)
