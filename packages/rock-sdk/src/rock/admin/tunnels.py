"""How the admin reaches a sandbox's own ports: a tunnel through its rocklet
(:meth:`RockletClient.open_tunnel`) to ``127.0.0.1:N`` inside it (:func:`open_port`), what the
admin answers when it cannot (:class:`ProxyRefused`, with ROCK's statuses and WebSocket close
codes), and for HTTP a small HTTP/1.1 client over kept-alive tunnels (:class:`TunnelPool`;
:class:`Response` streams an answer's body, httptools parses it; :class:`UpstreamError` is the
status to answer when the service breaks off or does not answer). Used by
:mod:`rock.admin.proxy` and :mod:`rock.admin.portforward`.
"""

from __future__ import annotations

import select
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.abc
import httptools

from rock.admin._anyio_private import close_now
from rock_core.errors import InvalidParameter, RockError, RockletUnreachable
from rock_core.rocklet_client import RockletClient

__all__ = [
    "MAX_ANSWER_HEAD",
    "WS_INTERNAL",
    "WS_POLICY",
    "ProxyRefused",
    "Response",
    "TunnelPool",
    "UpstreamError",
    "anyio_close",
    "open_port",
]

# Close codes of a WebSocket (RFC 6455 section 7.4.1), as ROCK uses them.
WS_POLICY = 1008
WS_INTERNAL = 1011


class ProxyRefused(Exception):
    """A request the proxy does not carry: its HTTP status and ROCK's ``detail``."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail

    @property
    def ws_code(self) -> int:
        """The WebSocket close code for it: the caller's fault (1008) or the service's (1011)."""
        return WS_POLICY if self.status < 500 else WS_INTERNAL


async def open_port(client: RockletClient, port: int) -> anyio.abc.ByteStream:
    """A tunnel to ``port`` of the sandbox; :class:`ProxyRefused` (502) with the reason if none."""
    try:
        return await client.open_tunnel(port)
    except RockletUnreachable as exc:
        raise ProxyRefused(
            502, f"the rocklet of sandbox {client.sandbox_id} cannot be reached: {exc.message}"
        ) from None
    except InvalidParameter as exc:
        raise ProxyRefused(400, exc.message) from None
    except RockError as exc:
        reason = exc.message.split(": ", 1)[-1] if "nothing listens" in exc.message else exc.message
        raise ProxyRefused(502, f"sandbox {client.sandbox_id}, port {port}: {reason}") from None


class UpstreamError(Exception):
    """The service could not be reached, or broke off: the HTTP status to answer and why."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


class _Answer:
    """httptools' callbacks for one answer: status, headers, then body pieces as they come."""

    def __init__(self) -> None:
        self.parser: Any = None
        self.keep_alive = False
        self.headers: list[tuple[bytes, bytes]] = []
        self.headers_done = False
        self.done = False
        self.body: list[bytes] = []

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.headers_done = True
        # Asked now: once the message is complete the parser is ready for the next one.
        self.keep_alive = self.parser.should_keep_alive()

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.done = True


class _Connection:
    """One kept-alive tunnel to a service port, with the bytes it read past an answer."""

    __slots__ = ("stream", "sock", "used")

    def __init__(self, stream: anyio.abc.ByteStream) -> None:
        self.stream = stream
        inner = getattr(
            stream, "_stream", stream
        )  # a tunnel whose answer carried bytes wraps the socket stream
        try:
            self.sock: socket.socket | None = inner.extra(anyio.abc.SocketAttribute.raw_socket)
        except (anyio.TypedAttributeLookupError, AttributeError):
            self.sock = None
        self.used = 0.0

    def closed_by_service(self) -> bool:
        """Whether the idle connection has something to read: the service closed it."""
        if self.sock is None:
            return True
        try:
            return bool(select.select([self.sock], [], [], 0)[0])
        except (OSError, ValueError):
            return True


