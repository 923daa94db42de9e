"""A lean async HTTP/1.1 client for a plugin's hot calls to one plain-HTTP server
(:class:`LeanHttpClient`).

General clients (httpx) parse and merge a URL, build header and request objects, run hooks and
walk a pool's connections on every call: at thousands of calls a second that is most of the
caller's CPU. This one keeps what such calls need and nothing more:

- one server (``http://host:port``; no TLS, proxies, redirects, cookies or compression), its
  fixed headers encoded once;
- each request written in one piece (head and body), the answer read with
  ``Content-Length``, ``Transfer-Encoding: chunked`` or until the connection ends;
- kept-alive connections reused newest first, at most ``max_connections`` requests in flight
  (the others wait their turn) and as many connections;
- a request whose connection ended (closed, reset) before any answer is sent once more, on a
  fresh connection; a second such end raises. Only send requests that are safe to repeat
  (reads, deletes, idempotent writes, create-only writes);
- a timeout per request, covering connect, write and read: :class:`LeanHttpError` with
  ``timed_out``.

:meth:`LeanHttpClient.stream` reads a long answer as it comes (an event stream), on a connection
of its own. It runs on asyncio. Every failure without an answer is a :class:`LeanHttpError`; any answer,
error statuses included, is a :class:`LeanResponse` (the caller judges the status).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import urlsplit

_timeout = getattr(asyncio, "timeout", None)  # Python 3.11 on; 3.10 uses wait_for


__all__ = ["LeanHttpClient", "LeanHttpError", "LeanResponse", "LeanStream", "ResponseHeaders"]

#: The longest head (status line and headers) of an answer, in bytes.
MAX_HEAD = 65536


class LeanHttpError(Exception):
    """A request got no answer.

    :ivar dropped: the connection ended (closed, reset) before an answer.
    :ivar timed_out: no answer within the request's timeout.
    """

    def __init__(self, message: str, *, dropped: bool = False, timed_out: bool = False) -> None:
        super().__init__(message)
        self.dropped = dropped
        self.timed_out = timed_out


class ResponseHeaders(dict[str, str]):
    """An answer's headers, looked up in any case (kept in lower case; a repeated header's
    values joined by ``", "``)."""

    def get(self, key: str, default: Any = None) -> Any:
        return super().get(key.lower(), default)

    def __getitem__(self, key: str) -> str:
        return super().__getitem__(key.lower())

    def __contains__(self, key: object) -> bool:
        return super().__contains__(key.lower() if isinstance(key, str) else key)


class LeanResponse:
    """One answer: :attr:`status_code`, :attr:`reason`, :attr:`headers`, :attr:`content`."""

    __slots__ = ("content", "headers", "reason", "status_code")

    def __init__(
        self, status_code: int, reason: str, headers: ResponseHeaders, content: bytes
    ) -> None:
        self.status_code = status_code
        self.reason = reason
        self.headers = headers
        self.content = content

    @property
    def text(self) -> str:
        """The body as text (UTF-8, undecodable bytes replaced)."""
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The body as JSON."""
        return json.loads(self.content)

    def __repr__(self) -> str:
        return f"<LeanResponse [{self.status_code}]>"


class _Connection:
    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    def close(self) -> None:
        self.writer.close()


class _Dropped(Exception):
    """The connection ended before any byte of an answer."""


