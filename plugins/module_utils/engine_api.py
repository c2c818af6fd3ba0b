# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read-only GET requests to a container engine's HTTP API over its unix socket or tcp:// (standard library only,
for code that runs on managed nodes with Python >= 3.9)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import socket

# The engine URL every module, the plan and the checks default to (kimi_k3_docker_host, docker_host options).
DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"

try:
    import http.client as http_client
    from urllib.parse import urlparse
except ImportError:  # pragma: no cover - Python 2 is not supported on nodes
    http_client = None
    urlparse = None


if http_client is not None:
    class UnixHTTPConnection(http_client.HTTPConnection):
        """HTTPConnection to a unix socket path (the Docker Engine API socket)."""

        def __init__(self, path, timeout=5.0):
            http_client.HTTPConnection.__init__(self, "localhost", timeout=timeout)
            self._socket_path = path

        def connect(self):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(self.timeout)
            sock.connect(self._socket_path)
            self.sock = sock


def engine_get(docker_host, path, timeout=5.0):
    """GET ``path`` from the engine at ``docker_host`` (``unix:///...``, a socket path, or ``tcp://host:port``).

    Returns ``(status, body bytes)``; raises ``ValueError`` for an unsupported scheme and the socket/HTTP
    exceptions of the standard library when the engine cannot be reached.
    """
    u = urlparse(docker_host)
    if u.scheme in ("unix", "") and (u.path or docker_host.startswith("/")):
        conn = UnixHTTPConnection(u.path or docker_host, timeout=timeout)
    elif u.scheme in ("tcp", "http"):
        conn = http_client.HTTPConnection(u.hostname, u.port or 2375, timeout=timeout)
    else:
        raise ValueError("unsupported docker_host scheme %r" % u.scheme)
    try:
        conn.request("GET", path, headers={"Host": "docker"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()
