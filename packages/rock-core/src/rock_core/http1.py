"""The HTTP/1.1 core of rock's two lean clients: the request's bytes (:func:`encode_request`),
the answer's reader (:class:`Connection`, an :class:`asyncio.Protocol`), kept-alive connections
(:class:`Pool`) and one exchange on a connection (:func:`exchange`).

General clients (httpx, with httpcore, h11 and anyio under it) cost about a millisecond of the
caller's CPU per call: URL and header objects, hooks, a pool's bookkeeping, a stream of events per
answer. Two of rock's hot paths need little of it, and build on this module with their own
policy: :class:`rock_core.lean_http.LeanHttpClient` (rock-nomad's calls to Nomad: a request that
got no byte of an answer is sent once more) and :class:`rock_core.rocklet_client.lean.LeanPools`
(the embedded SDK's rocklet calls: a request is never sent twice).

What both get here: a request written in one piece; an answer's head at most :data:`MAX_HEAD`
bytes; its body by ``Content-Length``, ``Transfer-Encoding: chunked`` (trailers at most
:data:`MAX_HEAD` bytes) or until the connection ends, at most ``cap`` bytes (:class:`TooLarge`,
checked on the declared length and as bytes come); no encoded answer (:class:`Encoded`: the
callers ask for none, and a compressed answer could unpack far past its cap); a kept-alive
connection reused newest first, never one the server ended or that carried a broken answer.
A body can also be read as it comes (:meth:`Connection.begin_stream`, an event stream), the
server paused while more than :data:`STREAM_BUFFER` bytes wait for the reader. asyncio only.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

__all__ = [
    "MAX_HEAD",
    "STREAM_BUFFER",
    "Answer",
    "Connection",
    "Dropped",
    "Encoded",
    "Pool",
    "ResponseHeaders",
    "Timeout",
    "TooLarge",
    "encode_request",
    "exchange",
    "open_connection",
]

#: The longest head (status line and headers) of an answer, and the longest trailers, in bytes.
MAX_HEAD = 65536
#: Bytes of a streamed body read ahead of its reader before the server is paused.
STREAM_BUFFER = 1 << 20

_UNTIL_END = -1  # a body that ends with its connection
_CHUNKED = -2
# A chunked body's state besides "bytes of the current chunk left" (> 0):
_SIZE_LINE, _CHUNK_END, _TRAILERS, _DONE = -1, -2, -3, -4


class TooLarge(Exception):
    """An answer passed its cap (``limit`` bytes); ``size``: the length it declared, if it
    declared one."""

    def __init__(self, limit: int, size: int | None = None) -> None:
        super().__init__(limit)
        self.limit = limit
        self.size = size


class Dropped(Exception):
    """No whole answer: the connection could not be made, it ended before the whole answer, or
    what came is no HTTP/1.1 answer.

    :ivar ended: the connection ended before the whole answer.
    :ivar unanswered: ... before any byte of it: the server may never have read the request.
    """

    def __init__(self, message: str, *, ended: bool = False, unanswered: bool = False) -> None:
        super().__init__(message)
        self.ended = ended
        self.unanswered = unanswered


class Timeout(Exception):
    """No whole answer (or no connection) in time."""


class Encoded(Exception):
    """The answer is compressed (rock's lean clients ask for no encoding)."""


class ResponseHeaders(dict[str, str]):
    """An answer's headers, looked up in any case (kept in lower case; a repeated header's
    values joined by ``", "``)."""

    def get(self, key: str, default: Any = None) -> Any:
        return super().get(key.lower(), default)

    def __getitem__(self, key: str) -> str:
        return super().__getitem__(key.lower())

    def __contains__(self, key: object) -> bool:
        return super().__contains__(key.lower() if isinstance(key, str) else key)


class Answer:
    """A whole answer: :attr:`status_code`, :attr:`reason`, :attr:`headers`, :attr:`content`."""

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
        return f"<Answer [{self.status_code}]>"


def encode_request(
    method: str,
    target: str,
    fixed: str,
    body: bytes | None,
    content_type: str = "application/json",
) -> bytes:
    """A whole request: ``target`` the path and query (encoded), ``fixed`` the header lines
    every request carries (each ending in CRLF). Without a body, a POST, PUT or PATCH says
    ``Content-Length: 0``."""
    head = f"{method} {target} HTTP/1.1\r\n{fixed}"
    if body is None:
        length = "Content-Length: 0\r\n" if method in ("POST", "PUT", "PATCH") else ""
        return f"{head}{length}\r\n".encode("latin-1")
    return (f"{head}Content-Length: {len(body)}\r\nContent-Type: {content_type}\r\n\r\n").encode(
        "latin-1"
    ) + body


class Connection(asyncio.Protocol):
    """One connection; reads one answer at a time, whole (:meth:`begin`) or as it comes
    (:meth:`begin_stream`). ``who`` names the server in the errors."""

    def __init__(self, who: str = "the server") -> None:
        self.who = who
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        #: The connection ended (or is being closed): never to be reused.
        self.closed = False
        self.waiter: asyncio.Future[None] | None = None
        self.busy = False  # an answer is awaited
        self.streaming = False
        self.cap = 0
        self.no_body = False
        self.headers: ResponseHeaders | None = None
        self.status = 0
        self.reason = ""
        self.at = 0  # where the unread body begins in :attr:`buffer`
        self.length = _UNTIL_END  # >= 0: the declared length
        self.chunk = _SIZE_LINE  # a chunked body: bytes of the current chunk left, or a state
        self.trailers = 0
        self.keep = True
        self.answer: Answer | None = None
        self.pieces: list[bytes] = []  # the body so far (whole), or not yet read (streamed)
        self.received = 0
        self.error: BaseException | None = None
        self.paused = False
        #: Called with this connection once it has ended (its pool lets go of it).
        self.lost: Callable[[Connection], None] | None = None

    # -- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if not self.busy:  # a server that talks out of turn
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

    def begin(
        self, data: bytes, cap: int, waiter: asyncio.Future[None], *, no_body: bool = False
    ) -> None:
        """Send ``data`` (a whole request); ``waiter`` is done once the whole answer, at most
        ``cap`` bytes of body, is in :attr:`answer` (or with the error). ``no_body``: the answer
        has none whatever it says (a HEAD's)."""
        self._reset(cap, waiter, no_body)
        assert self.transport is not None
        self.transport.write(data)

    def begin_stream(self, data: bytes, cap: int, waiter: asyncio.Future[None]) -> None:
        """Send ``data``; ``waiter`` is done once the answer's head came (:attr:`status`,
        :attr:`reason`, :attr:`headers`); then :meth:`next_pieces` gives its body as it comes.
        ``cap`` bounds nothing here (the reader bounds what it keeps)."""
        self._reset(cap, waiter, False)
        self.streaming = True
        assert self.transport is not None
        self.transport.write(data)

    async def next_pieces(self) -> list[bytes]:
        """A streamed body's bytes that came since the last call (waited for as long as it
        takes); ``[]`` once it is whole.

        :raises Dropped: the connection ended before the whole body, or it is malformed.
        """
        while True:
            if self.pieces:
                pieces, self.pieces, self.received = self.pieces, [], 0
                if self.paused and self.transport is not None and not self.closed:
                    self.paused = False
                    self.transport.resume_reading()
                return pieces
            if self.error is not None:
                raise self.error
            if not self.busy:
                return []
            self.waiter = asyncio.get_running_loop().create_future()
            await self.waiter

    def close(self) -> None:
        """Close the connection (harmless when closed)."""
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def _reset(self, cap: int, waiter: asyncio.Future[None], no_body: bool) -> None:
        # (a chunked or streamed body's own state is set when its head comes: _parse_head)
        self.buffer.clear()
        self.busy = True
        self.streaming = False
        self.cap = cap
        self.no_body = no_body
        self.headers = None
        self.length = _UNTIL_END
        self.answer = None
        self.error = None
        self.waiter = waiter

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def _ended(self) -> None:
        was_closed, self.closed = self.closed, True
        if self.busy and self.error is None:
            try:
                self._advance(True)
            except Exception as exc:  # noqa: BLE001 - the waiting call raises it
                self._fail(exc)
                return
            if self.busy:
                self._fail(self._cut())
        elif not was_closed and self.transport is not None:
            self.transport.close()

    def _cut(self) -> Dropped:
        """The error of a connection that ended before the whole answer."""
        if self.headers is None and not self.buffer:
            return Dropped(
                f"{self.who} ended the connection without an answer", ended=True, unanswered=True
            )
        part = "head" if self.headers is None else "body"
        return Dropped(
            f"the answer's {part} ended early ({self.who} ended the connection)", ended=True
        )

    def _fail(self, exc: BaseException) -> None:
        self.close()
        self.busy = False
        if self.error is None:
            self.error = exc
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(exc)

    def _advance(self, ended: bool) -> None:
        """Parse what came; once the answer is whole, :attr:`answer` it and wake the waiter."""
        buffer = self.buffer
        if self.headers is None:
            end = buffer.find(b"\r\n\r\n")
            if end < 0 or end > MAX_HEAD:
                if len(buffer) > MAX_HEAD:
                    raise Dropped(f"the answer's head is longer than {MAX_HEAD} bytes")
                return
            self._parse_head(bytes(buffer[:end]))
            self.at = end + 4
            if self.streaming:
                self._wake()  # the head came
        if self.streaming:
            self._stream(ended)
            return
        length = self.length
        at = self.at
        if length >= 0:
            if len(buffer) - at < length:
                return
            body = bytes(buffer[at : at + length])
            if len(buffer) > at + length:
                self.keep = False  # bytes past the answer: the connection is out of step
        elif length == _CHUNKED:
            if not self._chunks():
                return
            body = b"".join(self.pieces)
            if len(buffer) > self.at:
                self.keep = False
        else:
            if len(buffer) - at > self.cap:
                raise TooLarge(self.cap)
            if not ended:
                return
            body, self.keep = bytes(buffer[at:]), False
        self.busy = False
        self.answer = Answer(self.status, self.reason, self.headers, body)  # type: ignore[arg-type]
        self._wake()

    def _stream(self, ended: bool) -> None:
        """A streamed body: what came of it to :attr:`pieces` for the reader."""
        buffer, at = self.buffer, self.at
        done = False
        if self.length == _CHUNKED:
            done = self._chunks()
        elif self.length >= 0:
            take = min(self.length, len(buffer) - at)
            if take:
                self._piece(bytes(buffer[at : at + take]))
                self.length -= take
                self.at = at + take
            done = self.length == 0
        else:
            if len(buffer) > at:
                self._piece(bytes(buffer[at:]))
                self.at = len(buffer)
            done = ended
        del buffer[: self.at]
        self.at = 0
        if done:
            self.busy = False
        if self.pieces or done:
            self._wake()
        if (
            self.received > STREAM_BUFFER
            and not self.paused
            and not done
            and self.transport is not None
        ):
            self.paused = True
            self.transport.pause_reading()

    def _piece(self, piece: bytes) -> None:
        self.received += len(piece)
        if self.received > self.cap and not self.streaming:
            raise TooLarge(self.cap)
        self.pieces.append(piece)

    def _parse_head(self, raw: bytes) -> None:
        lines = raw.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            raise Dropped(f"not an HTTP answer: {lines[0][:80]!r}")
        fields: dict[str, str] = {}  # a plain dict while it is filled (ResponseHeaders' own
        for line in lines[1:]:  # lookups cost a Python call each)
            key, _, value = line.partition(":")
            key = key.strip().lower()
            known = fields.get(key)
            fields[key] = value.strip() if known is None else f"{known}, {value.strip()}"
        fields.pop("", None)  # empty lines
        encoding = fields.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            raise Encoded(f"the answer is {encoding}-encoded; rock asks for no encoding")
        status = int(parts[1])
        connection = fields.get("connection", "").lower()
        self.keep = parts[0] != "HTTP/1.0" and "close" not in connection
        if "keep-alive" in connection:
            self.keep = True
        if self.no_body or status in (204, 304) or 100 <= status < 200:
            self.length = 0
        elif "chunked" in fields.get("transfer-encoding", "").lower():
            self.length = _CHUNKED
            self.chunk = _SIZE_LINE
            self.trailers = 0
        elif "content-length" in fields:
            declared = fields["content-length"].strip()
            if not declared.isdigit():
                raise Dropped(f"a malformed Content-Length: {declared[:40]!r}")
            self.length = int(declared)
            if self.length > self.cap and not self.streaming:
                raise TooLarge(self.cap, self.length)
        if self.length == _CHUNKED or self.streaming:
            self.pieces = []
            self.received = 0
        self.status = status
        self.reason = parts[2] if len(parts) > 2 else ""
        self.headers = ResponseHeaders(fields)

    def _chunks(self) -> bool:
        """Take the chunks that came (their data to :attr:`pieces`), from :attr:`at` on;
        whether the chunked body is whole (its trailers too). What came is parsed once."""
        buffer, at, chunk = self.buffer, self.at, self.chunk
        try:
            while True:
                if chunk > 0:  # the current chunk's data
                    take = min(chunk, len(buffer) - at)
                    if take <= 0:
                        return False
                    self._piece(bytes(buffer[at : at + take]))
                    at += take
                    chunk -= take
                    if chunk:
                        return False
                    chunk = _CHUNK_END
                elif chunk == _SIZE_LINE:
                    end = buffer.find(b"\r\n", at)
                    if end < 0:
                        if len(buffer) - at > MAX_HEAD:
                            raise Dropped("a malformed chunk size")
                        return False
                    try:
                        size = int(bytes(buffer[at:end]).split(b";", 1)[0].strip() or b"0", 16)
                    except ValueError:
                        raise Dropped("a malformed chunk size") from None
                    if size < 0:
                        raise Dropped("a malformed chunk size")
                    if self.received + size > self.cap and not self.streaming:
                        raise TooLarge(self.cap)
                    at = end + 2
                    chunk = size or _TRAILERS
                elif chunk == _CHUNK_END:
                    if len(buffer) - at < 2:
                        return False
                    if buffer[at : at + 2] != b"\r\n":
                        raise Dropped("a chunk longer than its size")
                    at += 2
                    chunk = _SIZE_LINE
                elif chunk == _TRAILERS:  # trailer lines, then an empty line
                    end = buffer.find(b"\r\n", at)
                    seen = self.trailers + (len(buffer) if end < 0 else end + 2) - at
                    if seen > MAX_HEAD:
                        raise Dropped(f"the answer's trailers are longer than {MAX_HEAD} bytes")
                    if end < 0:
                        return False
                    self.trailers = seen
                    if end == at:
                        chunk = _DONE
                    at = end + 2
                else:
                    return True
        finally:
            self.at, self.chunk = at, chunk


class Pool:
    """Kept-alive connections to one server, reused newest first, and the slots of the
    exchanges in flight at once (``size``; as many connections kept)."""

    __slots__ = ("idle", "max_idle", "slots", "users")

    def __init__(self, size: int) -> None:
        self.idle: list[Connection] = []
        self.slots = asyncio.Semaphore(size)
        self.max_idle = size
        self.users = 0  # exchanges under way or waiting for a slot (for the owner's count)

    def take(self) -> Connection | None:
        """The newest kept connection the server did not end, if any."""
        idle = self.idle
        while idle:
            connection = idle.pop()
            if not connection.closed:
                return connection
        return None

    def give_back(self, connection: Connection, keep: bool = True) -> None:
        """Keep ``connection`` for the next exchange when it may be (its answer allowed it,
        it is open, there is room, and ``keep``); else close it."""
        if keep and connection.keep and not connection.closed and len(self.idle) < self.max_idle:
            self.idle.append(connection)
        else:
            connection.close()

    def close(self) -> None:
        """Close the kept connections."""
        idle, self.idle = self.idle, []
        for connection in idle:
            connection.close()


async def open_connection(
    host: str, port: int, connection: Connection, timeout: float | None
) -> Connection:
    """``connection`` made to ``host`` (a path: its unix socket) or ``host:port``.

    :raises Timeout: not made within ``timeout`` seconds (``None``: no bound).
    :raises OSError: refused, unreachable, no such socket.
    """
    loop = asyncio.get_running_loop()
    if host.startswith("/"):
        made = loop.create_unix_connection(lambda: connection, host)
    else:
        made = loop.create_connection(lambda: connection, host, port)
    try:
        await asyncio.wait_for(made, timeout)
    except (TimeoutError, asyncio.TimeoutError) as exc:  # noqa: UP041 - two classes on 3.10
        if getattr(exc, "errno", None):
            raise  # the system's own (ETIMEDOUT): an OSError like a refusal
        raise Timeout(f"no connection in {timeout:g}s") from None
    return connection


async def exchange(
    connection: Connection, data: bytes, cap: int, timeout: float | None, *, no_body: bool = False
) -> Answer:
    """Send ``data`` (a whole request) on ``connection``; its whole answer, at most ``cap``
    bytes of body. On any failure the connection is closed.

    :raises Timeout: no whole answer within ``timeout`` seconds (``None``: no bound).
    :raises Dropped: the connection ended before the whole answer, or it is malformed.
    :raises TooLarge: the body is larger than ``cap``.
    :raises Encoded: the answer is compressed.
    """
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[None] = loop.create_future()
    timer = None if timeout is None else loop.call_later(timeout, _expire, waiter)
    try:
        connection.begin(data, cap, waiter, no_body=no_body)
        await waiter
    except BaseException:
        connection.busy = False
        connection.close()
        raise
    finally:
        if timer is not None:
            timer.cancel()
        connection.waiter = None
    answer = connection.answer
    assert answer is not None
    return answer


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(Timeout("no whole answer in time"))
