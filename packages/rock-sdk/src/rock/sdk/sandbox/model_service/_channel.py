"""The trainer's end of rock's duplex channel to a sandbox's model service.

One TCP connection per sandbox (:meth:`Sandbox.open_port`: embedded straight to the sandbox's
rocklet, remote through the admin's port-forward), on which the service writes each model call
as a JSON line the moment it is made and the trainer writes its answers. No request per call:
the call reaches the trainer, and the answer the agent, in one pass through the tunnel each.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from typing import Any

__all__ = ["MAX_LINE", "Channel"]

#: The longest line the trainer takes from a sandbox (a call's request, as JSON): the sandbox is
#: the agent's, so a line that never ends is cut here instead of growing in the trainer's memory.
MAX_LINE = 64 << 20
#: The longest answer head the service may send before its blank line.
_MAX_HEAD = 64 << 10


class Channel:
    """Calls from ``first`` on, each handed to ``deliver(message)`` (a dict: ``index`` with
    ``request_text``, or ``session_end``; ``{"closed": reason}`` when the connection ends)."""

    def __init__(
        self,
        connection: Any,
        deliver: Callable[[dict[str, Any]], None],
        max_line: int = MAX_LINE,
    ) -> None:
        self._connection = connection
        self._deliver = deliver
        self._max_line = max_line
        self._task: asyncio.Task[None] | None = None
        self.closed = False

    @classmethod
    async def open(
        cls,
        sandbox: Any,
        port: int,
        first: int,
        deliver: Callable[[dict[str, Any]], None],
        *,
        max_line: int = MAX_LINE,
    ) -> Channel:
        connection = await sandbox.open_port(port)
        head = f"GET /v1/rock/channel?index={first} HTTP/1.1\r\nHost: model-service\r\n\r\n"
        await connection.send(head.encode())
        channel = cls(connection, deliver, max_line)
        buffer = b""
        while b"\r\n\r\n" not in buffer:
            if len(buffer) > _MAX_HEAD:
                await connection.aclose()
                raise ConnectionError(f"the model service's answer head passed {_MAX_HEAD} bytes")
            data = await connection.receive()
            if not data:
                raise ConnectionError("the model service closed the channel before answering")
            buffer += data
        head_bytes, rest = buffer.split(b"\r\n\r\n", 1)
        status = head_bytes.split(b"\r\n", 1)[0]
        if b" 200 " not in status + b" ":
            raise ConnectionError(f"the model service refused the channel: {status.decode()!r}")
        channel._task = asyncio.get_running_loop().create_task(channel._read(rest))
        return channel

    async def _read(self, buffer: bytes) -> None:
        reason = "the model service closed the channel"
        pending = bytearray()  # the line being received (only new bytes are searched)
        data = buffer
        try:
            while True:
                *lines, rest = data.split(b"\n")
                if lines:
                    lines[0] = bytes(pending) + lines[0]
                    pending = bytearray()
                pending += rest
                for line in lines:
                    if line.strip():
                        self._deliver(json.loads(line))
                if len(pending) > self._max_line:
                    reason = f"the model service sent a line longer than {self._max_line} bytes"
                    break
                data = await self._connection.receive()
                if not data:
                    break
        except asyncio.CancelledError:
            reason = "closed by the trainer"
            raise
        except Exception as exc:  # the tunnel broke: say so to whoever waits
            reason = f"the channel broke: {exc!r}"
        finally:
            self.closed = True
            self._deliver({"closed": reason})

    async def send(self, message: dict[str, Any]) -> None:
        if self.closed:
            raise ConnectionError("the model service's channel is closed")
        await self._connection.send(json.dumps(message).encode() + b"\n")

    async def aclose(self) -> None:
        self.closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        with contextlib.suppress(Exception):
            await self._connection.aclose()
