# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The inventory variables of the collection: ONE declaration per ``kimi_k3_*`` variable (pure data + checks).

Each declaration says the type, the allowed values (a list, a recipe section, the flag snapshots, or a named
format), the default, the scope (``cluster``: identical on every node; ``host``: per node) and the meaning.
The same table drives

* validation (``read_settings``: every value is checked before any validator or renderer sees it; a wrong
  YAML type, an unknown value or a malformed string is a named refusal, never an exception),
* the documentation (plugins/plugin_utils/plan/variable_docs.py renders ``docs/variables.md``, the README table
  and the ``plan_variables`` doc fragment of ``cluster_plan``; tests fail when they drift).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import difflib
import hashlib
import os
import re

try:
    from urllib.parse import urlparse
except ImportError:  # pragma: no cover - Python 2 is not supported
    from urlparse import urlparse

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.engine import api as engine_api
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.common.coerce import FALSE_WORDS, TRUE_WORDS
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.engine.api import DEFAULT_DOCKER_HOST
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import redaction

PREFIX = "kimi_k3_"


def _v(name, vtype, scope, meaning, default=None, default_doc=None, choices=None, fmt=None, minimum=None,
       required=False, flag=None, plan=True, secret=False, on_router=None, env=None, also=None, fields=None):
    """``env``: the container environment variable a set value renders (per node for host-scope variables);
    ``also``: values allowed besides ``choices``; ``fields``: the keys of a mapping, {key: "int" or [values]}."""
    return {"name": PREFIX + name, "key": name, "type": vtype, "scope": scope, "meaning": meaning,
            "default": default, "default_doc": default_doc, "choices": choices, "format": fmt, "minimum": minimum,
            "required": required, "flag": flag, "plan": plan, "secret": secret,
            "on_router": scope == "router" if on_router is None else on_router, "env": env, "also": also or [],
            "fields": fields}


# Named formats of free-text values: (regular expression, what an operator reads in the docs and the fix).
_LABEL = r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)"
_IPV4 = r"(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(?:25[0-5]|2[0-4]\d|1?\d?\d)"
_IFNAME = r"[A-Za-z0-9_.@-]{1,15}"
FORMATS = {
    "commit": (r"[0-9a-f]{40}", "a 40-character lowercase hex commit hash of the Hugging Face repository"),
    "abs_path": (r"/[^:\x00-\x1f\x7f]*", "an absolute path (starts with /, no ':' and no control characters)"),
    "ifname": (r"\^?=?%s(?:,%s)*" % (_IFNAME, _IFNAME),
               "NCCL interface syntax: comma-separated interface names (prefix matches), optionally prefixed "
               "by ^ (exclude) and/or = (exact match), e.g. bond0, =eth0, ^docker,lo"),
    "container_name": (r"[A-Za-z0-9][A-Za-z0-9_.-]+", "a Docker container name ([a-zA-Z0-9][a-zA-Z0-9_.-]+)"),
    "address": (r"(?:%s|[0-9A-Fa-f:]*:[0-9A-Fa-f:.]*|%s(?:\.%s)*)" % (_IPV4, _LABEL, _LABEL),
                "an IPv4/IPv6 address or a host name, without prefix length (/24), port (:8000) or brackets"),
    "hf_model": (r"(?:[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*|/[^:\x00-\x1f\x7f]*)",
                 "a Hugging Face repository id (org/name) or an absolute path inside the container"),
    "shm_size": (r"[1-9][0-9]*[bkmgBKMG]?", "a size in bytes or with unit b/k/m/g, e.g. 64g"),
    "docker_host": (r"(?:unix://|tcp://|ssh://|https?://)[^\s\x00-\x1f\x7f]+",
                    "an engine URL: unix:///path, tcp://host:port or ssh://user@host[:port] (no path)"),
    "env_name": (r"[A-Za-z_][A-Za-z0-9_]*", "an environment variable name ([A-Za-z_][A-Za-z0-9_]*)"),
    "text": (r"[^\x00-\x1f\x7f]+", "non-empty text without control characters"),
    "deployment": (r"[a-z0-9](?:[a-z0-9-]{0,38}[a-z0-9])?",
                   "a deployment name: lowercase letters, digits and inner dashes, at most 40 (e.g. replica-1, prefill-1)"),
    "path": (r"[^\x00-\x1f\x7f]+", "a path without control characters"),
    "cpu_list": (r"(?:auto|nobind|[0-9]+(?:-[0-9]+)?(?:,[0-9]+(?:-[0-9]+)?)*)",
                 "auto, nobind, or a list of cores and core ranges, e.g. 0-3 or 0,2,4-7 "
                 "(vLLM's VLLM_CPU_OMP_THREADS_BIND)"),
    # A secret travels in a file, an exec string and an HTTP header: plugin_utils.plan.redaction's one rule.
    "secret": (redaction.SECRET_PATTERN, redaction.SECRET_RULE),
}

