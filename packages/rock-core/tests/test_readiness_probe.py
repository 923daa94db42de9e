"""The engine's readiness probe (``RockletClient.probe``) against real servers on loopback and on a
unix socket: ready only when the answer's status line says 200; not ready when nothing listens,
when the connection is accepted and dropped, when the answer is another status, never comes or
never ends its first line; and an answer split over several writes is read whole."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import httpx
import pytest

from rock_core.rocklet_client import RockletClient

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as client:
        yield client


async def _serve(handler: Handler, unix: Path | None = None) -> asyncio.Server:
    async def guarded(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await handler(reader, writer)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    if unix is not None:
        return await asyncio.start_unix_server(guarded, str(unix))
    return await asyncio.start_server(guarded, "127.0.0.1", 0)


def _answer(*parts: bytes, pause: float = 0.0, then_wait: float = 0.0) -> Handler:
    """A server that reads the probe's request, writes ``parts`` (``pause`` apart), waits
    ``then_wait`` and closes."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        for part in parts:
            writer.write(part)
            await writer.drain()
            await asyncio.sleep(pause)
        await asyncio.sleep(then_wait)

    return handler


async def _probe_tcp(http: httpx.AsyncClient, handler: Handler, timeout: float = 2.0) -> bool:
    server = await _serve(handler)
    port = server.sockets[0].getsockname()[1]
    async with server:
        return await RockletClient(http, "127.0.0.1", port).probe(timeout)


@pytest.mark.anyio
async def test_a_200_is_ready_over_tcp_and_over_a_unix_socket(
    http: httpx.AsyncClient, tmp_path: Path
) -> None:
    ok = _answer(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    assert await _probe_tcp(http, ok)
    path = tmp_path / "rocklet.sock"
    server = await _serve(ok, unix=path)
    async with server:
        assert await RockletClient(http, str(path), 0).probe(2.0)


@pytest.mark.anyio
async def test_a_status_line_split_over_several_writes_is_read_whole(
    http: httpx.AsyncClient,
) -> None:
    split = _answer(b"HTT", b"P/1.1 2", b"00 OK\r\n", b"Content-Length: 0\r\n\r\n", pause=0.05)
    assert await _probe_tcp(http, split)


@pytest.mark.anyio
async def test_another_status_is_not_ready(http: httpx.AsyncClient) -> None:
    assert not await _probe_tcp(http, _answer(b"HTTP/1.1 503 Busy\r\nContent-Length: 0\r\n\r\n"))
    assert not await _probe_tcp(http, _answer(b"HTTP/1.1 2000 OK\r\n\r\n"))


@pytest.mark.anyio
async def test_accepted_then_dropped_is_not_ready(http: httpx.AsyncClient) -> None:
    async def drop(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        return None  # closed at once, as Docker's proxy does before the rocklet listens

    assert not await _probe_tcp(http, drop)


@pytest.mark.anyio
async def test_nothing_listening_is_not_ready(http: httpx.AsyncClient) -> None:
    server = await _serve(_answer(b""))
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    assert not await RockletClient(http, "127.0.0.1", port).probe(2.0)


@pytest.mark.anyio
async def test_an_answer_that_never_comes_is_not_ready_once_the_probe_times_out(
    http: httpx.AsyncClient,
) -> None:
    loop = asyncio.get_running_loop()
    began = loop.time()
    assert not await _probe_tcp(http, _answer(then_wait=30.0), timeout=0.5)
    assert loop.time() - began < 10.0  # the probe's own timeout ended it, not the server


@pytest.mark.anyio
async def test_a_first_line_that_never_ends_is_not_ready(http: httpx.AsyncClient) -> None:
    """A server that sends a megabyte without a line end and keeps the connection open: the
    probe answers "not ready" once it holds 256 bytes of head, without waiting for its timeout."""
    endless = _answer(b"HTTP/1.1 200" + b"x" * (1 << 20), then_wait=30.0)
    loop = asyncio.get_running_loop()
    began = loop.time()
    assert not await _probe_tcp(http, endless, timeout=20.0)
    assert loop.time() - began < 10.0
