"""Runtime shared by the faked vendor tools (stdlib only): profile loading, missing tools, engine memory.

Every tool call starts a Python interpreter, and preflight runs several per node on many simulated nodes that share
the rehearsal machine's cores: keep imports light (no http.client/email/ssl: that alone was 37 ms of a 58 ms call).
"""
import json
import os
import re
import socket
import sys

import profile as simprofile  # sim/nodetools/profile.py (the tools put their directory first on sys.path)

MARKER = "KIMI-SIM-NODETOOL"
NVIDIA_TOOLS = ("nvidia-smi", "nvidia-ctk", "nvidia-imex-ctl")
AMD_TOOLS = ("amd-smi", "rocm-smi", "rocminfo")
RDMA_TOOLS = ("ibv_devinfo", "ibstat", "rdma")
ALL_TOOLS = NVIDIA_TOOLS + AMD_TOOLS + RDMA_TOOLS
DEFAULT_GPU_MEMORY_UTILIZATION = 0.92


def tool_present(profile, tool):
    """Whether `tool` exists on a node with this profile (vendor match, IMEX configured, not in tools_missing)."""
    if tool in (profile.get("tools_missing") or []):
        return False
    if tool in NVIDIA_TOOLS and profile["vendor"] != "nvidia":
        return False
    if tool in AMD_TOOLS and profile["vendor"] != "amd":
        return False
    if tool == "nvidia-imex-ctl" and not profile.get("imex"):
        return False
    if tool in RDMA_TOOLS and not (profile.get("rdma") or {}).get("devices"):
        return False
    return True


def run_tool(tool, func, argv=None):
    """Entry point of every tool script: load the profile, enforce absence, run func(profile, argv) -> rc."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        prof = simprofile.load_current()
    except (OSError, ValueError) as exc:
        sys.stderr.write("%s: kimi-sim profile unusable (%s): %s\n" % (tool, simprofile.current_profile_path(), exc))
        return 1
    if not tool_present(prof, tool):
        sys.stderr.write("bash: %s: command not found\n" % tool)
        return 127
    try:
        rc = func(prof, argv)
        sys.stdout.flush()
    except BrokenPipeError:
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        rc = 141
    return rc or 0


def natural_key(name):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def rdma_devices(profile, text_order=False):
    """[(name, device)] in natural order (mlx5_2 before mlx5_10) or, for ibstat, text order."""
    devs = (profile.get("rdma") or {}).get("devices") or {}
    names = sorted(devs) if text_order else sorted(devs, key=natural_key)
    return [(name, devs[name]) for name in names]


# ------------------------------------------------------------------------------- Docker engine (optional)

def _docker_get(sock_path, url, timeout):
    """GET an engine API path over the unix socket. HTTP/1.0 so the engine answers unchunked and closes."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(sock_path)
        sock.sendall(("GET %s HTTP/1.0\r\nHost: docker\r\n\r\n" % url).encode("ascii"))
        chunks = []
        while True:
            data = sock.recv(65536)
            if not data:
                break
            chunks.append(data)
    finally:
        sock.close()
    head, _sep, body = b"".join(chunks).partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].split()
    code = status[1].decode("ascii", "replace") if len(status) > 1 else "no answer"
    if code != "200":
        raise OSError("docker API %s -> %s" % (url, code))
    return json.loads(body.decode("utf-8"))


def parse_gpu_memory_utilization(args):
    """--gpu-memory-utilization from a vLLM argv (also `=` form and the --device-memory-utilization alias)."""
    names = ("--gpu-memory-utilization", "--device-memory-utilization")
    for i, arg in enumerate(args):
        for n in names:
            if arg == n and i + 1 < len(args):
                return float(args[i + 1])
            if arg.startswith(n + "="):
                return float(arg.split("=", 1)[1])
    return DEFAULT_GPU_MEMORY_UTILIZATION


def vllm_memory_fraction(profile, timeout=1.0):
    """Fraction of GPU memory held by a running vLLM container on the node's engine, or None."""
    cfg = profile.get("engine") or {}
    if not cfg.get("memory_from_vllm_container", True):
        return None
    sock_path = os.environ.get("KIMI_SIM_DOCKER_SOCK", "/var/run/docker.sock")
    if not os.path.exists(sock_path):
        return None
    try:
        containers = _docker_get(sock_path, "/containers/json", timeout)
        for c in containers:
            names = [n.lstrip("/") for n in c.get("Names") or []]
            if cfg.get("container_name") and cfg["container_name"] not in names:
                continue
            info = _docker_get(sock_path, "/containers/%s/json" % c["Id"], timeout)
            image = "%s %s" % (c.get("Image", ""), (info.get("Config") or {}).get("Image", ""))
            if "vllm" not in image.lower():
                continue
            if not (info.get("State") or {}).get("Running", True):
                continue
            args = [info.get("Path") or ""] + list(info.get("Args") or [])
            return max(0.0, min(1.0, parse_gpu_memory_utilization(args)))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return None


def memory_used(profile):
    """Per-GPU used MiB: vLLM container share of the total when one runs, else the profile's value."""
    frac = vllm_memory_fraction(profile)
    out = []
    for g in profile["gpus"]:
        if frac is not None:
            out.append(int(round(frac * int(g["memory_total_mib"]))))
        else:
            out.append(int(g.get("memory_used_mib", 0)))
    return out
