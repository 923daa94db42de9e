"""Raw TCP tunnels to the sandbox's own ports: ``GET /tunnel?port=N`` with ``Upgrade: rock-tunnel``.

The engine reaches a sandbox's services through its rocklet, not through ports the runtime
publishes: the rocklet connects to ``127.0.0.1:N`` inside the sandbox, answers ``101 Switching
Protocols``, and from then on the HTTP connection carries the bytes of that TCP connection,
both ways, until either side closes. So any port of the sandbox can be reached, with whatever
network the sandbox has (``none`` included), and on any runtime that can reach the rocklet.

Failures are answered before the switch, as JSON ``{"detail": ...}``: 400 for a bad port or a
missing ``Upgrade`` header, 502 when nothing listens on the port (or the connection fails), so
the caller can tell its user which.
"""

from __future__ import annotations

import socket
import threading

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds at start; annotations are strings anyway
    from typing import Any

from .errors import BadRequest
from .http_messages import Request, Response

__all__ = ["UPGRADE", "Upgrade", "open_tunnel"]

#: The ``Upgrade`` token of a tunnel request.
UPGRADE = "rock-tunnel"
# Seconds to wait for the sandbox's service to accept the connection.
_CONNECT_TIMEOUT = 10.0
_CHUNK = 65536


class Upgrade(Response):
    """A response that switches the connection to a raw tunnel to ``target`` (a connected socket).

    The server sends ``101 Switching Protocols`` and then calls :meth:`splice`, which returns
    when both directions are closed.
    """

    __slots__ = ("target",)

    def __init__(self, target: socket.socket) -> None:
        super().__init__(b"", status=101, headers={"upgrade": UPGRADE, "connection": "Upgrade"})
        self.target = target

    def splice(self, conn: socket.socket, rfile: Any) -> None:
        """Copy bytes between the client (``conn``, read through its buffered ``rfile``, which
        may already hold bytes sent after the request) and the target, until both are done."""
        target = self.target

        def upstream() -> None:
            try:
                while True:
                    data = rfile.read1(_CHUNK)
                    if not data:
                        break
                    target.sendall(data)
            except (OSError, ValueError):
                pass
            _shut(target, socket.SHUT_WR)

        thread = threading.Thread(target=upstream, daemon=True)
        thread.start()
        try:
            while True:
                data = target.recv(_CHUNK)
                if not data:
                    break
                conn.sendall(data)
        except OSError:
            pass
        _shut(conn, socket.SHUT_WR)
        thread.join()
        target.close()


def _shut(sock: socket.socket, how: int) -> None:
    try:
        sock.shutdown(how)
    except OSError:
        pass


def open_tunnel(request: Request) -> Upgrade:
    """``GET /tunnel?port=N``: connect to ``127.0.0.1:N`` in the sandbox and switch to a tunnel."""
    if UPGRADE not in request.headers.get("upgrade", "").lower():
        raise BadRequest("a tunnel needs the header 'Upgrade: %s'" % UPGRADE)
    raw = request.query.get("port", "")
    try:
        port = int(raw)
    except ValueError:
        raise BadRequest("port: expected a port number 1..65535, got %r" % raw) from None
    if not 1 <= port <= 65535:
        raise BadRequest("port: expected a port number 1..65535, got %d" % port)
    try:
        target = socket.create_connection(("127.0.0.1", port), timeout=_CONNECT_TIMEOUT)
    except ConnectionRefusedError:
        raise BadRequest("nothing listens on port %d in the sandbox" % port, status=502) from None
    except OSError as exc:
        raise BadRequest(
            "could not connect to port %d in the sandbox: %s" % (port, exc), status=502
        ) from None
    target.settimeout(None)
    try:
        target.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except OSError:
        pass
    return Upgrade(target)