# cluster: identical on every node of the inventory; deployment: identical on every node of one deployment
# (kimi_k3_deployment), may differ between deployments; host: per node; router: read on the vllm_router host.
CLUSTER, DEPLOYMENT, HOST, ROUTER = "cluster", "deployment", "host", "router"
SCOPES = (CLUSTER, DEPLOYMENT, HOST, ROUTER)

VARIABLES = (
    # Hardware and topology.
    _v("accelerator", "str", CLUSTER, "GPU model of every node.", required=True, choices="recipe:hardware"),
    _v("gpus_per_node", "int", CLUSTER, "GPUs per node (a GB200/GB300 tray has 4).", minimum=1,
       default_doc="the accelerator's"),
    _v("strategy", "str", DEPLOYMENT, "The recipe's parallel strategy; auto: the best-ranked layout for kimi_k3_target "
       "(playbooks/layouts.yml lists them; the plan summary says why): of every layout when no node names a "
       "deployment and a vllm_router host exists, else of the strategies over each deployment's nodes.", required=True,
       choices="recipe:strategies", also=["auto"]),
    _v("tensor_parallel_size", "int", DEPLOYMENT, "Override the strategy's tensor-parallel size (TP x PP x DP = "
       "nodes x GPUs per node).", minimum=1, default_doc="strategy"),
    _v("pipeline_parallel_size", "int", DEPLOYMENT, "Override the strategy's pipeline-parallel size.", minimum=1,
       default_doc="strategy"),
    _v("data_parallel_size", "int", DEPLOYMENT, "Override the strategy's data-parallel size.", minimum=1,
       default_doc="strategy"),
    _v("dp_lb_mode", "str", DEPLOYMENT, "Data-parallel load balancing: internal (followers --headless), hybrid "
       "(every node serves its local ranks) or external (one endpoint per rank).",
       choices=["internal", "hybrid", "external"], default_doc="DEP: hybrid; TP x DP: internal"),
    _v("interconnect", "str", CLUSTER, "Fabric between the nodes; picks the vendor's --all2all-backend for "
       "expert parallelism.", choices="recipe:interconnects", default_doc="required for several nodes"),
    _v("all2all_backend", "str", DEPLOYMENT, "Override --all2all-backend (must be a kernel of the nodes' vendor).",
       choices="snapshot", flag="--all2all-backend", default_doc="recipe (vendor x interconnect)"),
    _v("moe_backend", "str", DEPLOYMENT, "Override --moe-backend (MegaMoE is refused over RDMA or without EP; "
       "vendor-exclusive backends are refused on the other vendor).", choices="snapshot", flag="--moe-backend",
       default_doc="recipe"),
    _v("deployment", "str", HOST, "Name of the independent vLLM deployment the node belongs to (set it in the "
       "group_vars of a child group of vllm_cluster, one group per deployment); its head is its host in vllm_head.",
       fmt="deployment", default_doc="main (one deployment)"),
    _v("deployment_kind", "str", DEPLOYMENT, "What the deployment is: single (the only one), replica (one of N "
       "identical copies behind vllm-router), prefill or decode (the recipe's pd_cluster behind vllm-router).",
       choices="recipe:deployment_kinds", default_doc="single for one deployment, replica for several"),
    _v("node_rank", "int", HOST, "Explicit node order (0 = head); on every node or on none.", minimum=0,
       default_doc="head 0, workers in inventory order"),
    # Model.
    _v("variant", "str", CLUSTER, "Recipe model variant.", default="default", choices="recipe:variants"),
    _v("model", "str", CLUSTER, "Model to serve instead of the variant's.", fmt="hf_model",
       default_doc="the variant's model"),
    _v("model_revision", "str", CLUSTER, "Commit of the model repository; renders --revision and "
       "--code-revision so --trust-remote-code runs exactly the reviewed code.", fmt="commit",
       default_doc="unset (refused with remote code unless kimi_k3_allow_unpinned_remote_code)"),
    _v("allow_unpinned_remote_code", "bool", CLUSTER, "Accept --trust-remote-code without "
       "kimi_k3_model_revision (the repository's latest code runs).", default=False),
    _v("served_model_name", "str_or_list", CLUSTER, "Name(s) the API serves the model under.", fmt="text",
       default_doc="the model id"),
    _v("features", "dict", CLUSTER, "Recipe features on/off: {feature: true/false}.", choices="recipe:features",
       default_doc="tool_calling, reasoning on; others off"),
    _v("max_model_len", "int_or_auto", CLUSTER, "--max-model-len: a positive integer or auto.", minimum=1,
       flag="--max-model-len", default_doc="recipe"),
    _v("target_concurrency", "int", DEPLOYMENT, "Concurrent full-length sequences the deployment must hold: "
       "kimi_k3_max_model_len auto becomes the longest length whose predicted concurrency meets it.", minimum=1,
       default_doc="unset (required with kimi_k3_max_model_len: auto)"),
    _v("target", "dict", DEPLOYMENT, "What the layout is chosen for (playbooks/layouts.yml, kimi_k3_strategy: auto): "
       "{max_model_len: tokens per session, concurrency: sessions held at once, objective: latency or throughput}; "
       "every key optional.", fields={"max_model_len": "int", "concurrency": "int",
                                      "objective": ["latency", "throughput"]},
       default_doc="unset (the plan's length, objective throughput)"),
    _v("max_model_len_fit", "str", DEPLOYMENT, "A --max-model-len predicted to hold not one sequence (from trusted "
       "figures): refuse the plan, or warn and launch anyway so that the engine's own refusal is observed (the "
       "capacity curve's refusal probe, capacity_probe_refusal).", default="refuse", choices=["refuse", "warn"]),
    _v("kv_cache_dtype", "str", CLUSTER, "--kv-cache-dtype.", choices="snapshot", flag="--kv-cache-dtype",
       default_doc="recipe (fp8 on Blackwell)"),
    _v("v2_model_runner", "bool", CLUSTER, "Force VLLM_USE_V2_MODEL_RUNNER on/off.", default_doc="recipe"),
    _v("rust_frontend", "bool", CLUSTER, "Force VLLM_USE_RUST_FRONTEND on/off.", default_doc="recipe"),
    # vLLM's CPU build (accelerator cpu: the rehearsal profile with the real engine).
    _v("cpu_kv_cache_gib", "int", CLUSTER, "KV cache of vLLM's CPU build in GiB (VLLM_CPU_KVCACHE_SPACE); "
       "accelerator cpu only.", minimum=1, env="VLLM_CPU_KVCACHE_SPACE", default_doc="recipe (1)"),
    _v("cpu_threads_bind", "str", HOST, "Cores the CPU engine's OpenMP threads bind to on this node "
       "(VLLM_CPU_OMP_THREADS_BIND); accelerator cpu only.", fmt="cpu_list", env="VLLM_CPU_OMP_THREADS_BIND",
       default_doc="auto (vLLM binds by NUMA node)"),
    # Fabric.
    _v("socket_ifname", "str", CLUSTER, "NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME for multi-node bootstrap.",
       fmt="ifname", default_doc="unset (warning on several nodes)"),
    _v("nccl_nvls_enable", "bool", CLUSTER, "NCCL_NVLS_ENABLE on multi-node GB trays (NCCL >= 2.30.4 hang "
       "hazard).", default=True),
    # Image and release.
    _v("vllm_version", "str", CLUSTER, "Target vLLM release: flag snapshot and per-release env names. `image`: the "
       "image is a development build (the kimi-k3 images); the plan renders by the recipe's "
       "development_builds.plan_release rules and the fabric step parses every node's argv with the image's own "
       "vLLM parser and checks its env names.", choices="snapshots", also=["image"],
       default_doc="recipe default (0.28.0)"),
    _v("image", "str", CLUSTER, "The vLLM image, repo@sha256:<digest>.", required=True, fmt="text"),
    _v("allow_unpinned_image", "bool", CLUSTER, "Accept an image tag instead of a digest (not recommended).",
       default=False, on_router=True),
    # Node resources and container.
    _v("model_cache_dir", "str", CLUSTER, "Host directory of the weights / HF cache (same path on every node), "
       "mounted into the container.", fmt="abs_path", default_doc="/data/hf-cache"),
    _v("container_name", "str", CLUSTER, "Name of the vLLM container on every node.", fmt="container_name",
       default_doc="vllm-kimi-k3"),
    _v("shm_size", "size", CLUSTER, "/dev/shm size of the container (ipc=host uses the node's).",
       fmt="shm_size", default_doc="64g"),
    _v("memlock", "int", CLUSTER, "memlock ulimit of the container in bytes (-1 = unlimited).", minimum=-1,
       default_doc="-1"),
    _v("restart_policy", "str", CLUSTER, "Docker restart policy of the container.", default="no",
       choices=["no", "on-failure", "always", "unless-stopped"]),
    _v("weight_read_mib_s", "int", HOST, "Measured read throughput of the node's weights (MiB/s, preflight's "
       "weight-read sample); the slowest node of a deployment sets its launch timeouts.", minimum=1,
       default_doc="unset (timeouts at their ceilings)"),
    _v("strict", "bool", CLUSTER, "Refuse the plan instead of warning when a launch timeout derived from the "
       "measured weight-read throughput exceeds the recipe's ceiling.", default=False),
    _v("docker_host", "str", HOST, "Container engine URL on the node.", fmt="docker_host",
       default=DEFAULT_DOCKER_HOST, on_router=True),
    # The engine client's TLS and ssh options: community.docker's option of the same name without the prefix.
    _v("docker_tls", "bool", HOST, "Talk TLS to a tcp:// engine without verifying its certificate (community.docker's "
       "tls).", default=False, on_router=True),
    _v("docker_validate_certs", "bool", HOST, "Talk TLS to a tcp:// engine and verify its certificate "
       "(community.docker's validate_certs).", default=False, on_router=True),
    _v("docker_ca_path", "str", HOST, "CA file on the node that signed the engine's certificate (needs "
       "kimi_k3_docker_validate_certs).", fmt="abs_path", on_router=True, default_doc="the system CAs"),
    _v("docker_client_cert", "str", HOST, "Client certificate file on the node for a tcp:// engine that asks for one "
       "(with kimi_k3_docker_client_key).", fmt="abs_path", on_router=True, default_doc="none"),
    _v("docker_client_key", "str", HOST, "Key file on the node of kimi_k3_docker_client_cert.", fmt="abs_path",
       on_router=True, default_doc="none"),
    _v("docker_use_ssh_client", "bool", HOST, "For an ssh:// engine, run the node's ssh command instead of paramiko "
       "(community.docker's use_ssh_client).", default=False, on_router=True),
    _v("extra_args", "list", DEPLOYMENT, "Extra vllm serve arguments, each flag and value its own item (checked "
       "against the flag snapshot; flags the plan derives are refused).", default_doc="[]"),
    _v("extra_env", "dict", DEPLOYMENT, "Extra container environment NAME: value (no secrets, no removed "
       "variables).", default_doc="{}"),
    _v("extra_env_not_secret", "list", DEPLOYMENT, "Names in kimi_k3_extra_env that look like secrets (recipe "
       "secret_env: *TOKEN*, *KEY*, ...) but hold none; their values are written to the plan file.", fmt="env_name",
       default_doc="[]"),
    # Network.
    _v("internal_address", "str", HOST, "Cluster-internal address of the node (--master-addr / "
       "--data-parallel-address).", fmt="address", default_doc="ansible_host", on_router=True),
    _v("api_host", "str", HOST, "Address the API binds to on the node.", fmt="address",
       default_doc="0.0.0.0 (all)", on_router=True),
    _v("api_port", "port", DEPLOYMENT, "API port.", default_doc="8000 (prefill 8001, decode 8002)"),
    _v("master_port", "port", DEPLOYMENT, "TP/PP rendezvous port (--master-port).", default_doc="29501"),
    _v("dp_rpc_port", "port", DEPLOYMENT, "Data-parallel RPC port (--data-parallel-rpc-port).",
       default_doc="29550"),
    # TLS of the API servers (docs/secrets.md "TLS"): paths only, the plan never reads a key.
    _v("tls_certfile", "str", HOST, "PEM certificate (chain) of the node's API server, a path on the node; renders "
       "--ssl-certfile and serves https. Set it on every node that serves the API, or on none.", fmt="abs_path",
       default_doc="unset (plain http)"),
    _v("tls_keyfile", "str", HOST, "Private key of kimi_k3_tls_certfile, a path on the node (mode 0400; its "
       "contents are never read by the plan); renders --ssl-keyfile.", fmt="abs_path",
       default_doc="unset (required with kimi_k3_tls_certfile)"),
    _v("tls_ca_file", "str", CLUSTER, "CA bundle that signed the servers' certificates, a path on the nodes and the "
       "router host: the health waits and the router's backend client verify https with it.", fmt="abs_path",
       default_doc="unset (the system's CAs)", on_router=True),
    _v("tls_controller_ca_file", "str", CLUSTER, "The same CA bundle on the controller (smoke, capacity, "
       "status); checked by the plan before any host is contacted.", fmt="abs_path",
       default_doc="kimi_k3_tls_ca_file"),
    # Router (hosts of group vllm_router).
    _v("router_image", "str", ROUTER, "The vllm-router image, repo@sha256:<digest> (a tag is refused unless "
       "kimi_k3_allow_unpinned_image).", fmt="text", default_doc="required with a vllm_router host"),
    _v("router_port", "port", ROUTER, "Port of the router's API (the endpoint users call).", default_doc="8000"),
    _v("router_prometheus_port", "port", ROUTER, "Port of the router's Prometheus metrics.", default_doc="29000"),
    _v("router_policy", "str", ROUTER, "vllm-router load-balancing policy (--policy).", choices="recipe:router.policies",
       default_doc="round_robin"),
    _v("router_container_name", "str", ROUTER, "Name of the router container.", fmt="container_name",
       default_doc="vllm-router"),
    # Secrets and safety switches.
    _v("api_key", "str", CLUSTER, "API key (vault); reaches the container as a read-only file (mode 0400, in a "
       "0700 directory on the node; docs/secrets.md).", secret=True, fmt="secret", default_doc="unset",
       on_router=True),
    _v("hf_token", "str", CLUSTER, "Hugging Face token (vault), for gated or private repositories.",
       secret=True, fmt="secret", default_doc="unset"),
    _v("allow_unauthenticated_api", "bool", CLUSTER, "Accept serving the API on a non-loopback address without "
       "kimi_k3_api_key.", default=False),
    # Controller side (read by the roles, not by the plan).
    _v("artifacts_dir", "str", CLUSTER, "Controller directory for plans, reports and logs.", fmt="path",
       plan=False, default_doc="artifacts/ in ansible-playbook's working directory"),
)

