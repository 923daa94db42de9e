"""WebSockets into a sandbox: the WebSocket proxy's upstream, TCP port-forward, and a terminal.

Routes (under :data:`~rock.admin.app.PREFIX`)::

    WS /sandboxes/{id}/portforward?port=N       raw TCP to 127.0.0.1:N in the sandbox (ROCK)
    WS /sandboxes/{id}/shell?user=&rows=&cols=&term=&command=    a terminal (rock)

**Port-forward.** Binary messages carry the TCP connection's bytes, both ways. An empty binary
message means "no more bytes from me" (a half-close: the other side's writes still pass); the
WebSocket closes (1000) when both sides are done, or at once when either side fails. A bad or
missing ``port`` closes with 1008, a port nothing listens on with 1011 (ROCK's codes), each
with the reason. ``rock sandbox port-forward`` is its client.

**Shell.** A program on a pseudo-terminal in the sandbox (the rocklet's ``GET /pty``, see
:mod:`rock_core.rocklet.terminal`). Binary messages are terminal bytes both ways (keystrokes in,
output out; Ctrl-C is the byte 0x03). Text messages are JSON: from the client
``{"resize": [rows, cols]}``; from the admin, last, ``{"exit": code}``, then a 1000 close.
``rock sandbox shell`` is its client.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import anyio.abc
from starlette.types import Receive, Scope, Send
from websockets.client import ClientProtocol
from websockets.frames import Opcode
from websockets.http11 import Response as HandshakeResponse
from websockets.protocol import State as WsState
from websockets.typing import Subprotocol
from websockets.uri import parse_uri

from rock.admin.proxy import SandboxAccess, check_port, refuse_websocket
from rock.admin.tunnels import WS_INTERNAL, ProxyRefused, open_port
from rock_core.errors import InvalidParameter, RockError, RockletUnreachable
from rock_core.rocklet.terminal import DATA, EXIT, RESIZE, FrameReader, encode_frame, resize_payload
from rock_core.rocklet_client import RockletClient

__all__ = ["SandboxSockets", "ServiceSocket"]

_CHUNK = 65536
# Codes a close frame may not carry (RFC 6455 section 7.4.1); sent on as a normal close.
_RESERVED_CODES = frozenset({1004, 1005, 1006, 1015})


def _close_code(code: Any) -> int:
    try:
        code = int(code)
    except (TypeError, ValueError):
        return 1000
    return 1000 if code in _RESERVED_CODES or not (1000 <= code < 5000) else code


class ServiceSocket:
    """A WebSocket client connection to a service in a sandbox, over a tunnel (websockets'
    sans-I/O client). :meth:`relay` carries an ASGI WebSocket's messages to it and back."""

    def __init__(
        self, stream: anyio.abc.ByteStream, protocol: ClientProtocol, subprotocol: str | None
    ) -> None:
        self.stream = stream
        self.protocol = protocol
        self.subprotocol = subprotocol
        self._write_lock = anyio.Lock()
        self._pending: list[Any] = []  # frames that came with the handshake's answer

    @classmethod
    async def connect(
        cls,
        client: RockletClient,
        port: int,
        target: str,
        headers: list[tuple[bytes, bytes]],
        subprotocols: list[str],
        *,
        max_message: int,
        timeout: float,
    ) -> ServiceSocket:
        """Open a tunnel to ``port`` and do the WebSocket handshake for ``target`` on it.

        :raises ProxyRefused: (502) nothing listens, or the service refused the handshake.
        """
        stream = await open_port(client, port)
        protocol = ClientProtocol(
            parse_uri(f"ws://localhost:{port}{target}"),
            subprotocols=[Subprotocol(p) for p in subprotocols] or None,
            max_size=max_message,
        )
        request = protocol.connect()
        for key, value in headers:
            name = key.decode("latin-1")
            if name.lower() != "host":
                request.headers[name] = value.decode("latin-1")
        protocol.send_request(request)
        socket = cls(stream, protocol, None)
        try:
            with anyio.fail_after(min(timeout, 30.0)):
                await socket._flush()
                response = None
                while response is None:
                    try:
                        data = await stream.receive(_CHUNK)
                    except anyio.EndOfStream:
                        protocol.receive_eof()
                        data = b""
                    if data:
                        protocol.receive_data(data)
                    for event in protocol.events_received():
                        if isinstance(event, HandshakeResponse):
                            response = event
                        else:
                            socket._pending.append(event)
                    if (not data or protocol.handshake_exc is not None) and response is None:
                        break  # closed, or an answer websockets refused (its headers' own limits)
        except (TimeoutError, OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            await stream.aclose()
            raise ProxyRefused(
                502, f"port {port}: the WebSocket handshake failed: {exc or type(exc).__name__}"
            ) from None
        if response is None or protocol.state is not WsState.OPEN:
            await stream.aclose()
            status = f"HTTP {response.status_code}" if response is not None else "no answer"
            if protocol.handshake_exc is not None:
                status += f": {protocol.handshake_exc}"
            raise ProxyRefused(
                502, f"port {port}: the service refused the WebSocket handshake ({status})"
            )
        socket.subprotocol = protocol.subprotocol
        return socket

    async def __aenter__(self) -> ServiceSocket:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stream.aclose()

    async def _flush(self) -> None:
        async with self._write_lock:
            for data in self.protocol.data_to_send():
                if data:
                    await self.stream.send(data)
                else:
                    try:
                        await self.stream.send_eof()
                    except (
                        NotImplementedError,
                        OSError,
                        anyio.BrokenResourceError,
                        anyio.ClosedResourceError,
                    ):
                        pass

    async def relay(self, receive: Receive, send: Send) -> None:
        """Carry messages between the ASGI WebSocket (accepted) and the service until one closes."""
        client_closed = False

        async with anyio.create_task_group() as tg:

            async def from_client() -> None:
                nonlocal client_closed
                while True:
                    message = await receive()
                    kind = message["type"]
                    if kind == "websocket.receive":
                        if message.get("bytes") is not None:
                            self.protocol.send_binary(message["bytes"])
                        else:
                            self.protocol.send_text((message.get("text") or "").encode())
                        await self._flush()
                    elif kind == "websocket.disconnect":
                        client_closed = True
                        if self.protocol.state is WsState.OPEN:
                            self.protocol.send_close(
                                _close_code(message.get("code")), message.get("reason") or ""
                            )
                            await self._flush()
                        with anyio.move_on_after(5):  # the service's close answer, then the end
                            await anyio.sleep_forever()
                        tg.cancel_scope.cancel()
                        return

            tg.start_soon(from_client)
            parts: list[bytes] = []
            text = False
            try:
                while True:
                    if self._pending:
                        data, events, self._pending = b"-", self._pending, []
                    else:
                        try:
                            data = await self.stream.receive(_CHUNK)
                        except anyio.EndOfStream:
                            data = b""
                        if data:
                            self.protocol.receive_data(data)
                        else:
                            self.protocol.receive_eof()
                        events = self.protocol.events_received()
                    for frame in events:
                        if frame.opcode in (Opcode.TEXT, Opcode.BINARY):
                            text = frame.opcode is Opcode.TEXT
                            parts = [frame.data]
                        elif frame.opcode is Opcode.CONT:
                            parts.append(frame.data)
                        else:
                            continue  # ping (answered by the protocol), pong, close (below)
                        if frame.fin:
                            payload = b"".join(parts)
                            parts = []
                            if not client_closed:
                                if text:
                                    await send({"type": "websocket.send", "text": payload.decode()})
                                else:
                                    await send({"type": "websocket.send", "bytes": payload})
                    await self._flush()  # pongs, the answer to a close
                    if self.protocol.state is WsState.CLOSED or not data:
                        break
            except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                pass
            if not client_closed:
                code, reason = WS_INTERNAL, "the service's connection broke off"
                if self.protocol.close_rcvd is not None:
                    code, reason = (
                        _close_code(self.protocol.close_rcvd.code),
                        self.protocol.close_rcvd.reason,
                    )
                await send({"type": "websocket.close", "code": code, "reason": reason})
            tg.cancel_scope.cancel()


class SandboxSockets:
    """The ``portforward`` and ``shell`` WebSockets (called by :class:`~rock.admin.proxy.SandboxProxy`)."""

    def __init__(self, access: SandboxAccess) -> None:
        self.access = access

    async def __call__(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        sandbox_id: str,
        route: str,
        tenant: str | None,
    ) -> None:
        message = await receive()
        if message["type"] != "websocket.connect":
            return
        query = _query(scope)
        try:
            if route == "portforward":
                port = check_port(query.get("port", ""), "port")
            else:
                options = _shell_options(query)
            client = self.access.rocklet(sandbox_id, tenant, route)
        except ProxyRefused as exc:
            await refuse_websocket(send, exc)
            return
        async with self.access.manager.call(sandbox_id):
            if route == "portforward":
                await self._forward(client, port, receive, send)
            else:
                await self._shell(client, options, receive, send)

    async def _forward(
        self, client: RockletClient, port: int, receive: Receive, send: Send
    ) -> None:
        try:
            stream = await open_port(client, port)
        except ProxyRefused as exc:
            await refuse_websocket(send, exc)
            return
        await send({"type": "websocket.accept"})
        async with stream, anyio.create_task_group() as tg:
            done = {"client": False, "service": False}
            client_closed = False

            def finished(side: str) -> None:
                done[side] = True
                if all(done.values()):
                    tg.cancel_scope.cancel()

            async def from_client() -> None:
                nonlocal client_closed
                while True:
                    message = await receive()
                    if message["type"] == "websocket.disconnect":
                        client_closed = True
                        tg.cancel_scope.cancel()
                        return
                    data = message.get("bytes")
                    if data is None:
                        await send(
                            {
                                "type": "websocket.close",
                                "code": 1003,
                                "reason": "port-forward carries binary messages only",
                            }
                        )
                        client_closed = True
                        tg.cancel_scope.cancel()
                        return
                    try:
                        if data:
                            await stream.send(data)
                        else:
                            await stream.send_eof()
                            finished("client")
                            return
                    except (
                        OSError,
                        anyio.BrokenResourceError,
                        anyio.ClosedResourceError,
                        NotImplementedError,
                    ):
                        tg.cancel_scope.cancel()
                        return

            tg.start_soon(from_client)
            broken = False
            try:
                while True:
                    data = await stream.receive(_CHUNK)
                    await send({"type": "websocket.send", "bytes": data})
            except anyio.EndOfStream:
                await send({"type": "websocket.send", "bytes": b""})
                finished("service")
            except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                broken = True
                tg.cancel_scope.cancel()
        if not client_closed:
            if broken:
                await send(
                    {
                        "type": "websocket.close",
                        "code": WS_INTERNAL,
                        "reason": "the connection in the sandbox broke off",
                    }
                )
            else:
                await send({"type": "websocket.close", "code": 1000})

    async def _shell(
        self, client: RockletClient, options: dict[str, Any], receive: Receive, send: Send
    ) -> None:
        try:
            stream = await client.open_pty(**options)
        except InvalidParameter as exc:
            await refuse_websocket(send, ProxyRefused(400, exc.message))
            return
        except RockletUnreachable as exc:
            await refuse_websocket(send, ProxyRefused(502, exc.message))
            return
        except RockError as exc:
            await refuse_websocket(send, ProxyRefused(502, exc.message))
            return
        await send({"type": "websocket.accept"})
        client_closed = False
        async with stream, anyio.create_task_group() as tg:

            async def from_client() -> None:
                nonlocal client_closed
                while True:
                    message = await receive()
                    if message["type"] == "websocket.disconnect":
                        client_closed = True
                        tg.cancel_scope.cancel()  # closing the stream hangs the terminal up
                        return
                    try:
                        if message.get("bytes") is not None:
                            await stream.send(encode_frame(DATA, message["bytes"]))
                            continue
                        control = json.loads(message.get("text") or "{}")
                        rows, cols = control["resize"]
                        await stream.send(
                            encode_frame(RESIZE, resize_payload(int(rows), int(cols)))
                        )
                    except (ValueError, KeyError, TypeError):
                        continue  # a control message this admin does not know: ignored
                    except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                        return

            tg.start_soon(from_client)
            reader = FrameReader()
            exit_code: int | None = None
            try:
                while exit_code is None:
                    for kind, payload in reader.feed(await stream.receive(_CHUNK)):
                        if kind == DATA:
                            await send({"type": "websocket.send", "bytes": payload})
                        elif kind == EXIT:
                            exit_code = int.from_bytes(payload, "big", signed=True)
            except (
                anyio.EndOfStream,
                OSError,
                anyio.BrokenResourceError,
                anyio.ClosedResourceError,
                ValueError,
            ):
                pass
            tg.cancel_scope.cancel()
        if not client_closed:
            if exit_code is None:
                await send(
                    {
                        "type": "websocket.close",
                        "code": WS_INTERNAL,
                        "reason": "the terminal broke off",
                    }
                )
            else:
                await send({"type": "websocket.send", "text": json.dumps({"exit": exit_code})})
                await send({"type": "websocket.close", "code": 1000})


def _query(scope: Scope) -> dict[str, str]:
    from urllib.parse import parse_qsl

    return dict(parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True))


def _shell_options(query: dict[str, str]) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for name in ("rows", "cols"):
        if query.get(name):
            try:
                value = int(query[name])
            except ValueError:
                raise ProxyRefused(400, f"{name}: expected a number, got {query[name]!r}") from None
            if not 1 <= value <= 65535:
                raise ProxyRefused(400, f"{name}: expected 1..65535, got {value}")
            options[name] = value
    for name in ("user", "term", "command"):
        if query.get(name):
            options[name] = query[name]
    return options
