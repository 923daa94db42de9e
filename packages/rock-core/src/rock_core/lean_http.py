"""A lean async HTTP/1.1 client for a plugin's hot calls to one plain-HTTP server
(:class:`LeanHttpClient`; rock-nomad's calls to Nomad).

General clients (httpx) parse and merge a URL, build header and request objects, run hooks and
walk a pool's connections on every call: at thousands of calls a second that is most of the
caller's CPU. This one is a policy over rock-core's lean HTTP/1.1 core (:mod:`rock_core.http1`:
the request's bytes, the answer's reader and kept-alive connections, shared with the embedded
SDK's rocklet calls), and keeps what such calls need and nothing more:

- one server (``http://host:port``; no TLS, proxies, redirects, cookies or compression), its
  fixed headers encoded once;
- each request written in one piece, the answer read with ``Content-Length``,
  ``Transfer-Encoding: chunked`` or until the connection ends, at most ``max_answer`` bytes of
  body (:data:`MAX_ANSWER` unless told: a stand-in, or a real server, never makes the caller
  buffer without bound);
- kept-alive connections reused newest first, at most ``max_connections`` requests in flight
  (the others wait their turn) and as many connections;
- a request whose connection ended (closed, reset) before any byte of an answer is sent once
  more, on a fresh connection; a second such end raises. Only send requests that are safe to
  repeat (reads, deletes, idempotent writes, create-only writes);
- a timeout per request, covering connect, write and read: :class:`LeanHttpError` with
  ``timed_out``.

:meth:`LeanHttpClient.stream` reads a long answer as it comes (an event stream), on a connection
of its own. It runs on asyncio. Every failure without an answer is a :class:`LeanHttpError`; any
answer, error statuses included, is a :class:`LeanResponse` (the caller judges the status).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from urllib.parse import urlsplit

from rock_core.http1 import (
    MAX_HEAD,
    Answer,
    Connection,
    Dropped,
    Encoded,
    Pool,
    ResponseHeaders,
    Timeout,
    TooLarge,
    encode_request,
    exchange,
    open_connection,
)

__all__ = [
    "MAX_ANSWER",
    "MAX_HEAD",
    "LeanHttpClient",
    "LeanHttpError",
    "LeanResponse",
    "LeanStream",
    "ResponseHeaders",
]

#: The largest answer body read by default: 256 MiB. Nomad's largest answers are listings: a
#: listing of allocations with their resources and task states (each task's last 10 events) is
#: about 10 KB an allocation, so 5,000 allocations take about 50 MB and the cap leaves five
#: times that; past it, the caller is told the answer's cap instead of buffering without bound.
MAX_ANSWER = 256 * 1024 * 1024

#: One answer (a whole one, its ``status_code``, ``reason``, ``headers``, ``content``).
LeanResponse = Answer


class LeanHttpError(Exception):
    """A request got no (whole) answer.

    :ivar dropped: the connection ended (closed, reset) before the whole answer.
    :ivar timed_out: no answer within the request's timeout.
    :ivar too_large: the answer's body is larger than the client's ``max_answer``.
    """

    def __init__(
        self,
        message: str,
        *,
        dropped: bool = False,
        timed_out: bool = False,
        too_large: bool = False,
    ) -> None:
        super().__init__(message)
        self.dropped = dropped
        self.timed_out = timed_out
        self.too_large = too_large


class LeanHttpClient:
    """Requests to the server at ``address`` (``http://host:port``, a path after it ignored).

    :param headers: sent with every request (``Host`` and ``Content-Length`` are added).
    :param timeout: seconds each request may take in all, unless it gives its own.
    :param max_connections: requests in flight at once, and connections kept.
    :param max_answer: the largest answer body read, in bytes (:data:`MAX_ANSWER`).
    :raises ValueError: an address that is not ``http://host[:port]``.
    """

    def __init__(
        self,
        address: str,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float,
        max_connections: int,
        max_answer: int = MAX_ANSWER,
    ) -> None:
        parts = urlsplit(address)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"expected http://host:port, got {address!r}")
        self.host = parts.hostname
        self.port = parts.port or 80
        self.timeout = timeout
        self.max_answer = max_answer
        host = parts.netloc.rpartition("@")[2]
        fixed = {"Host": host, **(headers or {})}
        self._fixed = "".join(f"{k}: {v}\r\n" for k, v in fixed.items())
        self._pool = Pool(max_connections)
        self._closed = False
        #: Connections opened so far (for tests and diagnostics).
        self.connections_opened = 0

    async def aclose(self) -> None:
        """Close the kept connections; requests are refused afterwards. Idempotent."""
        self._closed = True
        self._pool.close()

    async def request(
        self,
        method: str,
        target: str,
        *,
        body: bytes | None = None,
        content_type: str = "application/json",
        timeout: float | None = None,
    ) -> LeanResponse:
        """Send ``method target`` (``target``: the path and query, already encoded) with
        ``body``; the answer, whatever its status.

        :raises LeanHttpError: no answer (see the module docstring).
        """
        if self._closed:
            raise LeanHttpError("the client is closed")
        data = encode_request(method, target, self._fixed, body, content_type)
        limit = self.timeout if timeout is None else timeout
        loop = asyncio.get_running_loop()
        async with self._pool.slots:
            deadline = loop.time() + limit
            try:
                for attempt in range(2):
                    connection = self._pool.take()
                    if connection is None:
                        connection = await self._connect(deadline - loop.time())
                    try:
                        answer = await exchange(
                            connection,
                            data,
                            self.max_answer,
                            deadline - loop.time(),
                            no_body=method == "HEAD",
                        )
                    except Dropped as exc:
                        if exc.unanswered and not attempt:
                            continue  # a kept connection the server ended as it was reused
                        raise
                    self._pool.give_back(connection, not self._closed)
                    return answer
                raise AssertionError("unreachable")
            except Timeout:
                raise LeanHttpError(
                    f"no answer to {method} {target} in {limit:g}s", timed_out=True
                ) from None
            except (Dropped, TooLarge, Encoded) as exc:
                raise self._error(exc) from None

    @contextlib.asynccontextmanager
    async def stream(
        self, method: str, target: str, *, timeout: float | None = None
    ) -> AsyncIterator[LeanStream]:
        """Send ``method target`` on a connection of its own (not one of ``max_connections``)
        and give the answer once its head came, its body read as it comes (both waited for as
        long as they take: an event stream may be silent for long); the connection is closed
        when the block ends.

        :param timeout: seconds to connect (the client's timeout if not given).
        :raises LeanHttpError: no connection in time, or it ended before the answer's head.
        """
        if self._closed:
            raise LeanHttpError("the client is closed")
        data = encode_request(method, target, self._fixed, None)
        limit = self.timeout if timeout is None else timeout
        connection: Connection | None = None
        try:
            try:
                connection = await self._connect(limit)
                waiter = asyncio.get_running_loop().create_future()
                connection.begin_stream(data, self.max_answer, waiter)
                await waiter
            except Timeout:
                raise LeanHttpError(
                    f"could not connect to {self.host}:{self.port} in {limit:g}s", timed_out=True
                ) from None
            except (Dropped, Encoded) as exc:
                raise self._error(exc) from None
            yield LeanStream(connection, self.max_answer)
        finally:
            if connection is not None:
                connection.close()

    async def _connect(self, limit: float) -> Connection:
        if limit <= 0:
            raise Timeout("no time left to connect")
        connection = Connection(f"the server at {self.host}:{self.port}")
        try:
            await open_connection(self.host, self.port, connection, limit)
        except OSError as exc:
            raise LeanHttpError(
                f"cannot connect to {self.host}:{self.port}: {exc.strerror or exc}"
            ) from exc
        self.connections_opened += 1
        return connection

    def _error(self, exc: Exception) -> LeanHttpError:
        if isinstance(exc, TooLarge):
            said = "an answer" if exc.size is None else f"an answer of {exc.size} bytes"
            return LeanHttpError(
                f"{said}, more than the {exc.limit} bytes read (max_answer)", too_large=True
            )
        return LeanHttpError(str(exc), dropped=isinstance(exc, Dropped) and exc.ended)


class LeanStream:
    """An answer whose body is read as it comes (:meth:`LeanHttpClient.stream`)."""

    def __init__(self, connection: Connection, cap: int) -> None:
        assert connection.headers is not None
        self.status_code = connection.status
        self.reason = connection.reason
        self.headers: ResponseHeaders = connection.headers
        self._connection = connection
        self._cap = cap

    async def pieces(self) -> AsyncIterator[bytes]:
        """The body's bytes as they come (chunked, ``Content-Length`` or until the end)."""
        while True:
            try:
                pieces = await self._connection.next_pieces()
            except (Dropped, Encoded) as exc:
                raise LeanHttpError(
                    str(exc), dropped=isinstance(exc, Dropped) and exc.ended
                ) from None
            if not pieces:
                return
            for piece in pieces:
                yield piece

    async def aread(self) -> bytes:
        """The whole body, at most the client's ``max_answer`` bytes."""
        body = bytearray()
        async for piece in self.pieces():
            body += piece
            if len(body) > self._cap:
                raise LeanHttpError(
                    f"a streamed answer of more than {self._cap} bytes", too_large=True
                )
        return bytes(body)

    async def aiter_lines(self) -> AsyncIterator[str]:
        """The body's lines as they come (without their ``\\n`` or ``\\r\\n``; UTF-8), each
        at most the client's ``max_answer`` bytes."""
        pending: list[bytes] = []
        held = 0
        async for piece in self.pieces():
            pending.append(piece)
            if b"\n" not in piece:
                held += len(piece)
                if held > self._cap:
                    raise LeanHttpError(
                        f"a streamed line is longer than {self._cap} bytes", too_large=True
                    )
                continue
            *lines, rest = b"".join(pending).split(b"\n")
            pending, held = ([rest], len(rest)) if rest else ([], 0)
            for line in lines:
                yield line.rstrip(b"\r").decode("utf-8", errors="replace")
        if pending:
            yield b"".join(pending).decode("utf-8", errors="replace")