class LeanHttpClient:
    """Requests to the server at ``address`` (``http://host:port``, a path after it ignored).

    :param headers: sent with every request (``Host`` and ``Content-Length`` are added).
    :param timeout: seconds each request may take in all, unless it gives its own.
    :param max_connections: requests in flight at once, and connections kept.
    :raises ValueError: an address that is not ``http://host[:port]``.
    """

    def __init__(
        self,
        address: str,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float,
        max_connections: int,
    ) -> None:
        parts = urlsplit(address)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"expected http://host:port, got {address!r}")
        self.host = parts.hostname
        self.port = parts.port or 80
        self.timeout = timeout
        host = parts.netloc.rpartition("@")[2]
        fixed = {"Host": host, **(headers or {})}
        self._fixed = "".join(f"{k}: {v}\r\n" for k, v in fixed.items())
        self._slots = asyncio.Semaphore(max_connections)
        self._idle: list[_Connection] = []
        self._max_idle = max_connections
        self._closed = False
        #: Connections opened so far (for tests and diagnostics).
        self.connections_opened = 0

    async def aclose(self) -> None:
        """Close the kept connections; requests are refused afterwards. Idempotent."""
        self._closed = True
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()

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
        head = f"{method} {target} HTTP/1.1\r\n{self._fixed}"
        if body is not None:
            head += f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n"
            data = head.encode("latin-1") + body
        else:
            if method in ("POST", "PUT", "PATCH"):
                head += "Content-Length: 0\r\n"
            data = (head + "\r\n").encode("latin-1")
        limit = self.timeout if timeout is None else timeout
        async with self._slots:
            try:
                if _timeout is None:  # Python 3.10
                    return await asyncio.wait_for(self._exchange(data, method), limit)
                async with _timeout(limit):
                    return await self._exchange(data, method)
            except (TimeoutError, asyncio.TimeoutError):  # noqa: UP041 - two classes on 3.10
                raise LeanHttpError(
                    f"no answer to {method} {target} in {limit:g}s", timed_out=True
                ) from None

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
        data = f"{method} {target} HTTP/1.1\r\n{self._fixed}\r\n".encode("latin-1")
        limit = self.timeout if timeout is None else timeout
        connection: _Connection | None = None
        try:
            try:
                connection = await asyncio.wait_for(self._connect(), limit)
                connection.writer.write(data)
                status, reason, headers, _ = await _read_head(connection.reader)
            except (TimeoutError, asyncio.TimeoutError):  # noqa: UP041 - two classes on 3.10
                raise LeanHttpError(
                    f"could not connect to {self.host}:{self.port} in {limit:g}s", timed_out=True
                ) from None
            except (_Dropped, ConnectionError) as exc:
                raise LeanHttpError(
                    f"the server at {self.host}:{self.port} ended the connection without an "
                    f"answer ({type(exc).__name__})",
                    dropped=True,
                ) from None
            yield LeanStream(status, reason, headers, connection.reader)
        finally:
            if connection is not None:
                connection.close()

    async def _exchange(self, data: bytes, method: str) -> LeanResponse:
        for attempt in range(2):
            connection = None
            while self._idle:
                connection = self._idle.pop()
                if not connection.reader.at_eof():
                    break
                connection.close()  # the server closed it while it was idle
                connection = None
            if connection is None:
                connection = await self._connect()
            try:
                connection.writer.write(data)
                response, keep = await _read_response(connection.reader, method)
            except (_Dropped, ConnectionError) as exc:
                connection.close()
                if attempt:
                    raise LeanHttpError(
                        f"the server at {self.host}:{self.port} ended the connection without an "
                        f"answer ({type(exc).__name__})",
                        dropped=True,
                    ) from None
                continue
            except BaseException:
                connection.close()
                raise
            if keep and not self._closed and len(self._idle) < self._max_idle:
                self._idle.append(connection)
            else:
                connection.close()
            return response
        raise AssertionError("unreachable")

    async def _connect(self) -> _Connection:
        try:
            reader, writer = await asyncio.open_connection(self.host, self.port, limit=MAX_HEAD)
        except OSError as exc:
            raise LeanHttpError(
                f"cannot connect to {self.host}:{self.port}: {exc.strerror or exc}"
            ) from exc
        self.connections_opened += 1
        return _Connection(reader, writer)


