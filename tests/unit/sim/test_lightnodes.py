"""sim/lightnodes.py (the light bench cluster): its own address range and state, one sshd config per node that hands
the faked tools their profile, and an inventory Ansible can read. No sshd is started here."""
import importlib.util
import os

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


@pytest.fixture()
def light(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("lightnodes", os.path.join(REPO, "sim", "lightnodes.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(mod, "STATE", str(tmp_path / "state"))
    monkeypatch.setattr(mod, "INVENTORY", str(tmp_path / "inv"))
    return mod


def test_nodes_live_in_their_own_range_apart_from_the_main_cluster(light):
    nodes = light.nodes(64)
    assert nodes[0] == {"name": "light-node01", "address": "127.0.3.11"}
    assert nodes[-1] == {"name": "light-node64", "address": "127.0.3.74"}
    assert len({n["address"] for n in light.nodes(light.MAX_NODES)}) == light.MAX_NODES
    assert all(n["address"].startswith("127.0.3.") and int(n["address"].rsplit(".", 1)[1]) <= 254
               for n in light.nodes(light.MAX_NODES))
    assert not light.STATE.startswith(("/run/kimi-sim/", "/var/lib/kimi-sim"))
    assert light.DEFAULT_STATE == "/run/kimi-sim-light"


def test_sshd_config_points_the_tools_at_the_nodes_profile(light):
    node = light.nodes(3)[2]
    cfg = light.sshd_config(node, "/k/id_ed25519", "/k/host_key")
    lines = cfg.splitlines()
    d = light.node_dir("light-node03")
    assert "ListenAddress 127.0.3.13:22" in lines and "HostKey /k/host_key" in lines
    assert "AuthorizedKeysFile /k/id_ed25519.pub" in lines and "PasswordAuthentication no" in lines
    assert "PidFile %s/sshd.pid" % d in lines
    setenv = [x for x in lines if x.startswith("SetEnv ")][0].split()[1:]
    env = dict(kv.split("=", 1) for kv in setenv)
    assert env["KIMI_SIM_PROFILE"] == d + "/profile.json" and env["SIM_NODE_NAME"] == "light-node03"
    assert env["PATH"].split(":")[0] == d + "/root/usr/local/bin"      # the node's own tool links first


def test_inventory_has_every_node_and_no_engine(light):
    light.write_inventory(light.nodes(5), "/k/id_ed25519")
    with open(os.path.join(light.INVENTORY, "hosts.yml")) as f:
        inv = yaml.safe_load(f)
    cluster = inv["all"]["children"]["vllm_cluster"]
    heads = cluster["children"]["vllm_head"]["hosts"]
    workers = cluster["children"]["vllm_workers"]["hosts"]
    assert list(heads) == ["light-node01"] and len(workers) == 4
    assert workers["light-node05"]["ansible_host"] == "127.0.3.15"
    assert cluster["vars"]["ansible_ssh_private_key_file"] == "/k/id_ed25519"
    assert cluster["vars"]["kimi_k3_strategy"] == "multi_node_dep"


def test_refuses_a_size_beyond_its_range(light):
    with pytest.raises(RuntimeError, match="--nodes must be 1..240"):
        light.up(241)


def test_down_when_not_up_touches_nothing(light, capsys):
    light.down()
    assert "light cluster is not up" in capsys.readouterr().err
    assert not os.path.exists(light.STATE)


def test_cpu_seconds_is_none_without_the_cgroup(light, monkeypatch, tmp_path):
    monkeypatch.setattr(light, "CGROUP", str(tmp_path / "no-such-cgroup"))
    assert light.cpu_seconds() is None