BY_NAME = dict((d["name"], d) for d in VARIABLES)
ENV_VARIABLES = tuple(d for d in VARIABLES if d["env"])
SECRET_KEYS = tuple(d["key"] for d in VARIABLES if d["secret"])


def declared(name):
    """The declaration of ``kimi_k3_<x>`` (None when the variable is not declared)."""
    return BY_NAME.get(name)


# ----------------------------------------------------------------------------- value checks


def kind(value):
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, (int, float)):
        return "a number"
    return "a %s" % type(value).__name__


def is_scalar(value):
    return isinstance(value, (str, int, float)) and not isinstance(value, bool)


def _bool_value(value):
    if isinstance(value, bool):
        return value, None
    if isinstance(value, str) and value.strip().lower() in TRUE_WORDS + FALSE_WORDS[:-1]:
        return value.strip().lower() in TRUE_WORDS, None
    if isinstance(value, int) and value in (0, 1):
        return bool(value), None
    return None, "is not a boolean (%s)." % show(value)


def _int_value(value):
    if isinstance(value, int) and not isinstance(value, bool):
        return value, None
    if isinstance(value, str) and re.match(r"^-?[0-9]+\Z", value.strip()):
        return int(value.strip()), None
    return None, "is not an integer (%s)." % show(value)


