#!/usr/bin/env python3
"""Print a container's log (stdout+stderr) from the Docker Engine API on a unix socket. Read-only, stdlib only.

Used by the smoke and capacity playbooks on every node (the nodes need python3 for Ansible anyway, but not the
docker CLI). Non-TTY containers return a multiplexed stream (8-byte frame headers); it is demultiplexed here.

usage: container_logs.py SOCKET_OR_DOCKER_HOST CONTAINER [SINCE_EPOCH] [TAIL]
  SINCE_EPOCH 0 = from the start; TAIL 'all' or a line count.
Exit 0 with the log on stdout. Otherwise nothing on stdout and one line on stderr: exit 2 for an error answer of
the Docker API, 3 when the container does not exist, 4 when the engine cannot be reached (socket missing, permission
denied, connection reset), 64 for bad arguments. The smoke module reports such a log as unreadable (never as a
clean log), which fails the ``smoke_fail_on_log_errors`` policy.
"""
import http.client
import socket
import sys
import urllib.parse


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=60):
        http.client.HTTPConnection.__init__(self, "localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.unix_path)


def demux(data):
    """Docker multiplexed stream -> bytes; raw (TTY) streams are returned unchanged."""
    if len(data) < 8 or data[0] not in (0, 1, 2) or data[1:4] != b"\0\0\0":
        return data
    out, pos = [], 0
    while pos + 8 <= len(data):
        size = int.from_bytes(data[pos + 4:pos + 8], "big")
        out.append(data[pos + 8:pos + 8 + size])
        pos += 8 + size
    return b"".join(out)


def fetch(sock, name, since, tail):
    """(HTTP status, body) of the engine's logs endpoint for ``name``."""
    query = urllib.parse.urlencode({"stdout": 1, "stderr": 1, "since": since, "tail": tail})
    conn = UnixHTTPConnection(sock)
    try:
        conn.request("GET", "/containers/%s/logs?%s" % (urllib.parse.quote(name), query))
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def main(argv):
    if len(argv) < 3:
        sys.stderr.write("usage: container_logs.py SOCKET_OR_DOCKER_HOST CONTAINER [SINCE_EPOCH] [TAIL]\n")
        return 64
    sock = argv[1]
    if sock.startswith("unix://"):
        sock = sock[len("unix://"):]
    name = argv[2]
    try:
        since = int(float(argv[3])) if len(argv) > 3 else 0
    except ValueError:
        sys.stderr.write("SINCE_EPOCH must be a number, got %r\n" % argv[3])
        return 64
    tail = argv[4] if len(argv) > 4 else "all"
    try:
        status, body = fetch(sock, name, since, tail)
    except (OSError, http.client.HTTPException) as exc:
        sys.stderr.write("cannot read the log of %s from the engine at %s: %s: %s\n" % (
            name, sock, type(exc).__name__, exc))
        return 4
    if status == 404:
        sys.stderr.write("no such container: %s\n" % name)
        return 3
    if status != 200:
        sys.stderr.write("docker API HTTP %s: %s\n" % (status, body[:300]))
        return 2
    sys.stdout.write(demux(body).decode("utf-8", "replace"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
