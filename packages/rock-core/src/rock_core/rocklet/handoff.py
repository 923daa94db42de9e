"""The rocklet's side of the listener handoff: take the listening socket the engine made.

A runtime on the engine's host (Docker) does not let the rocklet bind a socket the engine then
connects to by path: the sandbox could swap that path for a link to anything on the host. The
engine binds and listens itself, in a directory no sandbox sees, and offers the listening
socket once on a *handoff* socket in a read-only mount; the rocklet connects there at start and
receives it as a file descriptor (``SCM_RIGHTS``), then serves on it
(``--listen-fd-from PATH``). The engine's side is :mod:`rock_core.rocklet_handoff`.

Standard library only, Python 3.8+ (``socket.recv_fds`` is 3.9), and built on the interpreter's
``_socket`` rather than :mod:`socket` (whose enums cost milliseconds of a sandbox's start; see
:mod:`.front`): ``recvmsg`` and the descriptor read from its ancillary data.
"""

from __future__ import annotations

import _socket
import posix
import sys

__all__ = ["receive_listener"]

_INT = 4  # a C int, as SCM_RIGHTS carries descriptors


def receive_listener(path: str, timeout: float = 60.0) -> _socket.socket:
    """Connect to the handoff socket at ``path`` and return the listening socket sent there
    (a ``_socket.socket``: :class:`socket.socket` is its subclass, and
    ``socket.socket(fileno=listener.detach())`` makes one of it).

    The descriptor is made non-inheritable at once: commands the rocklet runs must never hold
    its listening socket.

    :raises OSError: nothing listens at ``path``, the engine closed the connection, or what it
        sent was not one socket.
    """
    conn = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        conn.settimeout(timeout)
        conn.connect(path)
        flags = getattr(_socket, "MSG_CMSG_CLOEXEC", 0)
        _, ancillary, _, _ = conn.recvmsg(1, _socket.CMSG_LEN(_INT), flags)
    finally:
        conn.close()
    fds = []
    for level, kind, data in ancillary:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            for at in range(0, len(data) - len(data) % _INT, _INT):
                fds.append(int.from_bytes(data[at : at + _INT], sys.byteorder, signed=True))
    if len(fds) != 1:
        for fd in fds:
            posix.close(fd)
        raise OSError(
            "the engine sent %d descriptors on %s, not one listening socket" % (len(fds), path)
        )
    posix.set_inheritable(fds[0], False)
    listener = _socket.socket(fileno=fds[0])  # family and type are read from the descriptor
    if listener.type != _socket.SOCK_STREAM:
        listener.close()
        raise OSError("the descriptor sent on %s is not a stream socket" % path)
    return listener
