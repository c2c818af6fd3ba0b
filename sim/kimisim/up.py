"""`simctl up`: everything a cluster needs, idempotently."""
import concurrent.futures as cf
import json
import os
import shutil
import time

from kimisim.clusters import all_known_clusters, light_nodes, selected_clusters
from kimisim.devices import ensure_host_devices
from kimisim.engine_image import ensure_cpu_model, ensure_engine_images
from kimisim.engines import ensure_hook, start_engine
from kimisim.faults import packet_filter
from kimisim.hfmirror import start_hf_mirror
from kimisim.images import ensure_base_image, ensure_node_image, ensure_standin_images
from kimisim.inventories import write_bench_inventory, write_sim_image
from kimisim.nodes import (ensure_fake_weights, ensure_node, ensure_ssh_key, node_container, node_state_dir, ssh_banner, ssh_ok)
from kimisim.registry import ensure_mirror_images, start_registry
from kimisim.router_image import ensure_router_image
from kimisim.settings import CONTROL, MODELS_DIR, STATE
from kimisim.util import die, dk, locked, log, read_json, wait_for, write_json


def _timed(timings, key, fn, *args):
    """Run fn(*args), recording its wall time in seconds under timings[key]."""
    t0 = time.time()
    result = fn(*args)
    timings[key] = round(time.time() - t0, 1)
    return result


def _preflight(a):
    """The clusters to bring up, after the checks that need no lock: root, the host binaries."""
    if a.cluster == "bench" and a.nodes is None and "bench" in all_known_clusters():
        a.nodes = len(all_known_clusters()["bench"]["nodes"])  # keep the current size
    clusters = selected_clusters(a.cluster, a.nodes)
    if os.geteuid() != 0:
        die("must run as root")
    for b in ("dockerd", "ssh", "ssh-keygen"):
        if not shutil.which(b):
            die("%s missing: run sim/install.sh" % b)
    return clusters


def _host_setup():
    """State dirs, fake weights, device nodes, the SSH key and the NVIDIA hook; returns the key's path."""
    os.makedirs(STATE, exist_ok=True)
    os.makedirs(MODELS_DIR, exist_ok=True)
    ensure_fake_weights()
    ensure_host_devices()
    key = ensure_ssh_key()
    ensure_hook()
    return key


def _start_control():
    start_registry()
    start_engine(CONTROL)


def _ensure_gpu_images(timings, router):
    """The base, node, stand-in and mirror images, and the router's when ``router`` (else its record as built
    before): (base tag, node image, images by flavor, router image record)."""
    base = ensure_base_image(timings)
    node_img = _timed(timings, "node_image_s", ensure_node_image, base)
    images, _built = ensure_standin_images(base, timings)
    images = ensure_mirror_images(images)
    rec = ensure_router_image(base, timings) if router else read_json(os.path.join(STATE, "router_image.json"))
    return base, node_img, images, rec


def _ensure_images(clusters, timings):
    """Every image the clusters run: (node image, images by flavor, router image record)."""
    base, node_img, images, router = _ensure_gpu_images(timings, any(c.get("router") for c in clusters))
    images["cpu"] = _ensure_engine(base, timings) if any(c["vendor"] == "cpu" for c in clusters) \
        else read_json(os.path.join(STATE, "engine_images.json"))
    return node_img, images, router


def _ensure_engine(base, timings):
    """The real engine's images and the rehearsal model they serve."""
    rec = ensure_engine_images(base, timings)
    ensure_cpu_model(rec["engine_image"], timings)
    return rec


def cmd_images(_a):
    """`simctl images`: the control engine, the registry and every image any cluster runs (stand-ins, mirrors, the
    router, then the real engine and its rehearsal model), built and pushed; no node is started, so a later `up` of
    any cluster only starts nodes. The lock is let go between the GPU clusters' images and the real engine's: an `up`
    that waits for it starts its nodes before the engine image is built. scripts/test.sh runs this in the background
    while the stages before `sim` run."""
    if os.geteuid() != 0:
        die("must run as root")
    t_start = time.time()
    timings = {}
    with locked():
        _host_setup()
        _timed(timings, "control_s", _start_control)
        _ensure_gpu_images(timings, router=True)
    with locked():
        _start_control()
        _ensure_engine(ensure_base_image(timings), timings)
    timings["total_s"] = round(time.time() - t_start, 1)
    write_json(os.path.join(STATE, "last_images_timings.json"), timings)
    log("images: every cluster's images ready in %.1fs %s" % (timings["total_s"], json.dumps(timings)))
    return 0


