"""`simctl fault`: rewrite a node's profile in place; the host-side packet filter and disk read limit."""
import json
import os
import shlex
import shutil

from kimisim.clusters import all_known_clusters
from kimisim.nodes import node_container, node_state_dir, write_profile
from kimisim.settings import CONTROL, MODELS_DIR
from kimisim.util import die, dk, locked, log, read_json, sh, write_json


def find_node(node):
    for c in all_known_clusters().values():
        for n in c["nodes"]:
            if n["name"] == node or n["address"] == node:
                return c, n
    die("unknown node %r (is the sim up? see `simctl status`)" % node)


COMMENT = "kimi-sim:fabric_port_blocked"


def _rejects_for(address):
    """The INPUT REJECT rules for the node's address, as `iptables -S` prints them (without `-A INPUT`).

    The address is the node's own 127.x address, so every REJECT for it is this sim's, whoever added it: a rule
    left by a run that was killed, or by another checkout's sim, is found here too, not only the ones recorded."""
    if shutil.which("iptables") is None:
        return []
    p = sh(["iptables", "-S", "INPUT"], check=False)
    found = []
    for line in (p.stdout or "").splitlines():
        parts = shlex.split(line)                       # the comment comes back quoted
        if parts[:2] != ["-A", "INPUT"] or "REJECT" not in parts or "-d" not in parts:
            continue
        if parts[parts.index("-d") + 1] in (address, address + "/32"):
            found.append(parts[2:])
    return found


def packet_filter(address, ports):
    """The node's blocked TCP ports (fault fabric_port_blocked): REJECT rules for its address in the host's filter.

    The nodes share the host's network namespace, so the rule names the node's own 127.x address and port. Every
    REJECT for the address goes first (see _rejects_for), so clearing, `down` or a node made again leaves none."""
    for rule in _rejects_for(address):
        sh(["iptables", "-D", "INPUT"] + rule, check=False)
    if ports and shutil.which("iptables") is None:
        die("fault needs iptables on the host (apt-get install iptables)")
    for port in ports or []:
        sh(["iptables", "-I", "INPUT", "-p", "tcp", "-d", address, "--dport", str(int(port)),
            "-m", "comment", "--comment", COMMENT, "-j", "REJECT", "--reject-with", "tcp-reset"])


def _blkio_dir(node):
    """The node container's blkio cgroup directory (cgroup v1), or None where there is none."""
    p = dk(CONTROL, "inspect", "-f", "{{.State.Pid}}", node_container(node), check=False)
    pid = p.stdout.strip() if p.returncode == 0 else ""
    try:
        with open("/proc/%s/cgroup" % pid) as f:
            lines = [ln.rstrip("\n").split(":", 2) for ln in f]
    except OSError:
        return None
    path = next((ln[2] for ln in lines if len(ln) == 3 and "blkio" in ln[1].split(",")), None)
    return os.path.join("/sys/fs/cgroup/blkio", path.lstrip("/")) if path is not None else None


def disk_throttle(cluster, node, bps):
    """The node's weight reads limited to ``bps`` bytes/s (fault slow_weights_disk; 0 or None lifts it): a blkio
    read limit on the block device under the models directory for the node container, so direct-I/O reads of
    the weights are really that slow, as on a slow disk. Needs cgroup v1 blkio (the limit goes with the
    container on `down`). The limit set is recorded in the node's state directory: without one asked for or
    recorded there is nothing to do, and the container is not inspected."""
    record = os.path.join(node_state_dir(node), "disk_throttle.json")
    held = read_json(record, None)
    if not bps and not held:
        return
    if held:
        _lift_read_limit(held)
        os.remove(record)
    if bps:
        write_json(record, _set_read_limit(cluster, node, int(bps)))


def _read_limit_file(blkio):
    return os.path.join(blkio, "blkio.throttle.read_bps_device")


def _lift_read_limit(held):
    """Lift a recorded limit; a container made again since has a cgroup of its own (the old one is gone)."""
    if os.path.exists(_read_limit_file(held["blkio"])):
        with open(_read_limit_file(held["blkio"]), "w") as f:
            f.write("%s 0\n" % held["device"])


def _models_device(cluster):
    """"major:minor" of the block device under the cluster's models directory."""
    models = cluster.get("models_dir") or MODELS_DIR
    dev = os.stat(models).st_dev
    if os.major(dev) == 0:
        die("fault slow_weights_disk needs %s on a block device (it is on device 0:%d)" % (models, os.minor(dev)))
    return "%d:%d" % (os.major(dev), os.minor(dev))


def _set_read_limit(cluster, node, bps):
    """Put the read limit on the node container's cgroup; the record of it: {"blkio", "device", "bps"}."""
    blkio = _blkio_dir(node)
    if blkio is None or not os.path.exists(_read_limit_file(blkio)):
        die("fault slow_weights_disk needs cgroup v1 blkio for the node container (none found for %s)" % node)
    device = _models_device(cluster)
    with open(_read_limit_file(blkio), "w") as f:
        f.write("%s %d\n" % (device, bps))
    return {"blkio": blkio, "device": device, "bps": bps}


def cmd_fault(a):
    c, n = find_node(a.node)
    if a.clear:
        faults = []
    elif a.faults:
        faults = a.faults
    else:
        print(json.dumps(read_json(os.path.join(node_state_dir(n["name"]), "faults.json"), [])))
        return 0
    with locked():
        prof = read_json(write_profile(c, n["name"], faults), {}) or {}
        packet_filter(n["address"], prof.get("blocked_tcp_ports"))
        disk_throttle(c, n["name"], prof.get("weights_read_bps"))
    # re-run the profile-derived static files helper inside the running node, if the image has it
    dk(CONTROL, "exec", node_container(n["name"]), "sh", "-c",
       "[ ! -x /opt/kimi-sim/nodetools/sim-node-init ] || /opt/kimi-sim/nodetools/sim-node-init", check=False)
    log("%s: faults %s" % (n["name"], ", ".join(faults) or "cleared"))
    return 0
