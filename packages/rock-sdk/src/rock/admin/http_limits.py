"""Bounds on what a client may make the admin hold before a request reaches a route: uvicorn's
httptools protocol with a limit on the request's head and a deadline for sending it.

httptools (llhttp) has no limit of its own: a request line or a header that never ends grows in
memory for as long as the client sends, and uvicorn waits for a head forever (slowloris: a
client trickling one header byte at a time holds its connection and its memory). The protocol
of :func:`bounded_http_protocol`:

- refuses a head (request line plus headers) larger than ``max_head`` bytes with HTTP 431 and
  closes the connection: the head is fed to the parser in pieces and counted, so at most
  ``max_head`` plus one read of the socket is held per connection;
- closes a connection whose head is not complete ``header_timeout`` seconds after it began (or
  after the connection was made) with HTTP 408, whatever it trickled meanwhile. A kept-alive
  connection between requests is uvicorn's ``timeout_keep_alive``'s.

The body is the routes' (:mod:`rock.admin.body_limit`). The number of connections and requests
under way is bounded by uvicorn's ``limit_concurrency`` (``admin.max_connections``, set by
:func:`rock.admin.daemon.serve`), checked here in uvicorn's place so that the HTTP 503 past it
carries ``Retry-After`` (:data:`RETRY_AFTER_SECONDS`) and says which limit: the request never
reached a route, so any call may be sent again (rock's SDK does, after that many seconds).
"""

from __future__ import annotations

import logging
import time
from asyncio import TimerHandle, Transport
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["RETRY_AFTER_SECONDS", "bounded_http_protocol"]

#: The ``Retry-After`` of the 503 past ``max_connections``: whole seconds (HTTP's form).
RETRY_AFTER_SECONDS = 1
_log = logging.getLogger("rock.admin")
_refused = {"count": 0, "logged": 0.0}  # 503s past the limit since the last warning


def _busy_app(limit: int) -> Any:
    """The ASGI app answering a request past ``limit``: 503 with ``Retry-After``, then close."""
    body = (
        f"the admin has {limit} connections or requests under way (admin.max_connections): "
        f"retry after {RETRY_AFTER_SECONDS}s"
    ).encode()
    headers = [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(body)).encode()),
        (b"retry-after", str(RETRY_AFTER_SECONDS).encode()),
        (b"connection", b"close"),
    ]

    async def busy(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 503, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})

    return busy


def _count_refusal(limit: int) -> None:
    """One warning a second at most, with how many were refused (uvicorn's was one a request)."""
    _refused["count"] += 1
    now = time.monotonic()
    if now - _refused["logged"] >= 1.0:
        _log.warning(
            "%d requests answered 503 past admin.max_connections (%d)", _refused["count"], limit
        )
        _refused["count"], _refused["logged"] = 0, now


# Pieces the head is fed in: a normal head (well under this) costs one extra slice.
_PIECE = 8192


def _answer(transport: Transport, status: str, message: str) -> None:
    """Write a plain-text answer and close the connection."""
    body = message.encode()
    transport.write(
        f"HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {len(body)}\r\n"
        "connection: close\r\n\r\n".encode()
        + body
    )
    transport.close()


class _BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a bounded head and a head deadline (class attributes set
    by :func:`bounded_http_protocol`)."""

    max_head = 65536
    header_timeout = 30.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # uvicorn's check of limit_concurrency is done here instead (a 503 with Retry-After).
        self._limit: int | None = self.limit_concurrency
        self._busy = None if self._limit is None else _busy_app(self._limit)
        self.limit_concurrency = None
        self._head_bytes: int | None = 0  # None: between a head's end and the next request's start
        self._head_timer: TimerHandle | None = None

    def connection_made(self, transport: Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._start_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        super().connection_lost(exc)

    def _start_head(self) -> None:
        if self._head_bytes is None:  # else counting since the connection or the last head's end
            self._head_bytes = 0
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.header_timeout, self._head_timed_out)

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self._head_bytes is not None and not self.transport.is_closing():
            _answer(
                self.transport,
                "408 Request Timeout",
                f"the request's headers did not arrive within {self.header_timeout:g}s (admin.header_timeout)",
            )

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._start_head()

    def on_headers_complete(self) -> None:
        self._head_bytes = None
        self._stop_head_timer()
        limit = self._limit
        if limit is None or (len(self.connections) < limit and len(self.tasks) < limit):
            super().on_headers_complete()
            return
        _count_refusal(limit)
        app, self.app = self.app, self._busy  # this request's app (uvicorn reads self.app)
        try:
            super().on_headers_complete()
        finally:
            self.app = app

    def data_received(self, data: bytes) -> None:
        if self._head_bytes is None:
            super().data_received(data)
            return
        while data:
            room = max(1, min(_PIECE, self.max_head + 1 - self._head_bytes))
            piece, data = data[:room], data[room:]
            self._head_bytes += len(piece)
            super().data_received(piece)
            if self.transport.is_closing() or self.transport.get_protocol() is not self:
                return  # refused, or upgraded to a WebSocket (the handshake's bytes are its own)
            if self._head_bytes is None:  # the head ended in this piece: the rest is body
                if data:
                    super().data_received(data)
                return
            if self._head_bytes > self.max_head:
                _answer(
                    self.transport,
                    "431 Request Header Fields Too Large",
                    f"the request line and headers are larger than {self.max_head} bytes (admin.max_request_head)",
                )
                return


def bounded_http_protocol(max_head: int, header_timeout: float) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol class, refusing heads above ``max_head`` bytes (431) and
    heads not complete within ``header_timeout`` seconds (408); pass it as ``uvicorn.Config(http=...)``."""
    return type(
        "BoundedHttpToolsProtocol",
        (_BoundedHttpToolsProtocol,),
        {"max_head": max_head, "header_timeout": header_timeout},
    )
