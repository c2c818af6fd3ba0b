"""`simctl down`: remove one cluster or everything simctl created."""
import contextlib
import os
import shutil
import time

from kimisim.clusters import all_known_clusters, cluster_def, light_nodes
from kimisim.devices import remove_host_devices
from kimisim.engine_image import CPU_MODELS_DIR
from kimisim.engines import engine_ready, stop_engine
from kimisim.faults import packet_filter
from kimisim.hfmirror import stop_hf_mirror
from kimisim.inventories import cluster_inventories
from kimisim.nodes import node_container, node_state_dir
from kimisim.registry import stop_registry
from kimisim.settings import CACHE, CONTROL, ENGINE_ROOT, MODELS_DIR, REPO, RUN, STATE
from kimisim.util import dk, locked, log, write_json


def remove_generated_files(c):
    """The files `up` wrote for a cluster: sim_image.yml of its inventories, a bench cluster's whole inventory."""
    for inv in cluster_inventories(c):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(REPO, inv, "group_vars", "all", "sim_image.yml"))
    if c.get("shared_engine"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(REPO, c["inventory"], "hosts.yml"))
    for d in ("group_vars/all", "group_vars", ""):  # generated-only inventory dirs, if now empty
        with contextlib.suppress(OSError):
            if c.get("shared_engine") or d:
                os.rmdir(os.path.join(REPO, c["inventory"], d))


def down_cluster(name):
    """Remove one cluster (its node containers, engines no other cluster uses, state, generated files)."""
    up = all_known_clusters()
    if name not in up:
        log("down: cluster %s is not up" % name)
        return
    c = up.pop(name)
    other_engines = {n["engine"] for o in up.values() for n in o["nodes"]}
    if engine_ready(CONTROL):
        for n in c["nodes"]:
            dk(CONTROL, "rm", "-f", node_container(n["name"]), check=False)
    for e in {n["engine"] for n in c["nodes"]} - other_engines:
        stop_engine(e)
    for n in c["nodes"]:
        packet_filter(n["address"], [])
        shutil.rmtree(node_state_dir(n["name"]), ignore_errors=True)
    remove_generated_files(c)
    write_json(os.path.join(STATE, "clusters.json"), up)


def cmd_down(a):
    if a.cluster == "light":
        return light_nodes().down()
    t0 = time.time()
    if a.cluster not in (None, "all"):
        with locked():
            down_cluster(a.cluster)
        log("down: removed cluster %s in %.1fs (registry, control engine and other clusters kept)"
            % (a.cluster, time.time() - t0))
        return 0
    with locked():
        up = all_known_clusters()
        engines = []
        for c in up.values():
            for n in c["nodes"]:
                packet_filter(n["address"], [])
                if n["engine"] not in engines:
                    engines.append(n["engine"])
        # also engines left from a partial run
        if os.path.isdir(RUN):
            for e in os.listdir(RUN):
                if e not in engines and e != CONTROL and os.path.isdir(os.path.join(RUN, e)):
                    engines.append(e)
        import concurrent.futures as cf
        with cf.ThreadPoolExecutor(max_workers=6) as ex:
            list(ex.map(stop_engine, engines + [CONTROL]))
        stop_registry()
        stop_hf_mirror()
        remove_host_devices()
        for c in up.values():
            remove_generated_files(c)
        for c in ("gb300", "mi355x", "gb300pd", "fleet", "cpu", "cpufleet"):
            for inv in cluster_inventories(cluster_def(c)):
                with contextlib.suppress(FileNotFoundError, SystemExit):
                    os.unlink(os.path.join(REPO, inv, "group_vars", "all", "sim_image.yml"))
        shutil.rmtree(STATE, ignore_errors=True)
        shutil.rmtree(ENGINE_ROOT, ignore_errors=True)
        shutil.rmtree(MODELS_DIR, ignore_errors=True)
        shutil.rmtree(CPU_MODELS_DIR, ignore_errors=True)
        with contextlib.suppress(OSError):
            os.rmdir(os.path.dirname(ENGINE_ROOT))
        with contextlib.suppress(OSError):
            os.rmdir(os.path.dirname(MODELS_DIR))
    shutil.rmtree(RUN, ignore_errors=True)
    log("down: removed everything in %.1fs (kept base tarball cache %s)" % (time.time() - t0, CACHE))
