"""HTTP servers on 127.0.0.1 that fail their client on purpose, for tests of what a client does
when an answer never comes.

- :class:`DroppingServer` reads a request and drops the connection in the middle of its answer:
  a request that may have reached a server.
- :class:`LosingProxy` forwards each request to a real server, reads its answer and drops the
  client's connection without passing it on: the request was taken, its answer lost.

Both note every request they read (:class:`SeenRequest`) and serve one connection at a time in a
thread of their own (:class:`OneAtATimeServer`), until :meth:`~OneAtATimeServer.close`. A
request's head and body are read up to :data:`MAX_REQUEST_BYTES`; beyond that the connection is
closed unread.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Any

import attrs
import httpx

__all__ = ["MAX_REQUEST_BYTES", "DroppingServer", "LosingProxy", "OneAtATimeServer", "SeenRequest"]

#: The most of one request (head and body) a server here reads.
MAX_REQUEST_BYTES = 1 << 20


@attrs.frozen
class SeenRequest:
    """A request as a server here read it: its request line, its headers (names lower-cased)
    and its body."""

    line: str
    headers: dict[str, str]
    body: bytes

    @property
    def method(self) -> str:
        return self.line.split(" ", 2)[0]

    @property
    def path(self) -> str:
        return self.line.split(" ", 2)[1]


def read_request(conn: socket.socket) -> SeenRequest | None:
    """Read one request from ``conn`` (its body by its ``Content-Length``); ``None``: the client
    closed first, or sent more than :data:`MAX_REQUEST_BYTES`."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk or len(data) + len(chunk) > MAX_REQUEST_BYTES:
            return None
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    line, *rest = head.decode("latin-1").split("\r\n")
    headers = {
        name.strip().lower(): value.strip()
        for name, value in (field.split(":", 1) for field in rest if ":" in field)
    }
    length = int(headers.get("content-length", "0"))
    if length > MAX_REQUEST_BYTES:
        return None
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        body += chunk
    return SeenRequest(line=line, headers=headers, body=body)


class OneAtATimeServer:
    """A TCP server on 127.0.0.1 whose thread accepts one connection at a time and hands it to
    :meth:`handle`, until :meth:`close`. ``url`` is its ``http://`` address."""

    def __init__(self) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def handle(self, conn: socket.socket) -> None:
        """Serve connection ``conn`` (closed after it returns)."""
        raise NotImplementedError

    def _serve(self) -> None:
        with self._sock:  # closed by this thread, once it no longer accepts (see close)
            while True:
                try:
                    conn, _ = self._sock.accept()
                except OSError:
                    return  # shut down
                # A broken connection or an answer that is not JSON ends this connection,
                # not the server.
                with conn, contextlib.suppress(OSError, ValueError):
                    self.handle(conn)

    def close(self) -> None:
        """Stop accepting, and wait for the thread (at most 10 s)."""
        # The thread that accepts closes the socket on its way out, no other: a number closed
        # while a thread is about to call accept() on it is soon another test server's listener,
        # whose connections that thread would take (a CI flake of session 44).
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes accept(); a close alone does not
        self._thread.join(timeout=10)

    def __enter__(self) -> OneAtATimeServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class DroppingServer(OneAtATimeServer):
    """Reads each request, starts an answer (a 200 promising 1,000 bytes, then one) and drops
    the connection. ``requests`` holds every request read."""

    def __init__(self) -> None:
        self.requests: list[SeenRequest] = []
        super().__init__()

    def handle(self, conn: socket.socket) -> None:
        request = read_request(conn)
        if request is not None:
            self.requests.append(request)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n{")


class LosingProxy(OneAtATimeServer):
    """Forwards each request to ``target`` (a real server), reads its answer, and closes the
    client's connection without passing the answer on. ``seen`` holds every request read and
    ``answers`` the target's answers (JSON)."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.seen: list[SeenRequest] = []
        self.answers: list[Any] = []
        self._upstream = httpx.Client(base_url=target, timeout=180)
        super().__init__()

    def handle(self, conn: socket.socket) -> None:
        request = read_request(conn)
        if request is None:
            return
        self.seen.append(request)
        passed = {
            name: value
            for name, value in request.headers.items()
            if name not in ("host", "content-length", "connection")
        }
        answer = self._upstream.request(
            request.method, request.path, content=request.body, headers=passed
        )
        self.answers.append(answer.json())
        conn.shutdown(socket.SHUT_RDWR)  # the answer is lost

    def close(self) -> None:
        super().close()
        self._upstream.close()
