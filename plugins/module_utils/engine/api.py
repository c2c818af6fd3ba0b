# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read-only requests to a node's container engine through community.docker's client (the vendored Docker SDK
``APIClient``), so every engine URL the ``docker_container`` tasks of the roles accept works here too: a unix
socket, plain or TLS ``tcp://`` and ``ssh://`` (paramiko, or the ssh CLI with ``use_ssh_client``). That client is
community.docker's private code: engine/docker_sdk.py alone imports it and says which releases are supported.

The options carry community.docker's names (``docker_host``, ``tls``, ``validate_certs``, ``ca_path``,
``client_cert``, ``client_key``, ``use_ssh_client``) so a role passes the plan's ``docker_client`` mapping to this
collection's modules and to community.docker's alike. Runs on managed nodes: the node needs Python ``requests``
(as for every community.docker module), paramiko only for ``ssh://`` without ``use_ssh_client``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

try:
    from urllib.parse import urlparse
except ImportError:  # pragma: no cover - Python 2 is not supported on nodes
    from urlparse import urlparse

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.engine import docker_sdk
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.engine.docker_sdk import (
    APIClient, MINIMUM_DOCKER_API_VERSION, DockerException, MissingRequirementException, TLSConfig, parse_host)

# The engine URL every module, the plan and the checks default to (kimi_k3_docker_host, docker_host options).
DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"

# The client options of community.docker's modules this collection passes on: name -> (type, default).
CLIENT_OPTIONS = {
    "docker_host": ("str", DEFAULT_DOCKER_HOST),
    "tls": ("bool", False),
    "validate_certs": ("bool", False),
    "ca_path": ("path", None),
    "client_cert": ("path", None),
    "client_key": ("path", None),
    "use_ssh_client": ("bool", False),
}
TLS_OPTIONS = ("tls", "validate_certs", "ca_path", "client_cert", "client_key")


class EngineError(Exception):
    """The engine cannot be asked: bad options, a missing library on the node, or no answer."""


def docker_client_spec():
    """The argument_spec entry of the modules' ``docker_client`` option (every client option but ``docker_host``)."""
    return dict(type="dict", apply_defaults=True, options=dict(
        (name, dict(type=vtype, default=default)) for name, (vtype, default) in CLIENT_OPTIONS.items()
        if name != "docker_host"))


def container_spec():
    """The argument_spec entries of the modules that ask a node's engine about the vLLM container (``container``,
    ``docker_host``, ``docker_client``; documented by the ``gpufleet.kimi_k3.container_engine`` fragment)."""
    return dict(container=dict(type="str", required=True),
                docker_host=dict(type="str", default=DEFAULT_DOCKER_HOST),
                docker_client=docker_client_spec())


def client_options(params):
    """The client options out of a mapping (a module's ``params``, the plan's ``docker_client``, or both merged),
    missing or null ones at their defaults."""
    merged = dict(params or {})
    merged.update(merged.pop("docker_client", None) or {})
    return dict((name, default if merged.get(name) is None else merged[name])
                for name, (_vtype, default) in CLIENT_OPTIONS.items())


def module_options(params):
    """community.docker's client options out of the same mapping as client_options, for the roles'
    ``module_defaults`` (``group/community.docker.docker``): unset paths are left out rather than passed as null,
    so community.docker applies its own defaults (and environment fallbacks) exactly as for an omitted option."""
    return dict((name, value) for name, value in client_options(params).items() if value is not None)


def url_problem(url):
    """Why community.docker's client refuses the engine URL ``url`` (or why this collection does), else None.

    On top of the Docker SDK's own rules (``parse_host``: no query, fragment, parameters or password; ssh takes no
    path) a ``tcp://`` URL must name its port: the SDK's default port is 2376 without TLS and 2375 with it, the
    reverse of the Docker daemon's convention."""
    if not isinstance(url, str) or not url.strip():
        return "it is empty"
    if url != url.strip() or any(ord(c) < 32 or ord(c) == 127 for c in url):
        return "it holds whitespace or control characters"
    try:
        parsed = urlparse(url)
    except ValueError as exc:
        return "it is not a URL (%s)" % exc
    if parsed.scheme not in ("unix", "tcp", "ssh", "http", "https"):
        return "its scheme is not unix://, tcp:// or ssh:// (the schemes a Linux node's engine speaks)"
    try:
        port = parsed.port
    except ValueError:
        return "its port is not a number 1-65535"
    if parsed.params or parsed.query or parsed.fragment or parsed.password:
        return "the Docker SDK refuses a query, fragment or password in an engine URL"
    if parsed.scheme == "ssh" and parsed.path:
        return "the Docker SDK allows no path in an ssh:// engine URL (it runs `docker system dial-stdio` on the host)"
    if parsed.scheme in ("tcp", "http", "https") and (not parsed.netloc or not port):
        return ("a %s:// engine URL needs a port (the Docker SDK's default port is 2376 without TLS and 2375 with "
                "it, the reverse of the daemon's)" % parsed.scheme)
    return _sdk_problem(url)


