"""Ports for the tests' own servers and for outages: a port nothing listens on right now."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A port of `host` that was free a moment ago (the kernel's pick for a bind to port 0)."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]