def _str_value(value):
    if isinstance(value, str):
        return value, None
    hint = " (YAML reads unquoted yes/no/on/off as booleans: quote the value)" if isinstance(value, bool) else ""
    return None, "must be a string, got %s%s." % (kind(value), hint)


def show(value):
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _typed(decl, value):
    """(value in its declared type, None) or (None, message)."""
    vtype = decl["type"]
    if vtype == "bool":
        return _bool_value(value)
    if vtype in ("int", "port"):
        return _int_value(value)
    if vtype == "int_or_auto":
        if isinstance(value, str) and value.strip().lower() == "auto":
            return "auto", None
        return _int_value(value)
    if vtype == "size":
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value), None
        return _str_value(value)
    if vtype == "list":
        if not isinstance(value, list):
            return None, "must be a list of strings, got %s." % kind(value)
        if not all(is_scalar(item) for item in value):
            return None, "must be a list of strings (one flag or value per item), an item is not a string."
        return [str(item) for item in value], None
    if vtype == "dict":
        if not isinstance(value, dict):
            return None, "must be a mapping, got %s." % kind(value)
        return value, None
    if vtype == "str_or_list":
        if isinstance(value, list) and value and all(isinstance(item, str) for item in value):
            return value, None
        return _str_value(value)
    return _str_value(value)


