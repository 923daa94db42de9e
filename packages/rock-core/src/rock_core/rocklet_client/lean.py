"""A lean HTTP/1.1 exchange with rocklets on asyncio (:class:`LeanPools`), for the embedded SDK's
calls straight from the caller's loop.

httpx (with httpcore, h11 and anyio under it) costs about a millisecond of the caller's CPU per
rocklet call: URL and header objects, hooks, the pool's bookkeeping, a stream of events per
answer. A rocklet call needs little of it: one request written in one piece to a rocklet the
engine named (its unix socket or ``host:port``), one answer read into memory with its cap. This
module does that over a small :class:`asyncio.Protocol` per connection (no reader/writer pair,
no future per read), with kept-alive connections per rocklet address.

What it keeps from the httpx path (:meth:`RockletClient._request
<rock_core.rocklet_client.client.RockletClient._request>` maps its failures to the same rock
errors): the cap on every answer (:class:`~rock_core.rocklet_client.answers.TooLarge`, checked
on the declared length and as bytes come), no encoded answer (:class:`Encoded`), a connection
made within 5 seconds and the whole exchange within the call's timeout (:class:`Timeout`;
``None``: no bound), at most 64 connections per rocklet (the others wait their turn), and a
request never sent twice (a connection that ends without an answer is :class:`Dropped`). An
idle connection the rocklet closed is not reused. asyncio only: the caller checks its loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
from collections.abc import Callable
from typing import Any

from rock_core.rocklet_client.answers import TooLarge

__all__ = ["Answer", "Dropped", "Encoded", "LeanPools", "Timeout", "request_bytes"]

#: Seconds to make a connection, as the httpx path's ``connect=5.0``.
CONNECT_TIMEOUT = 5.0
#: Connections per rocklet at once (as the httpx path's unix-socket pools).
MAX_CONNECTIONS = 64
#: The longest head (status line and headers) of an answer.
MAX_HEAD = 65536


class Dropped(Exception):
    """No answer: the connection could not be made, or it ended before the whole answer."""


class Timeout(Exception):
    """No whole answer within the call's timeout (or no connection within 5 seconds)."""


class Encoded(Exception):
    """The answer is compressed (rock asks rocklets for no encoding)."""


class Answer:
    """A whole answer: :attr:`status_code`, :attr:`content`, :attr:`headers` (lower-case keys)."""

    __slots__ = ("content", "headers", "status_code")

    def __init__(self, status_code: int, headers: dict[str, str], content: bytes) -> None:
        self.status_code = status_code
        self.headers = headers
        self.content = content

    @property
    def text(self) -> str:
        """The body as text (UTF-8, undecodable bytes replaced)."""
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        """The body as JSON."""
        return json.loads(self.content)


