# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Status of a vLLM container on a node: engine state, start-up phase read from its log, health.

Pure parsing functions plus a small read-only Docker Engine API client (engine_api: community.docker's client,
so any engine URL it takes works; runs on any node with Python >= 3.9 and requests).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re
import socket
import ssl
import struct

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.engine import api as engine_api

try:
    import http.client as httplib
    from urllib.parse import quote, urlencode, urlparse
except ImportError:  # pragma: no cover - Python 2 is not supported on nodes
    import httplib
    from urllib import quote, urlencode
    from urlparse import urlparse

# Start-up phases in the order vLLM passes them; the last matching line of the log wins when it is later in
# this order than the current phase, except that errors always win.
# The weight loaders' progress bars, "<desc>: NN% Completed | n/total [...]", one per load format (vLLM 0.32
# vllm/model_executor/model_loader/weight_utils.py; fastsafetensors' parallel_loader.py for --load-format
# fastsafetensors).
LOAD_BAR = (r"(?:Loading (?:safetensors|fastsafetensors|pt|np_cache) checkpoint shards(?: \(eager\))?|"
            r"Multi-thread loading (?:pt checkpoint )?shards|Loading safetensors using [A-Za-z ]+?)")
PHASES = (
    ("starting", re.compile(r"non-default args|vLLM API server version|Initializing a V1 LLM engine")),
    ("joining", re.compile(r"Waiting for .*(peer|rank|engine)|Connecting to|not reachable yet|"
                           r"init_distributed|world_size=")),
    ("loading weights", re.compile(r"Starting to load model|Loading weights|" + LOAD_BAR + ":")),
    ("profiling / KV cache", re.compile(r"Model loading took|Available KV cache memory|KV cache size")),
    ("capturing graphs", re.compile(r"Capturing CUDA graph|Graph capturing|init engine")),
    ("serving", re.compile(r"Application startup complete|Starting vLLM API server|Uvicorn running|"
                           r"Headless mode: engines running")),
)
# vLLM's processes prefix their lines with their role and PID, "(APIServer pid=7) ERROR 12-04 ..."
# (vllm/logger.py; EngineCore, Worker, Worker_TP1, ... likewise): the level follows the prefix.
ERROR_RE = re.compile(r"^(?:\([\w-]+ pid=\d+\) )?(ERROR|CRITICAL)\b|Traceback \(most recent call last\)|"
                      r"EngineCore failed|RuntimeError|TimeoutError|vllm serve: error:|unrecognized arguments")
PROGRESS_RE = re.compile(LOAD_BAR + r":\s*(\d+)% Completed")


def classify_phase(lines):
    """Return ``(phase, detail)`` for a container log (list of lines)."""
    phase_index = -1
    detail = ""
    error = None
    for line in lines:
        if ERROR_RE.search(line):
            error = line.strip()
        for index, (_name, pattern) in enumerate(PHASES):
            if pattern.search(line) and index >= phase_index:
                phase_index = index
                detail = line.strip()
        m = PROGRESS_RE.search(line)
        if m:
            detail = "checkpoint shards %s%%" % m.group(1)
    if error:
        return "error", error
    if phase_index < 0:
        return "created", ""
    return PHASES[phase_index][0], detail


def demux_docker_log(raw):
    """Split Docker's multiplexed log stream (8-byte frame headers) into text; plain text passes through."""
    out = []
    pos = 0
    if len(raw) >= 8 and raw[0:1] in (b"\x00", b"\x01", b"\x02") and raw[1:4] == b"\x00\x00\x00":
        while pos + 8 <= len(raw):
            size = struct.unpack(">I", raw[pos + 4:pos + 8])[0]
            out.append(raw[pos + 8:pos + 8 + size])
            pos += 8 + size
        return b"".join(out).decode("utf-8", "replace")
    return raw.decode("utf-8", "replace")


class DockerError(Exception):
    pass


class DockerAPI(object):
    """Minimal read-only Docker Engine API client (engine_api: community.docker's client, any engine URL)."""

    def __init__(self, docker_host=engine_api.DEFAULT_DOCKER_HOST, timeout=10, docker_client=None):
        self.options = engine_api.client_options({"docker_host": docker_host, "docker_client": docker_client})
        self.docker_host = self.options["docker_host"]
        self.timeout = timeout

    def get(self, path):
        try:
            return engine_api.engine_get(self.options, path, timeout=self.timeout)
        except engine_api.EngineError as exc:
            raise DockerError("cannot reach the container engine at %s: %s" % (self.docker_host, exc))

    def inspect(self, name):
        status, body = self.get("/containers/%s/json" % quote(name))
        if status == 404:
            return None
        if status != 200:
            raise DockerError("inspect %s: HTTP %d %s" % (name, status, body[:200]))
        return json.loads(body.decode("utf-8"))

    def logs(self, name, tail=200):
        status, body = self.get("/containers/%s/logs?stdout=1&stderr=1&tail=%d" % (quote(name), tail))
        if status != 200:
            return ""
        return demux_docker_log(body)