def _format_ok(fmt, text):
    pattern = FORMATS[fmt][0]
    return re.fullmatch(pattern, text) is not None


def engine_url_problem(url):
    """Why community.docker's client (the engine client of the modules and the roles) refuses an engine URL, or
    why the collection does, else None (engine_api.url_problem)."""
    return engine_api.url_problem(url)


# The engine client options (engine_api.CLIENT_OPTIONS, community.docker's names) and their inventory variables.
ENGINE_CLIENT_VARIABLES = {"docker_host": "docker_host", "tls": "docker_tls",
                           "validate_certs": "docker_validate_certs", "ca_path": "docker_ca_path",
                           "client_cert": "docker_client_cert", "client_key": "docker_client_key",
                           "use_ssh_client": "docker_use_ssh_client"}


def docker_client(settings):
    """The plan's ``docker_client`` of a node (its checked host settings): community.docker's client options but
    ``docker_host``, which the plan hands over on its own."""
    return dict((option, settings.get(key)) for option, key in ENGINE_CLIENT_VARIABLES.items()
                if option != "docker_host")


def engine_client(settings):
    """The plan's ``engine_client`` of a node: every community.docker client option, ``docker_host`` included and
    unset paths left out, which the roles apply once per task file as ``module_defaults`` of
    ``group/community.docker.docker`` (the collection's own modules take ``docker_host`` and ``docker_client``)."""
    return engine_api.module_options(dict((option, settings.get(key))
                                          for option, key in ENGINE_CLIENT_VARIABLES.items()))


