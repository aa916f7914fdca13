"""Loopback helpers for the multi-worker tests."""

import socket


def free_ports(count: int) -> list[int]:
    """``count`` TCP ports free on 127.0.0.1 right now (for a local TF_CONFIG cluster)."""
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports
