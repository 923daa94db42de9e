"""A rocklet's raw connections: readiness probes on a fresh connection, and the upgraded
ones (a TCP tunnel into the sandbox, a pseudo-terminal) that bypass the HTTP client's pool."""

from __future__ import annotations

import asyncio
import json
import socket
import time
import typing
from urllib.parse import urlencode

import anyio
import anyio.abc

from rock_core.errors import InternalServerRockError, InvalidParameter, RockletUnreachable
from rock_core.rocklet.server import TOKEN_HEADER
from rock_core.rocklet.terminal import UPGRADE as PTY_UPGRADE
from rock_core.rocklet.tunnel import UPGRADE as TUNNEL_UPGRADE

__all__ = ["RockletConnections"]

_PROBE = b"GET /is_alive HTTP/1.1\r\nHost: rocklet\r\nConnection: close\r\n\r\n"

#: ``asyncio.timeout`` (Python 3.11 on), else ``None``.
_deadline: typing.Callable[[float], typing.AsyncContextManager[object]] | None = getattr(
    asyncio, "timeout", None
)


def _family(host: str) -> int | None:
    """The address family of ``host`` when it is a unix socket's path or an IP address, else
    ``None`` (a name, to be resolved)."""
    if host.startswith("/"):
        return socket.AF_UNIX
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, host)
        except OSError:
            continue
        return family
    return None


class _Probe(asyncio.Protocol):
    """One readiness probe on its connection: sends :data:`_PROBE` once connected, and sets
    ``done`` to the answer's head (up to its first line, or 256 bytes) or to what came before
    the connection closed (nothing: refused, or a proxy that accepted and dropped it)."""

    __slots__ = ("done", "head", "transport")

    def __init__(self, done: asyncio.Future[bytes]) -> None:
        self.done = done
        self.head = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        typing.cast(asyncio.WriteTransport, transport).write(_PROBE)  # uvloop's: no subclass

    def data_received(self, data: bytes) -> None:
        if self.done.done():  # the head is read: nothing more is kept until the close
            return
        self.head += data[:256]
        if (b"\r\n" in self.head or len(self.head) >= 256) and not self.done.done():
            self.done.set_result(self.head)

    def eof_received(self) -> bool:
        return False  # close

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(self.head)