def _engine_client_problems(nodes, invalid, errors):
    """Engine client variables of a node that do not fit together (TLS options on a unix or ssh URL, ...)."""
    if invalid & set(ENGINE_CLIENT_VARIABLES.values()):
        return
    for node in nodes:
        s = node["settings"]
        found = engine_api.options_problem(dict((o, s[k]) for o, k in ENGINE_CLIENT_VARIABLES.items()))
        if found:
            option, message = found
            for opt, key in ENGINE_CLIENT_VARIABLES.items() if option != "docker_host" else ():
                message = re.sub(r"\b%s\b" % opt, PREFIX + key, message)
            errors.append(problem(node["host"], PREFIX + ENGINE_CLIENT_VARIABLES[option], message,
                                  _ENGINE_FIXES[option]))


_ENGINE_FIXES = {
    "docker_host": "set kimi_k3_docker_host to %s" % FORMATS["docker_host"][1] + ".",
    "tls": "unset kimi_k3_docker_tls, or point kimi_k3_docker_host at the engine's TLS port (tcp://host:2376).",
    "validate_certs": "set kimi_k3_docker_validate_certs: true with kimi_k3_docker_ca_path (a tcp:// engine), or "
                      "unset the TLS variables for a unix:// or ssh:// engine.",
    "ca_path": "unset kimi_k3_docker_ca_path, or point kimi_k3_docker_host at the engine's TLS port.",
    "client_cert": "set kimi_k3_docker_client_cert and kimi_k3_docker_client_key together, or neither.",
    "client_key": "set kimi_k3_docker_client_cert and kimi_k3_docker_client_key together, or neither.",
    "use_ssh_client": "unset kimi_k3_docker_use_ssh_client, or use an ssh://user@host engine URL.",
}


# Checks a pattern cannot say, by format: a function returning why the text is refused, or None.
FORMAT_CHECKS = {"docker_host": engine_url_problem, "secret": redaction.secret_text_problem}


def allowed_values(decl, recipe, snapshots, version=None):
    """The allowed values of a declaration with ``choices`` (None when any value of the type is allowed)."""
    choices = decl["choices"]
    if isinstance(choices, list):
        return list(choices)
    if choices == "snapshots":
        return sorted(snapshots) + list(decl.get("also") or [])
    if isinstance(choices, str) and choices.startswith("recipe:"):
        section = recipe
        for part in choices.split(":", 1)[1].split("."):
            section = section.get(part, {}) if isinstance(section, dict) else {}
        return list(section) + list(decl.get("also") or [])
    return None


def _fields_problem(decl, value):
    """Why a mapping with declared ``fields`` is refused (an unknown key, a wrong value), or None."""
    for key in sorted(value, key=str):
        spec = decl["fields"].get(key)
        item = value[key]
        if spec is None:
            return "has the key %s; its keys are %s." % (show(key), ", ".join(decl["fields"]))
        if item is None:
            continue
        if spec == "int" and (isinstance(item, bool) or not isinstance(item, int) or item < 1):
            return "%s is %s, not a positive integer." % (key, show(item))
        if isinstance(spec, list) and item not in spec:
            return "%s is %s, not one of %s." % (key, show(item), ", ".join(spec))
    return None


def _constraint(decl, value, recipe, snapshots):
    """Message when ``value`` (already of the declared type) breaks the declared values/format/range."""
    if decl["type"] in ("int", "int_or_auto") and value != "auto" and decl["minimum"] is not None \
            and value < decl["minimum"]:
        return "%d is below the minimum %d." % (value, decl["minimum"])
    if decl["type"] == "port" and not 0 < value < 65536:
        return "%d is not a TCP port (1-65535)." % value
    if decl["type"] == "dict" and decl.get("fields"):
        return _fields_problem(decl, value)
    # The release is judged by the version validator (its fix names the snapshot tool).
    allowed = allowed_values(decl, recipe, snapshots) if decl["type"] == "str" and decl["choices"] != "snapshots" \
        else None
    if allowed is not None:
        probe = value.lower() if decl["key"] == "accelerator" else value
        if probe not in allowed:
            return "%s is not one of %s." % (show(value), ", ".join(str(a) for a in allowed))
    texts = value if isinstance(value, list) else [value]
    if decl["format"] and decl["type"] in ("str", "str_or_list", "size", "list"):
        for text in texts:
            if not _format_ok(decl["format"], text):
                shown = "the value" if decl["secret"] else show(text)
                return "%s is not %s." % (shown, FORMATS[decl["format"]][1])
            semantic = FORMAT_CHECKS.get(decl["format"], lambda _text: None)(text)
            if semantic and decl["secret"]:
                return "the value %s." % semantic
            if semantic:
                shown = show(text) if urlparse(text).password is None else "the URL (password hidden)"
                return "%s: %s." % (shown, semantic)
    return None


def check_value(decl, value, recipe, snapshots):
    """``(normalised value, None)`` or ``(None, (message, fix))`` for one inventory value."""
    typed, message = _typed(decl, value)
    if message is None:
        message = _constraint(decl, typed, recipe, snapshots)
    if message is None:
        return typed, None
    if decl["secret"]:
        message = message.replace(show(value), "the value")
    return None, (message, fix_for(decl, recipe, snapshots))


