"""Connections into a sandbox for the SDK and the CLI: a TCP port and a terminal.

Both drivers give the same two objects. Embedded, they ride on the rocklet directly (its
``GET /tunnel`` and ``GET /pty``); remote, on the admin's WebSockets (``/portforward`` and
``/shell``, see :mod:`rock.admin.portforward`).

* :class:`PortConnection`: a TCP connection to ``127.0.0.1:N`` in the sandbox. ``send``,
  ``send_eof`` (no more bytes from us), ``receive`` (``b""`` once the other side is done),
  ``aclose``.
* :class:`Shell`: a program on a pseudo-terminal. ``send`` keystrokes, ``resize``,
  ``receive`` output (``None`` once the program ended; then :attr:`Shell.exit_code`), ``aclose``
  (hangs the terminal up).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anyio
import anyio.abc

from rock_core.errors import InternalServerRockError, InvalidParameter, RockError, SandboxNotFound
from rock_core.models import ROCKLET_PORT
from rock_core.rocklet.terminal import DATA, EXIT, RESIZE, FrameReader, encode_frame, resize_payload

__all__ = ["PortConnection", "Shell", "check_port", "connect_websocket", "websocket_error"]

_CHUNK = 65536


def check_port(port: int) -> int:
    """``port`` if the SDK may reach it in a sandbox; :class:`InvalidParameter` if not."""
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise InvalidParameter(
            f"port: expected a port number 1..65535, got {port!r}", field="port", value=port
        )
    if port == ROCKLET_PORT:
        raise InvalidParameter(
            f"port: {ROCKLET_PORT} is the rocklet's own port", field="port", value=port
        )
    return port


class PortConnection:
    """A TCP connection to a port in a sandbox (see the module docstring)."""

    async def send(self, data: bytes) -> None:
        """Send bytes to the service."""
        raise NotImplementedError

    async def send_eof(self) -> None:
        """Tell the service no more bytes come (its answers still arrive)."""
        raise NotImplementedError

    async def receive(self) -> bytes:
        """The next bytes from the service; ``b""`` when it has no more."""
        raise NotImplementedError

    async def aclose(self) -> None:
        """Close the connection (idempotent)."""
        raise NotImplementedError

    async def __aenter__(self) -> PortConnection:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class Shell:
    """A program on a pseudo-terminal in a sandbox (see the module docstring)."""

    #: The program's exit code once :meth:`receive` returned ``None`` (128+N after signal N).
    exit_code: int | None = None

    async def send(self, data: bytes) -> None:
        """Send keystrokes (Ctrl-C is ``b"\\x03"``)."""
        raise NotImplementedError

    async def resize(self, rows: int, cols: int) -> None:
        """Change the terminal's window size (the program gets SIGWINCH)."""
        raise NotImplementedError

    async def receive(self) -> bytes | None:
        """The next output; ``None`` once the program ended (then :attr:`exit_code` is set)."""
        raise NotImplementedError

    async def aclose(self) -> None:
        """End the terminal (its programs get SIGHUP); idempotent."""
        raise NotImplementedError

    async def __aenter__(self) -> Shell:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


# ---------------------------------------------------------------------------------------------
# Embedded: on the rocklet's own streams


class TunnelConnection(PortConnection):
    """A :class:`PortConnection` over a rocklet tunnel; ``on_close`` runs once at close."""

    def __init__(
        self, stream: anyio.abc.ByteStream, on_close: Callable[[], None] | None = None
    ) -> None:
        self._stream = stream
        self._on_close = on_close

    async def send(self, data: bytes) -> None:
        await self._stream.send(data)

    async def send_eof(self) -> None:
        await self._stream.send_eof()

    async def receive(self) -> bytes:
        try:
            return await self._stream.receive(_CHUNK)
        except anyio.EndOfStream:
            return b""

    async def aclose(self) -> None:
        on_close, self._on_close = self._on_close, None
        try:
            await self._stream.aclose()
        finally:
            if on_close is not None:
                on_close()


class RockletShell(Shell):
    """A :class:`Shell` over the rocklet's terminal frames."""

    def __init__(
        self, stream: anyio.abc.ByteStream, on_close: Callable[[], None] | None = None
    ) -> None:
        self._stream = stream
        self._on_close = on_close
        self._reader = FrameReader()
        self._ready: list[tuple[bytes, bytes]] = []

    async def send(self, data: bytes) -> None:
        await self._stream.send(encode_frame(DATA, data))

    async def resize(self, rows: int, cols: int) -> None:
        await self._stream.send(encode_frame(RESIZE, resize_payload(rows, cols)))

    async def receive(self) -> bytes | None:
        while self.exit_code is None:
            while self._ready:
                kind, payload = self._ready.pop(0)
                if kind == DATA:
                    return payload
                if kind == EXIT:
                    self.exit_code = int.from_bytes(payload, "big", signed=True)
                    return None
            try:
                self._ready = self._reader.feed(await self._stream.receive(_CHUNK))
            except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                raise InternalServerRockError(
                    "the terminal broke off before its program ended", attempted="shell"
                ) from None
        return None

    async def aclose(self) -> None:
        on_close, self._on_close = self._on_close, None
        try:
            await self._stream.aclose()
        finally:
            if on_close is not None:
                on_close()


