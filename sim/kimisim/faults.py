"""`simctl fault`: rewrite a node's profile in place; the host-side packet filter."""
import json
import os
import shutil

from kimisim.clusters import all_known_clusters
from kimisim.nodes import node_container, node_state_dir, write_profile
from kimisim.settings import CONTROL
from kimisim.util import die, dk, locked, log, read_json, sh, write_json


def find_node(node):
    for c in all_known_clusters().values():
        for n in c["nodes"]:
            if n["name"] == node or n["address"] == node:
                return c, n
    die("unknown node %r (is the sim up? see `simctl status`)" % node)


def packet_filter(node, address, ports):
    """The node's blocked TCP ports (fault fabric_port_blocked): REJECT rules for its address in the host's filter.

    The nodes share the host's network namespace, so the rule names the node's own 127.x address and port; the
    rules this node holds are recorded in its state directory so that clearing (or `down`) removes exactly them."""
    record = os.path.join(node_state_dir(node), "packet_filter.json")
    for rule in read_json(record, []) or []:
        sh(["iptables", "-D", "INPUT"] + rule, check=False)
    rules = [["-p", "tcp", "-d", address, "--dport", str(int(port)), "-j", "REJECT", "--reject-with", "tcp-reset"]
             for port in ports or []]
    for rule in rules:
        if shutil.which("iptables") is None:
            die("fault needs iptables on the host (apt-get install iptables)")
        sh(["iptables", "-I", "INPUT"] + rule)
    if rules or os.path.exists(record):
        write_json(record, rules)


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
        packet_filter(n["name"], n["address"], prof.get("blocked_tcp_ports"))
    # re-run the profile-derived static files helper inside the running node, if the image has it
    dk(CONTROL, "exec", node_container(n["name"]), "sh", "-c",
       "[ ! -x /opt/kimi-sim/nodetools/sim-node-init ] || /opt/kimi-sim/nodetools/sim-node-init", check=False)
    log("%s: faults %s" % (n["name"], ", ".join(faults) or "cleared"))
    return 0