def fix_for(decl, recipe, snapshots):
    """What to write instead, from the declaration."""
    allowed = allowed_values(decl, recipe, snapshots)
    if allowed is not None and decl["type"] == "str":
        return "set %s to one of %s." % (decl["name"], ", ".join(str(a) for a in allowed))
    if decl.get("fields"):
        return "set %s to a mapping of %s." % (decl["name"], ", ".join(
            "%s: %s" % (k, "a positive integer" if v == "int" else " | ".join(v)) for k, v in decl["fields"].items()))
    if decl["format"]:
        return "set %s to %s." % (decl["name"], FORMATS[decl["format"]][1])
    spoken = {"bool": "true or false", "int": "an integer", "port": "a port number 1-65535",
              "int_or_auto": "a positive integer or auto", "list": "a YAML list of strings",
              "dict": "a YAML mapping", "size": "a size such as 64g"}
    text = spoken.get(decl["type"], "a string")
    if decl["minimum"] is not None and decl["type"] == "int":
        text = "an integer >= %d" % decl["minimum"]
    return "set %s to %s." % (decl["name"], text)


# ----------------------------------------------------------------------------- reading the inventory


def problem(host, variable, message, fix):
    """A refusal or warning as the plan reports it: the host, the variable, what is wrong and the fix."""
    return {"host": host, "variable": variable, "message": message, "fix": fix}


# The most items (leaves: strings, numbers, ...) one kimi_k3_* value may hold. The largest real one, an extra_args
# list, holds a few dozen; a YAML alias bomb (aliases of aliases: 10^6 leaves from ten lines) held 10^6 and took the
# plan two minutes and 765 MB to expand. Counted through shared references without expanding them.
MAX_VALUE_ITEMS = 10000


def _children(node):
    """The items of a list or mapping, None for a leaf."""
    if isinstance(node, dict) or hasattr(node, "items"):
        return node.values()
    return node if isinstance(node, (list, tuple)) else None


def value_items(value, limit=MAX_VALUE_ITEMS, memo=None):
    """How many leaves ``value`` holds, a list or mapping that appears several times (a YAML alias: the same object)
    counted at each appearance but walked once; stops past ``limit`` (the answer is then > limit). A value that
    contains itself (a recursive alias) or nests deeper than Python's recursion limit counts as limit + 1.
    ``memo``: {id: count} shared between calls over values that share parts (the hosts of one group_vars)."""
    memo = {} if memo is None else memo

    def count(node, path):
        children = _children(node)
        if children is None:
            return 1
        key = id(node)
        if key in memo:
            return memo[key]
        if key in path:
            return limit + 1
        path.add(key)
        total = 0
        for child in children:
            total += count(child, path)
            if total > limit:
                break
        path.discard(key)
        memo[key] = total
        return total

    try:
        return count(value, set())
    except RecursionError:
        return limit + 1


def oversized(value, memo=None):
    """Whether a value holds more than MAX_VALUE_ITEMS leaves (the action leaves such a value untemplated)."""
    return value_items(value, MAX_VALUE_ITEMS, memo) > MAX_VALUE_ITEMS


def size_problems(hosts, judged=lambda name: name.startswith(PREFIX)):
    """One problem per variable (``kimi_k3_*``, or those ``judged`` names) holding more than MAX_VALUE_ITEMS leaves,
    naming the hosts that hold it; ``hosts``: nodes and routers ({host, vars}). Judged before anything else reads a
    value: every later check, and the redaction's search for secrets, would walk all of it."""
    memo, found = {}, {}
    for host in hosts:
        for name in sorted(n for n in host["vars"] if judged(n)):
            if oversized(host["vars"][name], memo):
                found.setdefault(name, []).append(host["host"])
    return [problem(", ".join(where[:3]) + (" and %d more" % (len(where) - 3) if len(where) > 3 else ""), name,
                    "holds more than %d items (nested lists or mappings counted through their YAML aliases); "
                    "refused before it is expanded." % MAX_VALUE_ITEMS,
                    "give %s its items one by one (a few dozen at most); an alias (*name) of a list nested inside "
                    "another multiplies it." % name) for name, where in sorted(found.items())]


def unknown_variables(nodes):
    """Problems for ``kimi_k3_*`` names that no declaration knows (a typo silently does nothing)."""
    problems, seen = [], set()
    for node in nodes:
        for name in sorted(node["vars"]):
            if not name.startswith(PREFIX) or name in BY_NAME or name in seen:
                continue
            seen.add(name)
            close = difflib.get_close_matches(name, list(BY_NAME), n=1)
            fix = ("did you mean %s? " % close[0] if close else "") + "The declared variables are in docs/variables.md."
            problems.append(problem(node["host"], name, "is not a variable of this collection.", fix))
    return problems