class Response:
    """A service's answer: status, headers, and :meth:`body` (an async iterator of pieces)."""

    def __init__(
        self,
        pool: TunnelPool,
        key: tuple[str, int],
        conn: _Connection,
        parser: Any,
        answer: _Answer,
        head: bool,
        timeout: float,
    ) -> None:
        self.status = parser.get_status_code()
        self.headers = answer.headers
        self._pool, self._key, self._conn, self._parser, self._answer = (
            pool,
            key,
            conn,
            parser,
            answer,
        )
        self._head, self._timeout = head, timeout
        self._finished = False
        # A body of known length is counted, not parsed: the copy's hot path is read, then send.
        self._length: int | None = None
        names = {k.lower(): v for k, v in answer.headers}
        if b"transfer-encoding" not in names and b"content-length" in names:
            try:
                self._length = int(names[b"content-length"])
            except ValueError:
                self._length = None

    async def body(self) -> AsyncIterator[bytes]:
        """The body as it arrives. :class:`UpstreamError` when the service breaks off."""
        answer = self._answer
        if self._head or self.status in (204, 304):
            self._finish(
                reusable=not self._head and answer.done
            )  # HEAD: the parser would wait for a body
            return
        if self._length is not None:
            remaining = self._length
            pieces, answer.body = answer.body, []
            for piece in pieces:
                remaining -= len(piece)
                yield piece
            while remaining > 0:
                data = await _read(self._conn, self._timeout)
                if not data:
                    await self.aclose()
                    raise UpstreamError(
                        502, "the service closed the connection before its answer ended"
                    )
                if len(data) > remaining:  # more than the answer: the connection is not reusable
                    data = data[:remaining]
                    answer.keep_alive = False
                remaining -= len(data)
                yield data
            self._finish(reusable=True)
            return
        while True:
            if answer.body:
                pieces, answer.body = answer.body, []
                for piece in pieces:
                    yield piece
            if answer.done:
                self._finish(reusable=True)
                return
            data = await _read(self._conn, self._timeout)
            if not data:  # a body delimited by the end of the connection ends here
                try:
                    self._parser.feed_data(b"")
                except Exception:  # noqa: BLE001 - httptools' own errors
                    pass
                if answer.body or answer.done:
                    continue
                await self.aclose()
                if _delimited_by_close(self.headers):
                    return
                raise UpstreamError(
                    502, "the service closed the connection before its answer ended"
                )
            _feed(self._parser, data)

    def _finish(self, reusable: bool) -> None:
        self._finished = True
        if reusable and self._answer.keep_alive:
            self._pool.release(self._key, self._conn)
        else:
            self._pool.discard(self._conn)

    async def aclose(self) -> None:
        """Let go of the connection (closed unless the answer was read to its end)."""
        if not self._finished:
            self._finished = True
            await self._conn.stream.aclose()


def _delimited_by_close(headers: list[tuple[bytes, bytes]]) -> bool:
    names = {k.lower() for k, _ in headers}
    return b"content-length" not in names and b"transfer-encoding" not in names


def _feed(parser: Any, data: bytes) -> None:
    try:
        parser.feed_data(data)
    except Exception as exc:  # noqa: BLE001 - httptools.HttpParserError and its kin
        raise UpstreamError(502, f"the service's answer is not valid HTTP/1.1: {exc}") from None


async def _read(conn: _Connection, timeout: float) -> bytes:
    try:
        with anyio.fail_after(timeout):
            return await conn.stream.receive(_READ)
    except anyio.EndOfStream:
        return b""
    except TimeoutError:
        await conn.stream.aclose()
        raise UpstreamError(504, f"no answer within {timeout:g}s (proxy_timeout)") from None
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
        raise UpstreamError(502, f"the service broke off: {exc or type(exc).__name__}") from None


_READ = 262144
#: The largest head (status line and headers) of a proxied service's answer.
MAX_ANSWER_HEAD = 256 * 1024