# ---------------------------------------------------------------------------------------------
# Remote: the admin's WebSockets (websockets' asyncio client)


def websocket_error(exc: BaseException, sandbox_id: str, attempted: str) -> RockError:
    """A rock error for a WebSocket that was refused or closed by the admin with a reason."""
    code = getattr(getattr(exc, "rcvd", None), "code", None)
    reason = getattr(getattr(exc, "rcvd", None), "reason", "") or str(exc)
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if status in (401, 403):
        return InvalidParameter(
            f"{attempted}: the admin refused the connection (HTTP {status}): check the API key",
            sandbox_id=sandbox_id,
            attempted=attempted,
        )
    if code == 1008 and "not found" in reason:
        return SandboxNotFound(reason, sandbox_id=sandbox_id, attempted=attempted)
    if code == 1008:
        return InvalidParameter(
            f"{attempted}: {reason}", sandbox_id=sandbox_id, attempted=attempted
        )
    return InternalServerRockError(
        f"{attempted}: {reason}", sandbox_id=sandbox_id, attempted=attempted
    )


async def connect_websocket(
    url: str, headers: dict[str, str], sandbox_id: str, attempted: str
) -> Any:
    """A websockets client connection to the admin; the admin's refusal as a rock error.

    The admin accepts, then closes with a code and reason when it cannot serve (ROCK's way):
    a connection closed before its first message is read here for that reason.
    """
    from websockets.asyncio.client import connect
    from websockets.exceptions import InvalidStatus, WebSocketException

    try:
        return await connect(
            url,
            additional_headers=headers,
            max_size=None,
            compression=None,
            open_timeout=30,
            ping_interval=None,
            proxy=None,
        )
    except InvalidStatus as exc:
        raise websocket_error(exc, sandbox_id, attempted) from None
    except (OSError, WebSocketException) as exc:
        raise InternalServerRockError(
            f"{attempted}: cannot reach the admin at {url}: {exc}",
            sandbox_id=sandbox_id,
            attempted=attempted,
        ) from None


class WebSocketConnection(PortConnection):
    """A :class:`PortConnection` over the admin's ``portforward`` WebSocket."""

    def __init__(self, ws: Any, sandbox_id: str) -> None:
        self._ws = ws
        self._sandbox_id = sandbox_id
        self._done = False
        self._first: bytes | None = None

    @classmethod
    async def open(cls, url: str, headers: dict[str, str], sandbox_id: str) -> WebSocketConnection:
        """Connect; a refused port (bad, or nothing listens) raises at once with the admin's reason."""
        from websockets.exceptions import ConnectionClosed

        ws = await connect_websocket(url, headers, sandbox_id, "port-forward")
        self = cls(ws, sandbox_id)
        # The admin accepts first and refuses by closing: wait a moment for such a close.
        try:
            with anyio.move_on_after(0.02):
                self._first = await ws.recv(decode=False)
                return self
        except ConnectionClosed as exc:
            raise websocket_error(exc, sandbox_id, "port-forward") from None
        self._first = None
        return self

    async def send(self, data: bytes) -> None:
        if data:
            await self._ws.send(data)

    async def send_eof(self) -> None:
        await self._ws.send(b"")

    async def receive(self) -> bytes:
        from websockets.exceptions import ConnectionClosed, ConnectionClosedOK

        if self._first is not None:
            data, self._first = self._first, None
        elif self._done:
            return b""
        else:
            try:
                data = await self._ws.recv(decode=False)
            except ConnectionClosedOK:
                return b""
            except ConnectionClosed as exc:
                raise websocket_error(exc, self._sandbox_id, "port-forward") from None
        if not data:
            self._done = True
        return bytes(data) if isinstance(data, (bytes, bytearray, memoryview)) else data.encode()

    async def aclose(self) -> None:
        await self._ws.close()


class WebSocketShell(Shell):
    """A :class:`Shell` over the admin's ``shell`` WebSocket."""

    def __init__(self, ws: Any, sandbox_id: str) -> None:
        self._ws = ws
        self._sandbox_id = sandbox_id

    async def send(self, data: bytes) -> None:
        await self._ws.send(bytes(data))

    async def resize(self, rows: int, cols: int) -> None:
        await self._ws.send(json.dumps({"resize": [int(rows), int(cols)]}))

    async def receive(self) -> bytes | None:
        from websockets.exceptions import ConnectionClosed

        while self.exit_code is None:
            try:
                message = await self._ws.recv()
            except ConnectionClosed as exc:
                raise websocket_error(exc, self._sandbox_id, "shell") from None
            if isinstance(message, (bytes, bytearray)):
                return bytes(message)
            try:
                self.exit_code = int(json.loads(message)["exit"])
            except (ValueError, KeyError, TypeError):
                continue
        return None

    async def aclose(self) -> None:
        await self._ws.close()
