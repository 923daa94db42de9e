"""A port for a server about to start: free now, and out of the way of outgoing connections.

The usual way to find a free port (bind to port 0, read the port, close) hands out a port from the
kernel's ephemeral range, the same range the kernel draws the source ports of outgoing connections
from. Between the close and the server's own bind, any connection made on the machine can take it:
on a busy host (a bench opening thousands of connections, a test suite next to it) the server then
fails with "address already in use". :func:`listen_port` picks from the ports just below that range,
which the kernel never gives to an outgoing connection, so only another server choosing the same
port at the same moment can take it. Within one process, a port handed out recently is not handed
out again (two servers started together, each told its port before either binds, drew the same
one once: the second failed with "address already in use").
"""

from __future__ import annotations

import collections
import random
import socket
import threading
from pathlib import Path

__all__ = ["listen_port"]

_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST = 10_000  # below this, ports of well-known services crowd
_TRIES = 64
#: Ports handed out lately by this process, not handed out again while they are here.
_RECENT: collections.deque[int] = collections.deque(maxlen=1024)
_RECENT_LOCK = threading.Lock()


def _ephemeral_low() -> int:
    """The lowest port of the kernel's ephemeral range (Linux's default when it cannot be read)."""
    try:
        return int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def listen_port(host: str = "127.0.0.1", *, rng: random.Random | None = None) -> int:
    """A TCP port nothing listens on at ``host`` right now, below the kernel's ephemeral range.

    Tries random ports from 10,000 up to the range's low end; when the range starts too low to
    leave room, or every try is taken, falls back to a port the kernel picks (the usual way).

    :param host: the address the server will listen on.
    :param rng: the source of the tries (a seeded one in tests).
    """
    draw = rng or random.SystemRandom()
    top = _ephemeral_low() - 1
    if top > _LOWEST:
        for _ in range(_TRIES):
            port = draw.randint(_LOWEST, top)
            with _RECENT_LOCK:
                if port in _RECENT or not _bindable(host, port):
                    continue
                _RECENT.append(port)
            return port
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
