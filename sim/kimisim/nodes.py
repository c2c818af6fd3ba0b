"""Node containers, their profiles, SSH keys and the fake weights."""
import hashlib
import json
import os
import socket

from kimisim.settings import CONTROL, MODELS_DIR, SIM_DIR, SIM_MODEL_REVISION, STATE
from kimisim.util import dk, read_json, sh, sock, write_in_place, write_json


def ensure_ssh_key():
    d = os.path.join(STATE, "ssh")
    key = os.path.join(d, "id_ed25519")
    if not os.path.exists(key):
        os.makedirs(d, mode=0o700, exist_ok=True)
        sh(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "kimi-sim", "-f", key])
    os.chmod(key, 0o600)
    return key


def profile_helper():
    """sim/nodetools/profile.py (owned by the node-tools author), loaded by path under a private name."""
    path = os.path.join(SIM_DIR, "nodetools", "profile.py")
    if not os.path.exists(path):
        return None
    import importlib.util
    spec = importlib.util.spec_from_file_location("kimi_sim_profile", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def profile_for(cluster, node, faults):
    """Rendered node profile: render_node_profile() if the helper has it, else base + apply_faults()."""
    helper = profile_helper()
    faults = list(faults or [])
    names = [n["name"] for n in cluster["nodes"]]
    idx = names.index(node)
    addr = cluster["nodes"][idx]["address"]
    base_exists = os.path.exists(os.path.join(SIM_DIR, "profiles", cluster["profile"] + ".json"))
    try:
        if base_exists and helper is not None and hasattr(helper, "render_node_profile"):
            return helper.render_node_profile(cluster["profile"], node, idx, faults, address=addr,
                                              domain_nodes=[n["address"] for n in cluster["nodes"]])
        base = read_json(os.path.join(SIM_DIR, "profiles", cluster["profile"] + ".json"))
        if base is None:
            if faults:
                raise RuntimeError("faults need sim/profiles/%s.json, which is absent" % cluster["profile"])
            return {"kimi_sim_placeholder": True, "accelerator": cluster["profile"],
                    "node": {"name": node, "index": idx, "address": addr},
                    "note": "sim/profiles/%s.json was absent when this profile was written" % cluster["profile"]}
        if faults:
            if helper is None or not hasattr(helper, "apply_faults"):
                raise RuntimeError("faults need sim/nodetools/profile.py (apply_faults), which is absent")
            base = helper.apply_faults(base, faults)
        return base
    except ValueError as e:
        raise RuntimeError("%s: %s" % (node, e))


def node_state_dir(node):
    return os.path.join(STATE, "nodes", node)


def write_profile(cluster, node, faults=None):
    d = node_state_dir(node)
    os.makedirs(d, exist_ok=True)
    if faults is None:
        faults = read_json(os.path.join(d, "faults.json"), []) or []
    prof = profile_for(cluster, node, faults)
    write_in_place(os.path.join(d, "profile.json"), json.dumps(prof, indent=2, sort_keys=True) + "\n")
    write_json(os.path.join(d, "faults.json"), list(faults))
    return os.path.join(d, "profile.json")


def ensure_fake_weights(model="moonshotai/Kimi-K3", shards=96):
    """Stand-in checkpoint in the HF cache layout (an index and 96 tiny shards under snapshots/<commit>, with
    refs/main naming the commit), so the rehearsal cluster has 'weights already present' the way a real site
    pre-downloads them; preflight's disk check then passes."""
    repo = os.path.join(MODELS_DIR, "hub", "models--" + model.replace("/", "--"))
    snap = os.path.join(repo, "snapshots", SIM_MODEL_REVISION)
    index = os.path.join(snap, "model.safetensors.index.json")
    if os.path.exists(index):
        return
    os.makedirs(snap, exist_ok=True)
    os.makedirs(os.path.join(repo, "refs"), exist_ok=True)
    with open(os.path.join(repo, "refs", "main"), "w") as f:
        f.write(SIM_MODEL_REVISION)
    names = ["model-%05d-of-%05d.safetensors" % (i, shards) for i in range(1, shards + 1)]
    for name in names:
        with open(os.path.join(snap, name), "wb") as f:
            f.write(b"kimi-sim stand-in shard\n")
    weight_map = dict(("model.layers.%d.weight" % i, name) for i, name in enumerate(names))
    with open(index + ".tmp", "w") as f:
        json.dump({"metadata": {"total_size": 0, "kimi_sim": True}, "weight_map": weight_map}, f)
    os.replace(index + ".tmp", index)


def node_container(node):
    return "kimi-sim-" + node


def node_run_args(cluster, n, image, key):
    prof = write_profile(cluster, n["name"])
    # 2 GiB /dev/shm: the vLLM container runs with the node's IPC namespace (ipc=host), like on a real host.
    args = ["run", "-d", "--name", node_container(n["name"]), "--network", "host", "--restart", "no",
            "--shm-size", "2g",
            "--label", "io.kimi-sim.node=" + n["name"], "--label", "io.kimi-sim.cluster=" + cluster["name"],
            "-e", "SIM_NODE_NAME=" + n["name"], "-e", "SIM_NODE_ADDRESS=" + n["address"],
            "-e", "SIM_CLUSTER=" + cluster["name"], "-e", "SIM_ACCELERATOR=" + cluster["profile"],
            "-v", "%s:/var/run/docker.sock" % sock(n["engine"]),
            "-v", "%s:/etc/kimi-sim/profile.json" % prof,
            "-v", "%s.pub:/etc/kimi-sim/authorized_keys:ro" % key,
            "-v", "%s:%s" % (MODELS_DIR, MODELS_DIR)]
    if cluster.get("models_dir"):
        args += ["-v", "%s:%s" % (cluster["models_dir"], cluster["models_dir"])]
    for dev in cluster.get("node_devices", []):
        args += ["--device", "/dev/null:" + dev]
    return args + [image]


def ensure_node(cluster, n, image, key):
    name = node_container(n["name"])
    args = node_run_args(cluster, n, image, key)
    cfg_hash = hashlib.sha256(json.dumps(args).encode()).hexdigest()[:16]
    p = dk(CONTROL, "inspect", "--format",
           '{{.State.Running}} {{index .Config.Labels "io.kimi-sim.config"}}', name, check=False)
    if p.returncode == 0:
        running, have = (p.stdout.split() + ["", ""])[:2]
        if running == "true" and have == cfg_hash:
            return False
        dk(CONTROL, "rm", "-f", name)
    dk(CONTROL, *args[:2], "--label", "io.kimi-sim.config=" + cfg_hash, *args[2:])
    return True


def ssh_ok(address, key, timeout=10):
    p = sh(["ssh", "-i", key, "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
            "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=5",
            "root@" + address, "test -S /var/run/docker.sock && python3 -c 'import requests'"],
           check=False, timeout=timeout)
    return p.returncode == 0


def ssh_banner(address, timeout=3):
    try:
        with socket.create_connection((address, 22), timeout=timeout) as s:
            s.settimeout(timeout)
            return s.recv(64).startswith(b"SSH-2.0-")
    except OSError:
        return False