def request_bytes(method: str, target: str, fixed: str, json_body: Any) -> bytes:
    """A whole request: ``fixed`` the header lines every request to its rocklet carries (each
    ending in CRLF), ``json_body`` encoded as httpx encodes ``json=`` (compact, UTF-8, no NaN)."""
    head = f"{method} {target} HTTP/1.1\r\n{fixed}"
    if json_body is None:
        length = "Content-Length: 0\r\n" if method in ("POST", "PUT", "PATCH") else ""
        return f"{head}{length}\r\n".encode("latin-1")
    body = json.dumps(json_body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    data = body.encode()
    return (f"{head}Content-Length: {len(data)}\r\nContent-Type: application/json\r\n\r\n").encode(
        "latin-1"
    ) + data


class _Connection(asyncio.Protocol):
    """One connection to a rocklet; reads one answer at a time into :attr:`buffer`."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.closed = False
        self.waiter: asyncio.Future[None] | None = None
        self.cap = 0
        self.head: tuple[int, dict[str, str], int] | None = None  # status, headers, body start
        self.length = -1  # -1: until the connection ends; -2: chunked
        self.keep = True
        self.answer: Answer | None = None
        self.chunk_at = 0  # a chunked answer: where its next chunk's size line begins
        self.pieces: list[bytes] = []  # ... and its chunks so far, ``received`` bytes in all
        self.received = 0
        #: Called with this connection once it has ended (its pool lets go of it).
        self.lost: Callable[[_Connection], None] | None = None

    # -- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.waiter is None or self.waiter.done():  # a rocklet that talks out of turn
            self.close()
            return
        self.buffer += data
        try:
            self._advance(False)
        except Exception as exc:  # noqa: BLE001 - the waiting call raises it
            self._fail(exc)

    def eof_received(self) -> bool:
        self._ended()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._ended()
        if self.lost is not None:
            self.lost(self)

    # -- one exchange ----------------------------------------------------------------------

    def begin(self, data: bytes, cap: int, waiter: asyncio.Future[None]) -> None:
        assert self.transport is not None
        self.buffer.clear()
        self.cap = cap
        self.head = None
        self.length = -1
        self.keep = True
        self.answer = None
        self.chunk_at = 0
        self.pieces = []
        self.received = 0
        self.waiter = waiter
        self.transport.write(data)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def _ended(self) -> None:
        was_closed, self.closed = self.closed, True
        if self.waiter is not None and not self.waiter.done():
            try:
                self._advance(True)
            except Exception as exc:  # noqa: BLE001 - the waiting call raises it
                self._fail(exc)
                return
            if not self.waiter.done():
                self._fail(Dropped("the rocklet ended the connection without a whole answer"))
        elif not was_closed and self.transport is not None:
            self.transport.close()

    def _fail(self, exc: Exception) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(exc)

    def _advance(self, ended: bool) -> None:
        """Parse what came; set the waiter's result once the answer is whole."""
        buffer = self.buffer
        if self.head is None:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(buffer) > MAX_HEAD:
                    raise Dropped(f"the answer's head is longer than {MAX_HEAD} bytes")
                return
            self._parse_head(bytes(buffer[:end]), end + 4)
        assert self.head is not None and self.waiter is not None
        status, headers, start = self.head
        if self.length >= 0:
            if len(buffer) - start < self.length:
                return
            body = bytes(buffer[start : start + self.length])
        elif self.length == -2:
            body_or_none = self._chunks(start)
            if body_or_none is None:
                return
            body = body_or_none
        else:
            if len(buffer) - start > self.cap:
                raise TooLarge(self.cap)
            if not ended:
                return
            body, self.keep = bytes(buffer[start:]), False
        self.answer = Answer(status, headers, body)
        self.waiter.set_result(None)

    def _parse_head(self, raw: bytes, start: int) -> None:
        lines = raw.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            raise Dropped(f"not an HTTP answer: {lines[0][:80]!r}")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            key, _, value = line.partition(":")
            key = key.strip().lower()
            known = headers.get(key)
            headers[key] = value.strip() if known is None else f"{known}, {value.strip()}"
        encoding = headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            raise Encoded(f"the answer is {encoding}-encoded; rock asks rocklets for no encoding")
        status = int(parts[1])
        connection = headers.get("connection", "").lower()
        self.keep = parts[0] != "HTTP/1.0" and "close" not in connection
        if "keep-alive" in connection:
            self.keep = True
        if status in (204, 304) or 100 <= status < 200:
            self.length = 0
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            self.length = -2
        elif "content-length" in headers:
            declared = headers["content-length"].strip()
            if not declared.isdigit():
                raise Dropped(f"a malformed Content-Length: {declared[:40]!r}")
            self.length = int(declared)
            if self.length > self.cap:
                raise TooLarge(self.cap)
        else:
            self.length = -1
        self.head = (status, headers, start)

    def _chunks(self, start: int) -> bytes | None:
        """The body of a chunked answer once it is whole, else ``None``; what came is parsed
        once (:attr:`chunk_at`, :attr:`pieces`), never again at the next read."""
        buffer = self.buffer
        at = max(self.chunk_at, start)
        while True:
            line_end = buffer.find(b"\r\n", at)
            if line_end < 0:
                break
            try:
                size = int(bytes(buffer[at:line_end]).split(b";", 1)[0].strip() or b"0", 16)
            except ValueError:
                raise Dropped("a malformed chunk size") from None
            if size == 0:
                if buffer.find(b"\r\n\r\n", line_end) < 0:
                    break  # the trailers are still coming
                return b"".join(self.pieces)
            if len(buffer) < line_end + 2 + size + 2:
                break
            self.received += size
            if self.received > self.cap:
                raise TooLarge(self.cap)
            self.pieces.append(bytes(buffer[line_end + 2 : line_end + 2 + size]))
            at = line_end + 2 + size + 2
        self.chunk_at = at
        if len(buffer) - at > self.cap + MAX_HEAD:  # one chunk declared larger than the cap
            raise TooLarge(self.cap)
        return None


class _Pool:
    __slots__ = ("idle", "slots", "users")

    def __init__(self) -> None:
        self.idle: list[_Connection] = []
        self.slots = asyncio.Semaphore(MAX_CONNECTIONS)
        self.users = 0  # exchanges under way or waiting for a slot


class LeanPools:
    """Kept-alive connections to rocklets, one pool per address (a unix socket's path, or
    ``(host, port)``), on the event loop that uses them.

    A pool is dropped once no exchange uses it and it keeps no connection: a sandbox removed
    ends its rocklet's connections, so a trainer that runs sandboxes by the million does not
    keep a pool for each.
    """

    def __init__(self) -> None:
        self._pools: dict[tuple[str, int], _Pool] = {}

    async def exchange(
        self, host: str, port: int, data: bytes, cap: int, timeout: float | None
    ) -> Answer:
        """Send ``data`` (a whole request) to the rocklet at ``host`` (a path: its unix socket)
        or ``host:port``; its answer, whatever its status, at most ``cap`` bytes of body.

        :raises Dropped: no connection, or it ended without a whole answer.
        :raises Timeout: no whole answer within ``timeout`` seconds (``None``: no bound).
        :raises TooLarge: the body is larger than ``cap``.
        :raises Encoded: the answer is compressed.
        """
        key = (host, port)
        pool = self._pools.get(key)
        if pool is None:
            pool = self._pools[key] = _Pool()
        pool.users += 1
        try:
            return await self._exchange(key, pool, data, cap, timeout)
        finally:
            pool.users -= 1
            self._let_go(key, pool)

    async def _exchange(
        self, key: tuple[str, int], pool: _Pool, data: bytes, cap: int, timeout: float | None
    ) -> Answer:
        host, port = key
        loop = asyncio.get_running_loop()
        async with pool.slots:
            connection = None
            while pool.idle:
                connection = pool.idle.pop()
                if not connection.closed:
                    break
                connection = None
            if connection is None:
                connection = await self._connect(loop, host, port)
                connection.lost = functools.partial(self._lost, key, pool)
            waiter: asyncio.Future[None] = loop.create_future()
            timer = None if timeout is None else loop.call_later(timeout, _expire, waiter)
            try:
                connection.begin(data, cap, waiter)
                await waiter
            except BaseException:
                connection.close()
                raise
            finally:
                if timer is not None:
                    timer.cancel()
                connection.waiter = None
            answer = connection.answer
            assert answer is not None
            if connection.keep and not connection.closed and self._pools.get(key) is pool:
                pool.idle.append(connection)
            else:
                connection.close()
            return answer

    async def _connect(self, loop: asyncio.AbstractEventLoop, host: str, port: int) -> _Connection:
        connection = _Connection()
        try:
            if host.startswith("/"):
                made = loop.create_unix_connection(lambda: connection, host)
            else:
                made = loop.create_connection(lambda: connection, host, port)
            await asyncio.wait_for(made, CONNECT_TIMEOUT)
        except (TimeoutError, asyncio.TimeoutError):  # noqa: UP041 - two classes on 3.10
            raise Timeout(f"no connection in {CONNECT_TIMEOUT:g}s") from None
        except OSError as exc:
            raise Dropped(f"cannot connect: {exc.strerror or exc!r}") from exc
        return connection

    def _lost(self, key: tuple[str, int], pool: _Pool, connection: _Connection) -> None:
        """A connection of ``pool`` ended: out of its idle list, and the pool let go of."""
        with contextlib.suppress(ValueError):
            pool.idle.remove(connection)
        self._let_go(key, pool)

    def _let_go(self, key: tuple[str, int], pool: _Pool) -> None:
        """Drop ``pool`` when nothing uses it and it keeps no connection."""
        if not pool.users and not pool.idle and self._pools.get(key) is pool:
            del self._pools[key]

    def forget(self, host: str, port: int) -> None:
        """Close the kept connections to ``host`` (``port`` 0 for a unix socket); harmless if none."""
        pool = self._pools.pop((host, port), None)
        if pool is not None:
            for connection in pool.idle:
                connection.close()
            pool.idle.clear()

    def close(self) -> None:
        """Close every kept connection."""
        for key in list(self._pools):
            self.forget(*key)


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(Timeout("no whole answer in time"))