def _where_fix(decl, deployment):
    """Where a variable that must agree between nodes is set once."""
    if decl["scope"] == DEPLOYMENT and deployment:
        return "it is the same on every node of deployment %s" % deployment, (
            "set %s once for the deployment (group_vars of its group)." % decl["name"])
    return "it is cluster-wide", "set %s once in group_vars/vllm_cluster." % decl["name"]


def _cluster_value(decl, nodes, errors, deployment=None):
    """(host, value) of a cluster variable, (None, None) when unset; a second, different value is a problem."""
    name = decl["name"]
    seen = [(n["host"], n["vars"][name]) for n in nodes if n["vars"].get(name) is not None]
    if not seen:
        return None, None
    first_host, first = seen[0]
    for host, value in seen[1:]:
        if value != first:
            shown = ("(%s) and %s (%s)" % ("hidden", host, "hidden") if decl["secret"]
                     else "(%s) and %s (%s)" % (show(first), host, show(value)))
            scope, fix = _where_fix(decl, deployment)
            errors.append(problem(host, name, "differs between %s %s; %s." % (first_host, shown, scope), fix))
            break
    return first_host, first


def read_settings(nodes, recipe, snapshots, deployment=None):
    """Validate every declared variable; returns ``(settings, invalid, errors)``.

    ``settings`` maps each cluster variable's key (name without prefix) to its checked value or its default;
    host variables land in ``node["settings"]``. ``invalid`` holds the keys whose value was refused (later
    validators skip what depends on them: one mistake, one problem). Secrets are reduced to presence.
    ``nodes`` are one deployment's (``deployment`` names it when the inventory holds several); router variables
    are read by ``read_router_settings``.
    """
    errors = unknown_variables(nodes)
    settings, invalid = {}, set()
    for decl in VARIABLES:
        if decl["scope"] == ROUTER:
            continue
        if decl["scope"] == HOST:
            _read_host_variable(decl, nodes, recipe, snapshots, errors, invalid)
            continue
        _read_shared_variable(decl, nodes, (recipe, snapshots, deployment), settings, errors, invalid)
    _engine_client_problems(nodes, invalid, errors)
    settings["secrets"] = dict((k, bool(settings.pop(k) and any(n["vars"].get(PREFIX + k) for n in nodes)))
                               for k in SECRET_KEYS)
    settings["secret_digests"] = dict((k, secret_digest(_first_value(nodes, PREFIX + k))) for k in SECRET_KEYS)
    return settings, invalid, errors


_DIGEST_SALT = os.urandom(16)


def secret_digest(value):
    """A salted digest that tells two secrets apart without keeping or showing them (None: unset or empty).
    Surrounding whitespace does not count: the launch trims the value it writes."""
    if value is None or str(value).strip() == "":
        return None
    return hashlib.sha256(_DIGEST_SALT + str(value).strip().encode("utf-8")).hexdigest()


def _first_value(nodes, name):
    return next((n["vars"][name] for n in nodes if n["vars"].get(name) is not None), None)


def _read_shared_variable(decl, nodes, inputs, settings, errors, invalid):
    """A variable that must agree between ``nodes``: its checked value (a secret: True) or default in ``settings``."""
    recipe, snapshots, deployment = inputs
    host, value = _cluster_value(decl, nodes, errors, deployment)
    settings[decl["key"]] = copy.deepcopy(decl["default"])
    if value is None:
        return
    checked, refusal = check_value(decl, value, recipe, snapshots)
    if refusal:
        errors.append(problem(host, decl["name"], refusal[0], refusal[1]))
        invalid.add(decl["key"])
    else:
        settings[decl["key"]] = True if decl["secret"] else copy.deepcopy(checked)


def _read_host_variable(decl, nodes, recipe, snapshots, errors, invalid):
    for node in nodes:
        node.setdefault("settings", {})
        value = node["vars"].get(decl["name"])
        node["settings"][decl["key"]] = copy.deepcopy(decl["default"])
        if value is None:
            continue
        checked, refusal = check_value(decl, value, recipe, snapshots)
        if refusal:
            errors.append(problem(node["host"], decl["name"], refusal[0], refusal[1]))
            invalid.add(decl["key"])
        else:
            node["settings"][decl["key"]] = checked


def read_router_settings(routers, recipe, snapshots):
    """The router variables (and the host variables) of the vllm_router hosts: ``(settings, errors)``."""
    errors, settings, invalid = unknown_variables(routers), {}, set()
    for decl in VARIABLES:
        if not decl["on_router"]:
            continue  # set on the router host it is a scope mistake (plan_fleet.scope_problems)
        if decl["scope"] == HOST:
            _read_host_variable(decl, routers, recipe, snapshots, errors, invalid)
        else:
            _read_shared_variable(decl, routers, (recipe, snapshots, None), settings, errors, invalid)
    _engine_client_problems(routers, invalid, errors)
    return settings, errors