# Why a log could not be read: the reader's return codes (the smoke's log findings report them).
LOG_READ_OK, LOG_API_ERROR, LOG_NO_CONTAINER, LOG_UNREACHABLE, LOG_BAD_ARGS = 0, 2, 3, 4, 64


def read_log(api, name, since=0, tail="all"):
    """``(rc, log text, reason)`` of the container ``name``'s stdout+stderr since ``since`` (epoch seconds, 0 = from
    the start), the last ``tail`` lines (``all`` or a count). ``rc``: 0 read; 2 the engine answered an error;
    3 no such container; 4 the engine cannot be reached; 64 bad arguments."""
    tail = str(tail).strip()
    if tail != "all" and not tail.isdigit():
        return LOG_BAD_ARGS, "", "tail must be 'all' or a line count, got %r" % tail
    query = urlencode([("stdout", 1), ("stderr", 1), ("since", int(since or 0)), ("tail", tail)])
    try:
        status, body = api.get("/containers/%s/logs?%s" % (quote(name), query))
    except DockerError as exc:
        return LOG_UNREACHABLE, "", "cannot read the log of %s: %s" % (name, exc)
    if status == 404:
        return LOG_NO_CONTAINER, "", "no such container: %s" % name
    if status != 200:
        return LOG_API_ERROR, "", "docker API HTTP %s: %s" % (status, body[:300].decode("utf-8", "replace"))
    return LOG_READ_OK, demux_docker_log(body), ""


def tls_context(validate_certs=True, ca_path=None):
    """SSL context for https health URLs: the system CAs (or ``ca_path``), or no verification when told."""
    if not validate_certs:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        return ctx
    return ssl.create_default_context(cafile=ca_path) if ca_path else ssl.create_default_context()


def check_health(url, timeout=5, context=None):
    """GET ``url`` (http or https); return the HTTP status code, or None when nothing answers."""
    parsed = urlparse(url)
    if parsed.scheme == "https":
        conn = httplib.HTTPSConnection(parsed.hostname, parsed.port or 443, timeout=timeout,
                                       context=context or tls_context())
    else:
        conn = httplib.HTTPConnection(parsed.hostname, parsed.port or 80, timeout=timeout)
    try:
        conn.request("GET", parsed.path or "/")
        resp = conn.getresponse()
        resp.read()
        return resp.status
    except (OSError, socket.error, httplib.HTTPException, ssl.SSLError):
        return None
    finally:
        conn.close()


PLAN_HASH_LABEL = "io.gpufleet.kimi_k3.plan_hash"


def _image_digests(api, image_id):
    """RepoDigests of the image a container runs (``[]`` when the engine does not know them)."""
    if not image_id:
        return []
    try:
        status, body = api.get("/images/%s/json" % quote(image_id))
    except DockerError:
        return []
    if status != 200:
        return []
    return list(json.loads(body.decode("utf-8")).get("RepoDigests") or [])


def node_status(api, container, health_urls=(), tail=200, context=None, digests=False):
    """One look at a node: container state, exit code, phase from the log, health of ``health_urls``."""
    info = api.inspect(container)
    result = {"container": container, "exists": info is not None, "running": False, "restarting": False,
              "exit_code": None, "status": "absent", "phase": "absent", "phase_detail": "", "health": {},
              "healthy": False, "log_tail": [], "image": None, "started_at": None, "plan_hash": None,
              "repo_digests": []}
    if info is None:
        return result
    state = info.get("State", {})
    config = info.get("Config", {})
    result.update(running=bool(state.get("Running")), restarting=bool(state.get("Restarting")),
                  exit_code=state.get("ExitCode"), status=state.get("Status", "unknown"),
                  image=config.get("Image"), started_at=state.get("StartedAt"),
                  plan_hash=(config.get("Labels") or {}).get(PLAN_HASH_LABEL))
    if digests:
        result["repo_digests"] = _image_digests(api, info.get("Image"))
    lines = api.logs(container, tail=tail).splitlines() if tail else []
    result["log_tail"] = lines[-tail:] if tail else []
    result["phase"], result["phase_detail"] = classify_phase(lines)
    result["log_phase"] = result["phase"]
    if not result["running"]:
        result["phase"] = "exited" if result["status"] in ("exited", "dead") else result["status"]
    for url in health_urls:
        result["health"][url] = check_health(url, context=context)
    result["healthy"] = result["running"] and all(code == 200 for code in result["health"].values())
    return result
