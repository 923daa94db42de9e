"""A small HTTP/1.1 server and client on asyncio streams (standard library only).

The server keeps connections alive, reads bodies by ``Content-Length`` or chunked, and answers
with a whole body or a chunked stream (server-sent events). The client sends one request per
connection (``Connection: close``) and reads the answer whole or chunk by chunk: what the proxy
needs to forward a call to an inference server, stream included.
"""

from __future__ import annotations

import asyncio
import json
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Optional, Union

Body = Union[bytes, AsyncIterator[bytes]]

_REASONS = {
    200: "OK",
    204: "No Content",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    499: "Client Closed Request",
    500: "Internal Server Error",
    502: "Bad Gateway",
    504: "Gateway Timeout",
}

MAX_BODY = 256 * 1024 * 1024


class Request:
    """One request: ``method``, ``path``, ``query`` (first value of each name), ``headers``
    (lower-case names), ``body``."""

    def __init__(self, method: str, target: str, headers: dict[str, str], body: bytes) -> None:
        parts = urllib.parse.urlsplit(target)
        self.method = method
        self.path = parts.path
        self.query = {k: v[0] for k, v in urllib.parse.parse_qs(parts.query).items()}
        self.headers = headers
        self.body = body

    def json(self) -> Any:
        return json.loads(self.body.decode("utf-8")) if self.body else None


class Response:
    """An answer: a status, headers and a body (bytes, or an async iterator of chunks)."""

    def __init__(
        self,
        status: int = 200,
        body: Body = b"",
        content_type: str = "application/json",
        headers: Optional[dict[str, str]] = None,
    ) -> None:
        self.status = status
        self.body = body
        self.headers = {"Content-Type": content_type, **(headers or {})}


class Takeover(Response):
    """A 200 head, then ``run(reader, writer)`` owns the connection (rock's duplex channel)."""

    def __init__(
        self, run: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
    ) -> None:
        super().__init__(200, b"", "application/x-ndjson")
        self.run = run


def json_response(data: Any, status: int = 200) -> Response:
    return Response(status, json.dumps(data, ensure_ascii=False).encode("utf-8"))


def error_response(status: int, message: str, kind: str = "error") -> Response:
    """OpenAI's error shape, with ROCK's ``detail`` beside it."""
    return json_response(
        {"error": {"message": message, "type": kind, "code": status}, "detail": message}, status
    )


Handler = Callable[[Request], Awaitable[Response]]


async def serve(handler: Handler, host: str, port: int) -> asyncio.base_events.Server:
    """Listen on ``host:port`` and answer each request with ``handler``."""

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request = await _read_request(reader)
                if request is None:
                    break
                try:
                    response = await handler(request)
                except Exception as exc:  # the handler's bug: answer, keep serving
                    response = error_response(500, f"internal error: {exc!r}", "internal_error")
                if isinstance(response, Takeover):
                    writer.write(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\n"
                        b"Connection: close\r\n\r\n"
                    )
                    await response.run(reader, writer)
                    break
                keep = request.headers.get("connection", "").lower() != "close"
                await _write_response(writer, response, keep)
                if not keep:
                    break
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(on_connection, host, port, limit=2**20)


async def _read_head(reader: asyncio.StreamReader) -> tuple[str, dict[str, str]]:
    first = await reader.readline()
    if not first:
        return "", {}
    headers: dict[str, str] = {}
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    return first.decode("latin-1").strip(), headers


async def _read_body(
    reader: asyncio.StreamReader, headers: dict[str, str], until_eof: bool
) -> bytes:
    if "chunked" in headers.get("transfer-encoding", "").lower():
        parts = []
        async for chunk in _chunks(reader):
            parts.append(chunk)
        return b"".join(parts)
    if "content-length" in headers:
        length = int(headers["content-length"])
        if length > MAX_BODY:
            raise ValueError("body too large")
        return await reader.readexactly(length)
    return await reader.read() if until_eof else b""