def _start_node_engines(clusters):
    """The workload engines of every node, started concurrently."""
    engines = {}
    for c in clusters:
        for n in c["nodes"]:
            engines[n["engine"]] = (c["vendor"], c.get("node_shm"))
    with cf.ThreadPoolExecutor(max_workers=4) as ex:
        list(ex.map(lambda e: start_engine(e, *engines[e]), engines))


def _drop_surplus_bench_nodes(c, up):
    """A smaller bench: remove the nodes beyond the new count."""
    if c["name"] != "bench" or "bench" not in up:
        return
    keep = {n["name"] for n in c["nodes"]}
    for old in up["bench"]["nodes"]:
        if old["name"] not in keep:
            dk(CONTROL, "rm", "-f", node_container(old["name"]), check=False)
            shutil.rmtree(node_state_dir(old["name"]), ignore_errors=True)


def _ensure_cluster_nodes(clusters, up, node_img, key):
    """Node containers of every cluster, recorded as up; returns the names of the containers created now."""
    fresh = set()
    for c in clusters:
        _drop_surplus_bench_nodes(c, up)
        with cf.ThreadPoolExecutor(max_workers=4) as ex:
            created = list(ex.map(lambda n, c=c: ensure_node(c, n, node_img, key), c["nodes"]))
        fresh.update(n["name"] for n, new in zip(c["nodes"], created) if new)
        for n in c["nodes"]:                             # the host's filter as the node's faults say, nothing left over
            prof = read_json(os.path.join(node_state_dir(n["name"]), "profile.json"), {}) or {}
            packet_filter(n["address"], prof.get("blocked_tcp_ports"))
        up[c["name"]] = c
        write_json(os.path.join(STATE, "clusters.json"), up)
        if c.get("shared_engine"):
            write_bench_inventory(c)
    return fresh


def _wait_ssh(clusters, fresh, key):
    def wait_one(n):
        # new containers: a real login (key, python3, engine socket); running ones: the sshd banner
        check = (lambda: ssh_ok(n["address"], key)) if n["name"] in fresh else (lambda: ssh_banner(n["address"]))
        wait_for(check, 60, "ssh to %s (%s)" % (n["name"], n["address"]), 0.3)
    with cf.ThreadPoolExecutor(max_workers=8) as ex:
        list(ex.map(wait_one, [n for c in clusters for n in c["nodes"]]))


def _nodes_up(clusters, node_img, images, router, key):
    up = all_known_clusters()
    fresh = _ensure_cluster_nodes(clusters, up, node_img, key)
    # digests may have changed (stand-in rebuilt): refresh every cluster that is up, not only these
    for c in up.values():
        write_sim_image(c, images, router)
    _wait_ssh(clusters, fresh, key)


def cmd_up(a):
    if a.cluster == "light":
        if os.geteuid() != 0:
            die("must run as root")
        return light_nodes().up(a.nodes)
    t_start = time.time()
    timings = {}
    clusters = _preflight(a)
    with locked():
        key = _host_setup()
        _timed(timings, "control_s", _start_control)
        _timed(timings, "hf_mirror_s", start_hf_mirror)
        node_img, images, router = _ensure_images(clusters, timings)
        _timed(timings, "engines_s", _start_node_engines, clusters)
        _timed(timings, "nodes_s", _nodes_up, clusters, node_img, images, router, key)
    timings["total_s"] = round(time.time() - t_start, 1)
    write_json(os.path.join(STATE, "last_up_timings.json"), timings)
    log("up: %s ready in %.1fs %s" % (", ".join(c["name"] for c in clusters), timings["total_s"],
                                      json.dumps(timings)))
