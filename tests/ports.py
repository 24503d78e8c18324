"""A free loopback port for a test's server or rendezvous (several tests may run at once under
pytest-xdist, so no test names a fixed port)."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
