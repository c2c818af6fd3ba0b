"""`simctl status`: every component with its PID."""
import contextlib
import json
import os
import sys

from kimisim.clusters import all_known_clusters
from kimisim.engines import engine_paths, engine_ready
from kimisim.hfmirror import hf_mirror_ok
from kimisim.nodes import node_container, node_state_dir
from kimisim.registry import auth_registry_ok, registry_ok
from kimisim.settings import AUTH_REGISTRY, AUTH_USER, CONTROL, HF_MIRROR, REGISTRY, REPOS, STATE
from kimisim.util import dk, read_json, read_pid, sock, tcp_open


def gather_status():
    up = all_known_clusters()
    key = os.path.join(STATE, "ssh", "id_ed25519")
    st = {"registry": {"address": REGISTRY, "up": registry_ok(),
                       "pid": read_pid(os.path.join(STATE, "registry", "registry.pid")),
                       "auth": {"address": AUTH_REGISTRY, "up": auth_registry_ok(),
                                "pid": read_pid(os.path.join(STATE, "registry", "registry-auth.pid")),
                                "credentials": os.path.join(STATE, "registry", "auth", "credentials.json")}},
          "engines": {}, "clusters": {}, "images": read_json(os.path.join(STATE, "images.json"), {}),
          "router_image": read_json(os.path.join(STATE, "router_image.json")),
          "engine_images": read_json(os.path.join(STATE, "engine_images.json")),
          "hf_mirror": {"address": HF_MIRROR, "up": hf_mirror_ok(),
                        "pid": read_pid(os.path.join(STATE, "hf", "olah.pid")),
                        "repo": os.path.join(STATE, "hf", "repo.json")}}
    engines = [CONTROL]
    for c in up.values():
        for n in c["nodes"]:
            if n["engine"] not in engines:
                engines.append(n["engine"])
    for e in engines:
        st["engines"][e] = {"socket": sock(e), "pid": read_pid(engine_paths(e)["pid"]),
                            "up": engine_ready(e)}
    ctl_up = st["engines"][CONTROL]["up"]
    for cname, c in up.items():
        nodes = {}
        for n in c["nodes"]:
            state, pid = "absent", None
            if ctl_up:
                p = dk(CONTROL, "inspect", "--format", "{{.State.Status}} {{.State.Pid}}", node_container(n["name"]),
                       check=False)
                if p.returncode == 0:
                    state, _sep, pid_text = p.stdout.strip().partition(" ")
                    pid = int(pid_text) if pid_text.isdigit() and pid_text != "0" else None
            nodes[n["name"]] = {"address": n["address"], "engine": n["engine"], "container": state, "pid": pid,
                                "ssh": tcp_open(n["address"], 22),
                                "faults": read_json(os.path.join(node_state_dir(n["name"]), "faults.json"), [])}
        st["clusters"][cname] = {"inventory": c["inventory"], "vendor": c.get("vendor"), "nodes": nodes}
    st["ready"] = bool(st["registry"]["up"] and all(e["up"] for e in st["engines"].values()) and up and all(
        n["container"] == "running" and n["ssh"] for c in st["clusters"].values() for n in c["nodes"].values()))
    st["ssh_key"] = key
    return st


def status_text(st):
    """The text of `simctl status`: every component with its PID (registry, engines, node containers)."""
    lines = ["registry  %s  %-4s pid=%s" % (REGISTRY, "up" if st["registry"]["up"] else "DOWN",
                                            st["registry"].get("pid"))]
    auth = st["registry"].get("auth") or {}
    lines.append("registry  %s  %-4s pid=%s (htpasswd, user %s)" % (
        AUTH_REGISTRY, "up" if auth.get("up") else "DOWN", auth.get("pid"), AUTH_USER))
    mirror = st.get("hf_mirror") or {}
    lines.append("hf mirror %s  %-4s pid=%s (olah)" % (HF_MIRROR, "up" if mirror.get("up") else "DOWN",
                                                       mirror.get("pid")))
    for e, v in st["engines"].items():
        lines.append("engine    %-16s %-4s pid=%s %s" % (e, "up" if v["up"] else "DOWN", v["pid"], v["socket"]))
    for cname, c in st["clusters"].items():
        lines.append("cluster   %s (%s)" % (cname, c["inventory"]))
        for nn, n in c["nodes"].items():
            lines.append("  node    %-16s %-11s container=%-8s pid=%s ssh=%s engine=%s faults=%s" % (
                nn, n["address"], n["container"], n.get("pid"), "ok" if n["ssh"] else "NO", n["engine"],
                ",".join(n["faults"] or []) or "-"))
    for fl in REPOS:
        for v, ref in (st["images"] or {}).get(fl, {}).items():
            lines.append("image     %-15s %s" % (v, ref))
    if st.get("router_image"):
        lines.append("image     %-15s %s" % ("vllm-router", st["router_image"]["ref"]))
    lines.append("ready" if st["ready"] else "NOT READY")
    return "\n".join(lines)


def cmd_status(a):
    st = gather_status()
    text = json.dumps(st, indent=2, sort_keys=True) if a.json else status_text(st)
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        # `simctl status | head -1`: the reader left; say nothing more (no traceback) and keep the exit code.
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0 if st["ready"] else 3