class RockletConnections:
    """The raw connections of :class:`~rock_core.rocklet_client.RockletClient` (its base)."""

    host: str
    port: int
    token: str | None
    sandbox_id: str | None
    where: str

    async def probe(self, timeout: float = 1.0) -> bool:
        """Whether the rocklet answers ``GET /is_alive`` with 200: one request on a fresh connection,
        without the HTTP client's pool.

        For readiness polling, where most attempts fail (nothing listens yet, or Docker's proxy
        accepts and then drops the connection): such an attempt costs a connect and a read, a
        small fraction of a pooled client's request. On asyncio, with an address (not a name),
        the connection is the event loop's own transport and a small protocol (:class:`_Probe`):
        the connect, the write, the read and the close stay in the loop's own code (uvloop's C),
        about 45 us of CPU a probe against 80 us through ``loop.sock_*`` and 0.45 ms through
        anyio's ``connect_tcp`` (which resolves, races address families and makes a task group
        for each connection).
        """
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        family = _family(self.host) if loop is not None else None
        if loop is None or family is None:
            return await self._probe_streams(timeout)
        try:
            if _deadline is None:  # Python 3.10
                head = await asyncio.wait_for(self._probe_socket(loop, family), timeout)
            else:  # a deadline on this task: no task of the probe's own, as wait_for makes
                async with _deadline(timeout):
                    head = await self._probe_socket(loop, family)
        except (TimeoutError, OSError):
            return False
        return head.split(b"\r\n", 1)[0].split(b" ")[1:2] == [b"200"]

    async def _probe_socket(self, loop: asyncio.AbstractEventLoop, family: int) -> bytes:
        """The first line of the rocklet's answer to the probe (or what came before the
        connection closed), on a connection of the loop's own."""
        done: asyncio.Future[bytes] = loop.create_future()
        transport: asyncio.BaseTransport
        if family == socket.AF_UNIX:
            transport, _ = await loop.create_unix_connection(lambda: _Probe(done), self.host)
        else:
            transport, _ = await loop.create_connection(
                lambda: _Probe(done), self.host, self.port, family=family
            )
        try:
            return await done
        finally:  # also when the probe's time is up
            transport.close()

    async def _probe_streams(self, timeout: float) -> bool:
        """:meth:`probe` through anyio's streams (another event loop, or a host name)."""
        try:
            with anyio.fail_after(timeout):
                stream = await self.connect()
                async with stream:
                    await stream.send(_PROBE)
                    head = b""
                    while b"\r\n" not in head and len(head) < 256:
                        head += await stream.receive(256)
        except (OSError, TimeoutError, anyio.EndOfStream, anyio.BrokenResourceError):
            return False
        return head.split(b"\r\n", 1)[0].split(b" ")[1:2] == [b"200"]

    async def connect(self) -> anyio.abc.ByteStream:
        """A new raw connection to the rocklet (its unix socket or its TCP port)."""
        if self.host.startswith("/"):
            return await anyio.connect_unix(self.host)
        return await anyio.connect_tcp(self.host, self.port)

    async def open_tunnel(self, port: int, timeout: float = 15.0) -> anyio.abc.ByteStream:
        """A raw TCP connection to ``127.0.0.1:port`` inside the sandbox, through the rocklet
        (``GET /tunnel``, see :mod:`rock_core.rocklet.tunnel`); the caller closes it.

        :raises InvalidParameter: ``port`` is not a port number.
        :raises RockletUnreachable: the rocklet cannot be reached.
        :raises InternalServerRockError: nothing listens on ``port`` in the sandbox (the
            rocklet's HTTP 502), or the rocklet refused the tunnel.
        """
        attempted = f"tunnel to port {port}"
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise InvalidParameter(
                f"port: expected a port number 1..65535, got {port!r}",
                field="port",
                value=port,
                sandbox_id=self.sandbox_id,
            )
        return await self._upgrade(f"/tunnel?port={port}", TUNNEL_UPGRADE, attempted, timeout)

    async def open_pty(
        self,
        *,
        user: str | None = None,
        rows: int = 24,
        cols: int = 80,
        term: str | None = None,
        command: str | None = None,
        timeout: float = 15.0,
    ) -> anyio.abc.ByteStream:
        """A program on a new pseudo-terminal in the sandbox (``GET /pty``; the frames are
        :mod:`rock_core.rocklet.terminal`'s); the caller closes the stream, which hangs it up.

        :raises InvalidParameter: the rocklet refused a parameter (an unknown user, ...).
        :raises RockletUnreachable: the rocklet cannot be reached.
        """
        query = {"rows": str(rows), "cols": str(cols)}
        for name, value in (("user", user), ("term", term), ("command", command)):
            if value:
                query[name] = value
        return await self._upgrade(
            "/pty?" + urlencode(query), PTY_UPGRADE, "open a terminal", timeout
        )

    async def _upgrade(
        self, target: str, upgrade: str, attempted: str, timeout: float
    ) -> anyio.abc.ByteStream:
        """Send ``GET target`` with ``Upgrade: upgrade`` on a new connection; the connection once
        the rocklet switched protocols (a refusal raises, with the rocklet's reason)."""
        token = f"{TOKEN_HEADER}: {self.token}\r\n" if self.token else ""
        request = (
            f"GET {target} HTTP/1.1\r\nHost: rocklet\r\nConnection: Upgrade\r\n"
            f"Upgrade: {upgrade}\r\n{token}\r\n"
        ).encode("latin-1")
        stream: anyio.abc.ByteStream | None = None
        try:
            with anyio.fail_after(timeout):
                stream = await self.connect()
                await stream.send(request)
                head = b""
                while b"\r\n\r\n" not in head:
                    if len(head) > 65536:
                        raise anyio.BrokenResourceError(
                            "the rocklet's answer has no end of headers"
                        )
                    head += await stream.receive(65536)
        except (OSError, TimeoutError, anyio.EndOfStream, anyio.BrokenResourceError) as exc:
            if stream is not None:
                await stream.aclose()
            raise RockletUnreachable(
                f"the rocklet of sandbox {self.sandbox_id} at {self.where} is unreachable: {exc!r}",
                sandbox_id=self.sandbox_id,
                attempted=attempted,
            ) from exc
        head, _, rest = head.partition(b"\r\n\r\n")
        status_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        code = status_line.split(" ")[1] if " " in status_line else ""
        if code != "101":
            await stream.aclose()
            body = rest.decode("utf-8", "replace")
            try:
                detail = json.loads(body).get("detail", body)
            except (ValueError, AttributeError):
                detail = body
            if code == "401":
                detail = (
                    "rock's secret for it is wrong" if self.token else "rock holds no secret for it"
                )
            if code == "400" and upgrade == PTY_UPGRADE:
                raise InvalidParameter(
                    f"{attempted}: {detail}", sandbox_id=self.sandbox_id, attempted=attempted
                )
            raise InternalServerRockError(
                f"the rocklet of sandbox {self.sandbox_id} refused a {attempted}: {detail or status_line}",
                sandbox_id=self.sandbox_id,
                attempted=attempted,
            )
        return _Prefixed(stream, rest) if rest else stream

    async def wait_until_alive(
        self, timeout: float, *, first_delay: float = 0.002, max_delay: float = 0.05
    ) -> float:
        """Poll ``/is_alive`` with a tight, growing backoff until it answers; return the seconds waited.

        :raises TimeoutError: it did not answer within ``timeout`` seconds.
        """
        start = time.monotonic()
        delay = first_delay
        while True:
            remaining = timeout - (time.monotonic() - start)
            if remaining <= 0:
                raise TimeoutError(f"rocklet at {self.where} did not answer within {timeout:g}s")
            if await self.probe(timeout=min(max(remaining, 0.05), 2.0)):
                return time.monotonic() - start
            await anyio.sleep(min(delay, max(remaining, 0)))
            delay = min(delay * 1.5, max_delay)


class _Prefixed(anyio.abc.ByteStream):
    """A byte stream that first yields ``prefix`` (bytes that arrived with a tunnel's answer)."""

    def __init__(self, stream: anyio.abc.ByteStream, prefix: bytes) -> None:
        self._stream = stream
        self._prefix = prefix

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if self._prefix:
            data, self._prefix = self._prefix[:max_bytes], self._prefix[max_bytes:]
            return data
        return await self._stream.receive(max_bytes)

    async def send(self, item: bytes) -> None:
        await self._stream.send(item)

    async def send_eof(self) -> None:
        await self._stream.send_eof()

    async def aclose(self) -> None:
        await self._stream.aclose()
