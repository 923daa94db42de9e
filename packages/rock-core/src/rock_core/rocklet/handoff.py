"""The rocklet's side of the listener handoff: take the listening socket the engine made.

A runtime on the engine's host (Docker) does not let the rocklet bind a socket the engine then
connects to by path: the sandbox could swap that path for a link to anything on the host. The
engine binds and listens itself, in a directory no sandbox sees, and offers the listening
socket once on a *handoff* socket in a read-only mount; the rocklet connects there at start and
receives it as a file descriptor (``SCM_RIGHTS``), then serves on it
(``--listen-fd-from PATH``). The engine's side is :mod:`rock_core.rocklet_handoff`.

Standard library only, Python 3.8+ (``socket.recv_fds`` is 3.9): ``recvmsg`` with an ``array``.
"""

from __future__ import annotations

import array
import os
import socket

__all__ = ["receive_listener"]


def receive_listener(path: str, timeout: float = 60.0) -> socket.socket:
    """Connect to the handoff socket at ``path`` and return the listening socket sent there.

    The descriptor is made non-inheritable at once: commands the rocklet runs must never hold
    its listening socket.

    :raises OSError: nothing listens at ``path``, the engine closed the connection, or what it
        sent was not one socket.
    """
    itemsize = array.array("i").itemsize
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout)
        conn.connect(path)
        flags = getattr(socket, "MSG_CMSG_CLOEXEC", 0)
        _, ancillary, _, _ = conn.recvmsg(1, socket.CMSG_LEN(itemsize), flags)
    fds = array.array("i")
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % itemsize])
    if len(fds) != 1:
        for fd in fds:
            os.close(fd)
        raise OSError(
            "the engine sent %d descriptors on %s, not one listening socket" % (len(fds), path)
        )
    os.set_inheritable(fds[0], False)
    listener = socket.socket(fileno=fds[0])  # family and type are read from the descriptor
    if listener.type != socket.SOCK_STREAM:
        listener.close()
        raise OSError("the descriptor sent on %s is not a stream socket" % path)
    return listener
