"""The stand-in's HTTP connections write each answer in one piece: uvicorn's protocol (the one
its ``http="auto"`` picks) on a transport that gathers the writes of one turn of the event
loop and sends them together at its end (:class:`CoalescedWrites`).

uvicorn writes an answer's status line and headers, then its body, each with a ``send`` of its
own: two system calls an answer where one does, a twentieth of the stand-in's CPU in a burst of
starts (a loopback ``send`` delivers to the peer in the sender's time). The bytes, their order
and when a connection closes are as before; they leave at most one turn of the loop later.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

__all__ = ["CoalescedWrites", "coalescing_http_protocol"]


class CoalescedWrites:
    """A transport (every attribute but the writes is the wrapped one's) whose writes are
    gathered and sent in one ``write`` at the end of the event loop's turn: before a
    ``close`` or ``write_eof`` too, and dropped by ``abort`` or once the connection closes."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._pending: list[bytes] = []
        self._loop = asyncio.get_running_loop()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self._pending:
            self._loop.call_soon(self._flush)
        self._pending.append(bytes(data))

    def writelines(self, lines: Any) -> None:
        for data in lines:
            self.write(data)

    def _flush(self) -> None:
        pending, self._pending = self._pending, []
        if pending and not self._transport.is_closing():
            self._transport.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def write_eof(self) -> None:
        self._flush()
        self._transport.write_eof()

    def abort(self) -> None:
        self._pending = []
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def coalescing_http_protocol() -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol as ``http="auto"`` picks it (httptools when installed, else
    h11), on :class:`CoalescedWrites`: for ``uvicorn.Config(http=...)``."""
    base: type[Any]
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as base
    except ImportError:  # no httptools: uvicorn's own fallback
        from uvicorn.protocols.http.h11_impl import H11Protocol as base

    class CoalescingProtocol(base):  # type: ignore[misc, valid-type]
        """uvicorn's protocol writing through :class:`CoalescedWrites`."""

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            writes = CoalescedWrites(cast(asyncio.Transport, transport))
            super().connection_made(cast(asyncio.Transport, writes))

    return cast("type[asyncio.Protocol]", CoalescingProtocol)