class TunnelPool:
    """Kept-alive HTTP/1.1 connections to sandboxes' ports, each a tunnel through a rocklet.

    Idle connections are kept per sandbox and port (at most ``max_idle`` each, for at most
    ``keepalive_expiry`` seconds); one the service closed meanwhile is dropped when picked.
    A request on a reused connection that fails before any answer is sent again once, on a new
    tunnel, when its body can be sent again (none). An answer whose head (status line and
    headers) passes ``max_head`` bytes is a 502: a sandbox's service cannot make the admin hold
    more than that and one read.
    """

    def __init__(
        self, max_idle: int = 32, keepalive_expiry: float = 30.0, max_head: int = MAX_ANSWER_HEAD
    ) -> None:
        self.max_head = max_head
        self.max_idle = max_idle
        self.keepalive_expiry = keepalive_expiry
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._swept = time.monotonic()

    def release(self, key: tuple[str, int], conn: _Connection) -> None:
        """Keep ``conn`` for the next request to ``key`` (and, now and then, close expired ones)."""
        now = time.monotonic()
        if now - self._swept > self.keepalive_expiry:
            self._sweep(now)
        idle = self._idle.setdefault(key, [])
        if len(idle) >= self.max_idle:
            self.discard(conn)
            return
        conn.used = time.monotonic()
        idle.append(conn)

    def _sweep(self, now: float) -> None:
        """Close the connections idle for longer than ``keepalive_expiry`` (of sandboxes no one
        asks for any more, too)."""
        self._swept = now
        for key in list(self._idle):
            keep = []
            for conn in self._idle[key]:
                if now - conn.used < self.keepalive_expiry:
                    keep.append(conn)
                else:
                    self.discard(conn)
            if keep:
                self._idle[key] = keep
            else:
                del self._idle[key]

    def discard(self, conn: _Connection) -> None:
        """Close ``conn`` now (synchronously: it is idle, nothing waits on it)."""
        anyio_close(conn.stream)

    def _idle_connection(self, key: tuple[str, int]) -> _Connection | None:
        idle = self._idle.get(key)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if now - conn.used < self.keepalive_expiry and not conn.closed_by_service():
                return conn
            self.discard(conn)
        return None

    async def request(
        self,
        client: RockletClient,
        port: int,
        method: str,
        target: str,
        headers: list[tuple[bytes, bytes]],
        body: AsyncIterator[bytes] | None,
        chunked: bool,
        timeout: float,
    ) -> Response:
        """Send a request to ``port`` of ``client``'s sandbox; the answer's head is read, its body streams.

        :raises UpstreamError: 502 (no connection, or the service broke off), 504 (no answer in time).
        """
        key = (str(client.sandbox_id), port)
        head = (
            f"{method} {target} HTTP/1.1\r\n".encode("latin-1")
            + b"".join(k + b": " + v + b"\r\n" for k, v in headers)
            + b"\r\n"
        )
        for attempt in (0, 1):
            conn = self._idle_connection(key) if attempt == 0 else None
            reused = conn is not None
            if conn is None:
                try:
                    with anyio.fail_after(min(timeout, 15.0)):
                        conn = _Connection(await open_port(client, port))
                except TimeoutError:
                    raise UpstreamError(
                        504, f"sandbox {client.sandbox_id}, port {port}: no connection in time"
                    ) from None
                except ProxyRefused as exc:
                    raise UpstreamError(exc.status, exc.detail) from None
            try:
                return await self._exchange(
                    conn, key, head, body, chunked, method == "HEAD", timeout
                )
            except _Stale:
                if reused and body is None:
                    continue
                raise UpstreamError(
                    502,
                    f"sandbox {client.sandbox_id}, port {port}: the service closed the connection",
                ) from None
        raise AssertionError("unreachable")

    async def _exchange(
        self,
        conn: _Connection,
        key: tuple[str, int],
        head: bytes,
        body: AsyncIterator[bytes] | None,
        chunked: bool,
        is_head: bool,
        timeout: float,
    ) -> Response:
        stream = conn.stream
        answered = False
        try:
            with anyio.fail_after(timeout):
                await stream.send(head)
            if body is not None:
                async for piece in body:
                    with anyio.fail_after(timeout):
                        await stream.send(
                            b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece
                        )
                if chunked:
                    await stream.send(b"0\r\n\r\n")
            answer = _Answer()
            parser = answer.parser = httptools.HttpResponseParser(answer)
            head_read = 0  # bytes read before the head ended: endless headers stop at max_head
            while not answer.headers_done:
                data = await _read(conn, timeout)
                if not data:
                    raise _Stale()
                answered = True
                head_read += len(data)
                _feed(parser, data)
                if not answer.headers_done and head_read > self.max_head:
                    raise UpstreamError(
                        502, f"the service's answer headers are larger than {self.max_head} bytes"
                    )
                if (
                    answer.headers_done
                    and 100 <= parser.get_status_code() < 200
                    and parser.get_status_code() != 101
                ):
                    # An interim answer (100 Continue): the real one follows.
                    rest = b"".join(answer.body)
                    answer = _Answer()
                    parser = answer.parser = httptools.HttpResponseParser(answer)
                    if rest:
                        _feed(parser, rest)
        except (_Stale, UpstreamError):
            await stream.aclose()
            raise
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            await stream.aclose()
            if not answered:
                raise _Stale() from None
            raise UpstreamError(
                502, f"the service broke off: {exc or type(exc).__name__}"
            ) from None
        except TimeoutError:
            await stream.aclose()
            raise UpstreamError(504, f"no answer within {timeout:g}s (proxy_timeout)") from None
        except BaseException:
            await stream.aclose()
            raise
        return Response(self, key, conn, parser, answer, is_head, timeout)

    async def aclose(self) -> None:
        """Close every idle connection."""
        for idle in self._idle.values():
            for conn in idle:
                self.discard(conn)
        self._idle.clear()


class _Stale(Exception):
    """A kept-alive connection the service had closed: nothing was answered on it."""


def anyio_close(stream: anyio.abc.ByteStream) -> None:
    """Close an idle ``stream`` from synchronous code: its transport, else its socket."""
    close_now(
        getattr(stream, "_stream", stream)
    )  # a tunnel whose answer carried bytes wraps the socket stream