async def _chunks(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    while True:
        size_line = await reader.readline()
        if not size_line:
            return
        size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
        if size == 0:
            while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                pass
            return
        data = await reader.readexactly(size)
        await reader.readexactly(2)
        yield data


async def _read_request(reader: asyncio.StreamReader) -> Optional[Request]:
    line, headers = await _read_head(reader)
    if not line:
        return None
    method, target, _version = line.split(" ", 2)
    body = await _read_body(reader, headers, until_eof=False)
    return Request(method, target, headers, body)


async def _write_response(writer: asyncio.StreamWriter, response: Response, keep: bool) -> None:
    head = [f"HTTP/1.1 {response.status} {_REASONS.get(response.status, 'Status')}"]
    head += [f"{k}: {v}" for k, v in response.headers.items()]
    head.append(f"Connection: {'keep-alive' if keep else 'close'}")
    if isinstance(response.body, bytes):
        head.append(f"Content-Length: {len(response.body)}")
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + response.body)
        await writer.drain()
        return
    head.append("Transfer-Encoding: chunked")
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
    async for chunk in response.body:
        if chunk:
            writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            await writer.drain()
    writer.write(b"0\r\n\r\n")
    await writer.drain()


class UpstreamResponse:
    """An answer being read from an upstream server: ``status``, ``headers``, then the body with
    :meth:`read` or :meth:`iter_chunks` (each chunk waits at most ``read_timeout`` seconds)."""

    def __init__(
        self,
        status: int,
        headers: dict[str, str],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        read_timeout: Optional[float],
    ) -> None:
        self.status = status
        self.headers = headers
        self._reader = reader
        self._writer = writer
        self._timeout = read_timeout

    async def read(self) -> bytes:
        try:
            return await asyncio.wait_for(
                _read_body(self._reader, self.headers, until_eof=True), self._timeout
            )
        finally:
            self.close()

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        try:
            if "chunked" in self.headers.get("transfer-encoding", "").lower():
                chunks = _chunks(self._reader)
                while True:
                    try:
                        chunk = await asyncio.wait_for(chunks.__anext__(), self._timeout)
                    except StopAsyncIteration:
                        return
                    yield chunk
            else:
                left = int(self.headers.get("content-length", "-1"))
                while left != 0:
                    chunk = await asyncio.wait_for(self._reader.read(65536), self._timeout)
                    if not chunk:
                        return
                    left -= len(chunk) if left > 0 else 0
                    yield chunk
        finally:
            self.close()

    def close(self) -> None:
        self._writer.close()


async def request(
    method: str,
    url: str,
    body: bytes = b"",
    headers: Optional[dict[str, str]] = None,
    timeout: Optional[float] = None,
) -> UpstreamResponse:
    """Send one request and read the answer's head (at most ``timeout`` seconds in all; the body
    is then read with the same limit per read)."""
    parts = urllib.parse.urlsplit(url)
    secure = parts.scheme == "https"
    host = parts.hostname or "127.0.0.1"
    port = parts.port or (443 if secure else 80)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    context = None
    if secure:  # imported here: ssl costs the local-mode service memory it never uses
        import ssl

        context = ssl.create_default_context()

    async def start() -> UpstreamResponse:
        reader, writer = await asyncio.open_connection(host, port, ssl=context, limit=2**20)
        lines = [f"{method} {path} HTTP/1.1", f"Host: {parts.netloc}"]
        sent = {k.lower() for k in (headers or {})}
        for name, value in (headers or {}).items():
            if name.lower() not in ("host", "content-length", "connection", "transfer-encoding"):
                lines.append(f"{name}: {value}")
        if "content-type" not in sent and body:
            lines.append("Content-Type: application/json")
        lines += [f"Content-Length: {len(body)}", "Connection: close"]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        await writer.drain()
        status_line, answer_headers = await _read_head(reader)
        if not status_line:
            writer.close()
            raise ConnectionError(f"{url}: the server closed the connection without answering")
        status = int(status_line.split(" ", 2)[1])
        return UpstreamResponse(status, answer_headers, reader, writer, timeout)

    return await asyncio.wait_for(start(), timeout)
