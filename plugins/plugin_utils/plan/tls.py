# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""TLS of the API servers (pure functions over checked settings): who serves https, the flags and mounts it
renders, the plan fields the clients read, and the refusals an operator can fix before a node is contacted.

vLLM serves https when ``--ssl-keyfile`` and ``--ssl-certfile`` are given (uvicorn's ``ssl_keyfile`` /
``ssl_certfile``, vllm/entrypoints/openai/cli_args.py). vllm-router 0.1.17 has no TLS listener (its server binds a
plain ``TcpListener``) and its backend client (reqwest 0.13 with rustls) verifies https backends against the system
roots, which ``SSL_CERT_FILE`` replaces: the router container gets the CA file mounted and named there.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import ssl

PREFIX = "kimi_k3_"
ROUTER_CA_ENV = "SSL_CERT_FILE"


def _problem(host, variable, message, fix):
    return {"host": host, "variable": variable, "message": message, "fix": fix}


def node_files(node):
    """(certfile, keyfile) of a node, either None."""
    s = node.get("settings", {})
    return s.get("tls_certfile"), s.get("tls_keyfile")


def serves_tls(node):
    return node_files(node)[0] is not None


def pair_problems(nodes):
    """A certificate without its key (or a key without a certificate) on one node."""
    out = []
    for node in nodes:
        cert, key = node_files(node)
        if cert and not key:
            out.append(_problem(node["host"], PREFIX + "tls_keyfile", "is not set, but kimi_k3_tls_certfile (%s) is: "
                                "vLLM needs the certificate's private key to serve https." % cert,
                                "set kimi_k3_tls_keyfile to the key's path on the node (mode 0400), next to "
                                "kimi_k3_tls_certfile."))
        elif key and not cert:
            out.append(_problem(node["host"], PREFIX + "tls_certfile", "is not set, but kimi_k3_tls_keyfile (%s) is: "
                                "a key alone serves nothing." % key,
                                "set kimi_k3_tls_certfile to the certificate's path on the node, or remove "
                                "kimi_k3_tls_keyfile."))
    return out


def mixed_problems(serving):
    """Every API server of the inventory speaks one scheme: the clients, the router and Prometheus use one.
    ``serving``: the nodes that serve the API, in order."""
    with_tls = [n["host"] for n in serving if serves_tls(n)]
    without = [n for n in serving if not serves_tls(n)]
    if not with_tls or not without:
        return []
    return [_problem(without[0]["host"], PREFIX + "tls_certfile", "is not set on this API server, but %s serve%s "
                     "https; every API server of the inventory speaks one scheme." %
                     (", ".join(with_tls), "s" if len(with_tls) == 1 else ""),
                     "set kimi_k3_tls_certfile and kimi_k3_tls_keyfile for every node that serves the API "
                     "(group_vars/vllm_cluster), or remove them from %s." % ", ".join(with_tls))]


def ca_file_problem(path, host, variable):
    """Why the controller cannot verify with ``path`` (missing, unreadable, not a CA bundle, a key), else None."""
    fix = ("set %s to the CA certificate (PEM) on the controller that signed the servers' certificates." % variable)
    if not os.path.isfile(path):
        return _problem(host, variable, "%s does not exist on the controller (or is not a file)." % path, fix)
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 20)
    except OSError as exc:
        return _problem(host, variable, "%s cannot be read on the controller (%s)." % (path, exc.strerror), fix)
    if b"PRIVATE KEY" in head:
        return _problem(host, variable, "%s holds a private key; a CA bundle holds certificates only." % path,
                        fix + " Keep private keys out of CA bundles.")
    try:
        ssl.create_default_context(cafile=path)
    except (ssl.SSLError, ValueError):
        return _problem(host, variable, "%s holds no PEM certificate Python's ssl can load." % path, fix)
    return None


def controller_ca(settings):
    """(path, variable that set it) of the CA on the controller; (None, None) = the system's CAs."""
    if settings.get("tls_controller_ca_file"):
        return settings["tls_controller_ca_file"], PREFIX + "tls_controller_ca_file"
    if settings.get("tls_ca_file"):
        return settings["tls_ca_file"], PREFIX + "tls_ca_file"
    return None, None


def deployment_problems(ctx, serving):
    """The TLS refusals of one deployment (``serving``: its nodes that serve the API)."""
    errors = pair_problems(ctx["nodes"])
    if errors:
        return errors
    errors = mixed_problems(serving)
    if errors or not any(serves_tls(n) for n in serving):
        return errors
    path, variable = controller_ca(ctx["settings"])
    if path is None:
        return []
    found = ca_file_problem(path, ctx["where"], variable)
    if found and variable == PREFIX + "tls_ca_file":
        found["fix"] = ("set kimi_k3_tls_controller_ca_file to the CA's path on the controller (kimi_k3_tls_ca_file "
                        "is its path on the nodes), or put the CA at %s on the controller." % path)
    return [found] if found else []


def plan_fields(ctx, node, serving):
    """The ``tls`` entry of a node plan of an https deployment (None: plain http). Followers without an API
    server carry it too: their health wait calls the head's https URL."""
    if not any(serves_tls(n) for n in serving):
        return None
    cert, key = node_files(node)
    path, _variable = controller_ca(ctx["settings"])
    return {"scheme": "https", "certfile": cert, "keyfile": key, "ca_file": ctx["settings"].get("tls_ca_file"),
            "controller_ca_file": path}


def server_layers(node):
    """[(variable, argv tokens)] of the node's TLS flags ([] without a certificate)."""
    cert, key = node_files(node)
    if not cert:
        return []
    return [(PREFIX + "tls_keyfile", ["--ssl-keyfile", key]), (PREFIX + "tls_certfile", ["--ssl-certfile", cert])]


def volumes(tls):
    """Read-only mounts of the certificate and key at their node paths (the flags name the same paths)."""
    if not tls or not tls.get("certfile"):
        return []
    files = [tls["certfile"]] + ([tls["keyfile"]] if tls["keyfile"] != tls["certfile"] else [])
    return ["%s:%s:ro" % (f, f) for f in files]


def scheme(tls):
    return "https" if tls else "http"


def cluster_fields(plans):
    """``cluster.tls`` ({ca_file, controller_ca_file}) when the API servers speak https, else None."""
    for plan in plans:
        if plan.get("tls"):
            return {"ca_file": plan["tls"]["ca_file"], "controller_ca_file": plan["tls"]["controller_ca_file"]}
    return None


def router_fields(router_settings, cluster_tls):
    """(env, volumes) of the router container for https backends: the CA mounted and named in SSL_CERT_FILE."""
    if not cluster_tls:
        return {}, []
    ca = router_settings.get("tls_ca_file") or cluster_tls.get("ca_file")
    if not ca:
        return {}, []
    return {ROUTER_CA_ENV: ca}, ["%s:%s:ro" % (ca, ca)]


def router_warnings(router_host, bind, loopback, cluster_tls):
    """vllm-router has no TLS listener: with https backends, clients still send the key to the router in clear."""
    if not cluster_tls or loopback:
        return []
    return [_problem(router_host, PREFIX + "api_host", "the router serves plain http on %s (vllm-router 0.1.17 has "
                     "no TLS listener) while its backends serve https: clients send kimi_k3_api_key to it unencrypted."
                     % bind, "bind the router's kimi_k3_api_host to a loopback address behind a TLS-terminating "
                     "proxy, or accept plain http on an isolated network.")]