async def _read_head(reader: asyncio.StreamReader) -> tuple[int, str, ResponseHeaders, bool]:
    """An answer's status, reason, headers and whether its connection may be kept."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            raise _Dropped from None
        raise LeanHttpError("the answer's head ended early", dropped=True) from None
    except asyncio.LimitOverrunError:
        raise LeanHttpError(f"the answer's head is longer than {MAX_HEAD} bytes") from None
    lines = head.decode("latin-1").split("\r\n")
    status_line = lines[0].split(" ", 2)
    if len(status_line) < 2 or not status_line[0].startswith("HTTP/"):
        raise LeanHttpError(f"not an HTTP answer: {lines[0][:80]!r}")
    try:
        status = int(status_line[1])
    except ValueError:
        raise LeanHttpError(f"not an HTTP answer: {lines[0][:80]!r}") from None
    headers = ResponseHeaders()
    for line in lines[1:]:
        if not line:
            continue
        key, _, value = line.partition(":")
        key = key.strip().lower()
        value = value.strip()
        known = dict.get(headers, key)
        dict.__setitem__(headers, key, value if known is None else f"{known}, {value}")
    keep = status_line[0] != "HTTP/1.0"
    connection = dict.get(headers, "connection", "").lower()
    if "close" in connection:
        keep = False
    elif "keep-alive" in connection:
        keep = True
    return status, status_line[2] if len(status_line) > 2 else "", headers, keep


async def _read_response(reader: asyncio.StreamReader, method: str) -> tuple[LeanResponse, bool]:
    """One answer and whether its connection may be kept."""
    status, reason, headers, keep = await _read_head(reader)
    try:
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            body = b""
        elif "chunked" in dict.get(headers, "transfer-encoding", "").lower():
            body = await _read_chunked(reader)
        elif "content-length" in headers:
            body = await reader.readexactly(int(dict.__getitem__(headers, "content-length")))
        else:
            body, keep = await reader.read(), False
    except asyncio.IncompleteReadError:
        raise LeanHttpError("the answer's body ended early", dropped=True) from None
    except (ValueError, asyncio.LimitOverrunError) as exc:
        raise LeanHttpError(f"a malformed answer: {exc}") from None
    return LeanResponse(status, reason, headers, body), keep


class LeanStream:
    """An answer whose body is read as it comes (:meth:`LeanHttpClient.stream`)."""

    def __init__(
        self, status_code: int, reason: str, headers: ResponseHeaders, reader: asyncio.StreamReader
    ) -> None:
        self.status_code = status_code
        self.reason = reason
        self.headers = headers
        self._reader = reader

    async def pieces(self) -> AsyncIterator[bytes]:
        """The body's bytes as they come (chunked, ``Content-Length`` or until the end)."""
        reader = self._reader
        try:
            if self.status_code in (204, 304) or 100 <= self.status_code < 200:
                return
            if "chunked" in dict.get(self.headers, "transfer-encoding", "").lower():
                while True:
                    line = await reader.readuntil(b"\r\n")
                    size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                    if size == 0:
                        return
                    yield await reader.readexactly(size)
                    await reader.readexactly(2)
            elif "content-length" in self.headers:
                left = int(dict.__getitem__(self.headers, "content-length"))
                while left > 0:
                    piece = await reader.read(min(left, 65536))
                    if not piece:
                        raise asyncio.IncompleteReadError(b"", left)
                    left -= len(piece)
                    yield piece
            else:
                while piece := await reader.read(65536):
                    yield piece
        except asyncio.IncompleteReadError:
            raise LeanHttpError("the answer's body ended early", dropped=True) from None
        except (ValueError, asyncio.LimitOverrunError) as exc:
            raise LeanHttpError(f"a malformed answer: {exc}") from None

    async def aread(self) -> bytes:
        """The whole body."""
        return b"".join([piece async for piece in self.pieces()])

    async def aiter_lines(self) -> AsyncIterator[str]:
        """The body's lines as they come (without their ``\\n`` or ``\\r\\n``; UTF-8)."""
        pending: list[bytes] = []
        async for piece in self.pieces():
            if b"\n" not in piece:
                pending.append(piece)
                continue
            pending.append(piece)
            *lines, rest = b"".join(pending).split(b"\n")
            pending = [rest] if rest else []
            for line in lines:
                yield line.rstrip(b"\r").decode("utf-8", errors="replace")
        if pending:
            yield b"".join(pending).decode("utf-8", errors="replace")


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    chunks: list[bytes] = []
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0].strip() or b"0", 16)
        if size == 0:
            while await reader.readuntil(b"\r\n") != b"\r\n":
                pass  # trailers
            return b"".join(chunks)
        chunks.append(await reader.readexactly(size))
        await reader.readexactly(2)