def _sdk_problem(url):
    """The Docker SDK's own refusal of ``url`` (None when it takes it, or when the SDK is not importable)."""
    if parse_host is None:
        return None
    try:
        parse_host(url)
    except DockerException as exc:
        return "the Docker SDK refuses it: %s" % exc
    return None


def options_problem(options):
    """``(option, message)`` when the client options do not fit together (None when they do)."""
    opts = client_options(options)
    url = opts["docker_host"]
    why = url_problem(url)
    if why:
        return "docker_host", "%s: %s." % (_shown(url), why)
    scheme = urlparse(url).scheme
    tls_set = [name for name in TLS_OPTIONS if opts[name]]
    if tls_set and scheme not in ("tcp", "https"):
        return tls_set[0], ("%s applies to a tcp:// engine URL only; %s is %s://." % (
            tls_set[0], "docker_host", scheme))
    if bool(opts["client_cert"]) != bool(opts["client_key"]):
        missing = "client_key" if opts["client_cert"] else "client_cert"
        return missing, "client_cert and client_key go together (a client certificate and its key)."
    if opts["ca_path"] and not opts["validate_certs"]:
        return "validate_certs", "ca_path is read only when validate_certs is true (without it nothing is verified)."
    if opts["use_ssh_client"] and scheme != "ssh":
        return "use_ssh_client", "use_ssh_client applies to an ssh:// engine URL only; docker_host is %s://." % scheme
    return None


def cli_argv(options, args):
    """The ``docker`` CLI command for ``args`` against the engine the client options name: the default socket as
    the CLI's own default, any other engine with ``-H`` and its TLS flags (so a fallback to the CLI never asks a
    different engine than the one configured)."""
    opts = client_options(options)
    if opts["docker_host"] == DEFAULT_DOCKER_HOST:
        return ["docker"] + list(args)
    argv = ["docker", "-H", opts["docker_host"]]
    if opts["validate_certs"]:
        argv.append("--tlsverify")
    elif opts["tls"]:
        argv.append("--tls")
    for name, flag in (("ca_path", "--tlscacert"), ("client_cert", "--tlscert"), ("client_key", "--tlskey")):
        if opts[name]:
            argv += [flag, opts[name]]
    return argv + list(args)


def _shown(url):
    try:
        hidden = urlparse(url).password is not None
    except ValueError:
        hidden = "@" in str(url)
    return "the URL (password hidden)" if hidden else repr(url)


def connect_params(options, timeout):
    """The ``APIClient`` keyword arguments for the client options, the way community.docker's modules build them:
    ``tcp://`` becomes ``https://`` when ``tls`` or ``validate_certs`` is set; a client certificate only with both
    files; the CA only when verifying."""
    opts = client_options(options or {})
    using_tls = bool(opts["tls"] or opts["validate_certs"])
    base_url = opts["docker_host"].replace("tcp://", "https://", 1) if using_tls else opts["docker_host"]
    params = {"base_url": base_url, "version": MINIMUM_DOCKER_API_VERSION, "timeout": timeout}
    if using_tls:
        tls = {"verify": bool(opts["validate_certs"])}
        if opts["client_cert"] and opts["client_key"]:
            tls["client_cert"] = (opts["client_cert"], opts["client_key"])
        if opts["validate_certs"] and opts["ca_path"]:
            tls["ca_cert"] = opts["ca_path"]
        params["tls"] = tls
    if opts["use_ssh_client"]:
        params["use_ssh_client"] = True
    return params


def open_client(options, timeout=5.0):
    """An ``APIClient`` for the client options; ``EngineError`` names what is missing or wrong."""
    problem = options_problem(options)
    if problem:
        raise EngineError("%s: %s" % problem)
    if docker_sdk.IMPORT_ERROR is not None:
        raise EngineError(docker_sdk.refusal())
    params = connect_params(options, timeout)
    try:
        if "tls" in params:
            params["tls"] = TLSConfig(**params["tls"])
        return APIClient(**params)
    except MissingRequirementException as exc:
        hint = "; or set use_ssh_client to use the node's ssh command" if "paramiko" in str(exc) else ""
        raise EngineError("the node lacks a Python library community.docker's client needs: %s (install it for "
                          "the node's ansible_python_interpreter%s)" % (exc, hint))
    except DockerException as exc:
        raise EngineError("cannot set up the engine client for %s: %s" % (params["base_url"], exc))


def engine_get(options, path, timeout=5.0):
    """GET ``path`` (unversioned, e.g. ``/version``) from the engine the client options name.

    ``options``: a mapping of the client options, or an engine URL string. Returns ``(status, body bytes)``;
    raises ``EngineError`` when the engine cannot be asked or does not answer."""
    options = {"docker_host": options} if isinstance(options, str) else options
    client = open_client(options, timeout)
    try:
        # The client's own CA setting, passed per request: requests otherwise lets REQUESTS_CA_BUNDLE or
        # CURL_CA_BUNDLE in the node's environment replace the configured ca_path.
        resp = client.get(client.base_url + path, timeout=timeout, verify=client.verify)
        return resp.status_code, resp.content
    except Exception as exc:  # pylint: disable=broad-except  # requests, urllib3, paramiko and socket errors
        raise EngineError("no answer from the engine: %s" % exc)     # the callers name the engine URL
    finally:
        client.close()
