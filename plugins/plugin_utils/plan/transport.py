# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Insecure transports a deployment accepts, as warnings (pure functions): the plan does not refuse them (an
isolated network may make them fine), but it names each one, with the hosts and the variable to change.

* a Docker engine reached over plain tcp:// (whoever reaches the port is root on the node);
* a Docker engine over TLS without verifying its certificate (whoever sits in between is root on the node);
* an API key sent over plain http to an address beyond loopback (it crosses the network in clear).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import tls as plan_tls
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import addresses
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan.variables import PREFIX, problem

PLAIN_ENGINE_SCHEMES = ("tcp://", "http://")


def _plain_engine(settings):
    host = str(settings.get("docker_host") or "").lower()
    return host.startswith(PLAIN_ENGINE_SCHEMES) and not settings.get("docker_tls") \
        and not settings.get("docker_validate_certs")


def _unverified_engine(settings):
    return bool(settings.get("docker_tls")) and not settings.get("docker_validate_certs")


def _key_in_clear(ctx, node):
    return ctx.get("api_access") == "api_key" and addresses.serves_http(ctx, node) \
        and not plan_tls.serves_tls(node) and not addresses.is_loopback(addresses.api_host(node))


# (test of a node, variable named, what is insecure, the fix)
CHECKS = (
    (lambda ctx, node: _plain_engine(node.get("settings", {})), PREFIX + "docker_host",
     "reach their Docker engine over plain tcp:// without TLS: whoever reaches the port is root on the node.",
     "use ssh://user@host (or the node's unix socket), or TLS with verification: kimi_k3_docker_validate_certs: "
     "true and kimi_k3_docker_ca_path (docs/install.md, \"Remote engines\")."),
    (lambda ctx, node: _unverified_engine(node.get("settings", {})), PREFIX + "docker_tls",
     "talk TLS to their Docker engine without verifying its certificate: whoever sits in between is root on the "
     "node.", "set kimi_k3_docker_validate_certs: true and kimi_k3_docker_ca_path instead of kimi_k3_docker_tls."),
    (_key_in_clear, PREFIX + "tls_certfile",
     "serve the API over plain http on a non-loopback address: clients send kimi_k3_api_key unencrypted.",
     "set kimi_k3_tls_certfile and kimi_k3_tls_keyfile on the nodes that serve the API (docs/secrets.md \"TLS\"), "
     "or bind kimi_k3_api_host to a loopback address behind a TLS-terminating proxy, or accept plain http on an "
     "isolated network."),
)


def warnings(ctx):
    """One warning per insecure transport of a deployment, naming every host it concerns (the first is the
    problem's host) and the variable to change."""
    out = []
    for test, variable, what, fix in CHECKS:
        hosts = [node["host"] for node in ctx["nodes"] if test(ctx, node)]
        if hosts:
            out.append(problem(hosts[0], variable, "%s %s" % (", ".join(hosts), what), fix))
    return out
