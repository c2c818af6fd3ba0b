"""Listening TCP sockets of the stand-in's side channels (the multi-node rendezvous, the NIXL KV side channel)."""
import socket
import threading


def serve_tcp(addr, backlog, handle, name=None):
    """Listen on ``addr`` (host, port) and hand every connection to ``handle(conn, peer)`` on a daemon thread of
    its own; returns the listening socket. OSError when the address cannot be bound (taken, not local)."""
    srv = socket.socket(socket.AF_INET6 if ":" in addr[0] else socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(addr)
    srv.listen(backlog)
    threading.Thread(target=_accept_loop, args=(srv, handle), name=name, daemon=True).start()
    return srv


def _accept_loop(srv, handle):
    """Until the socket is closed."""
    while True:
        try:
            conn, peer = srv.accept()
        except OSError:
            return
        threading.Thread(target=handle, args=(conn, peer), daemon=True).start()
