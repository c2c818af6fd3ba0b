"""Cluster definitions (sim/clusters/*.yml) and the clusters that are up."""
import os

from kimisim.settings import SIM_DIR, STATE
from kimisim.util import die, load_yaml, read_json


def cluster_def(name, nodes=None):
    path = os.path.join(SIM_DIR, "clusters", name + ".yml")
    if not os.path.exists(path):
        die("unknown cluster %r (no %s)" % (name, path))
    c = load_yaml(path)
    if c.get("shared_engine") and "nodes" not in c:
        n = int(nodes or c.get("default_nodes", 4))
        if not 1 <= n <= int(c.get("max_nodes", 32)):
            die("--nodes must be 1..%s" % c.get("max_nodes", 32))
        c["nodes"] = [{"name": "%s%02d" % (c["name_prefix"], i),
                       "address": "%s%d" % (c["address_prefix"], int(c.get("address_offset", 0)) + i)}
                      for i in range(1, n + 1)]
    for n in c["nodes"]:
        n["engine"] = c["name"] if c.get("shared_engine") else n["name"]
        n["cluster"] = c["name"]
    return c


def selected_clusters(arg, nodes=None):
    if arg in (None, "all"):
        return [cluster_def("gb300"), cluster_def("mi355x")]
    return [cluster_def(arg, nodes)]


def all_known_clusters():
    """Clusters that are currently up (recorded in state), for status/fault/down."""
    return read_json(os.path.join(STATE, "clusters.json"), {}) or {}


def light_nodes():
    """sim/lightnodes.py: the lightweight bench nodes (own addresses 127.0.3.0/24, own state /run/kimi-sim-light).
    Imported here, not at the top: lightnodes imports kimisim. sim/ is on sys.path already (kimisim came from it)."""
    import lightnodes
    return lightnodes
