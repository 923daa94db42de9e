"""The engine's pool of connections to a rocklet's unix socket is closed when its sandbox goes
(:meth:`RockletClient.forget`), through the transport the engine's client keeps (not httpx's
private one)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import anyio
import pytest

from rock_core.rocklet_client import RockletClient, new_http_client

pytestmark = pytest.mark.anyio

HANG = 30  # a guard against a hang; nothing waits for it to pass


async def test_forget_closes_the_kept_alive_connection_to_the_rocklets_socket() -> None:
    closed = anyio.Event()

    async def serve(stream: anyio.abc.ByteStream) -> None:
        async with stream:
            head = b""
            while b"\r\n\r\n" not in head:
                head += await stream.receive()
            await stream.send(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            try:
                await stream.receive()  # the client keeps the connection until it forgets it
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                closed.set()

    with tempfile.TemporaryDirectory(prefix="rock-pool-") as folder:  # short: a socket path's limit
        path = str(Path(folder) / "rocklet.sock")
        listener = await anyio.create_unix_listener(path)
        http = new_http_client()
        with anyio.fail_after(HANG):
            async with listener, http, anyio.create_task_group() as tg:
                tg.start_soon(listener.serve, serve)
                client = RockletClient(http, path, 0)
                response = await http.get(client.base_url + "/is_alive")
                assert (response.status_code, response.text) == (200, "ok")
                assert not closed.is_set()
                await client.forget()
                await closed.wait()
                tg.cancel_scope.cancel()


async def test_each_rocklet_over_tcp_has_a_pool_of_its_own_which_forget_closes() -> None:
    """A cluster's rocklets are reached over TCP: one pool each (one shared pool grew to a
    connection per sandbox, and httpx's walk over it on every request made a restarted admin
    with 1,000 sandboxes on Nomad take a minute), closed when its sandbox goes."""
    closed = anyio.Event()

    async def serve(stream: anyio.abc.ByteStream) -> None:
        async with stream:
            head = b""
            while b"\r\n\r\n" not in head:
                head += await stream.receive()
            await stream.send(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            try:
                await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                closed.set()

    first = await anyio.create_tcp_listener(local_host="127.0.0.1")
    second = await anyio.create_tcp_listener(local_host="127.0.0.1")
    http = new_http_client()
    with anyio.fail_after(HANG):
        async with first, second, http, anyio.create_task_group() as tg:
            tg.start_soon(first.serve, serve)
            tg.start_soon(second.serve, serve)
            clients = [
                RockletClient(
                    http, "127.0.0.1", listener.extra(anyio.abc.SocketAttribute.local_port)
                )
                for listener in (first, second)
            ]
            for client in clients:
                assert (await http.get(client.base_url + "/is_alive")).text == "ok"
            transport = http.rocklet_transport  # type: ignore[attr-defined]
            assert len(transport._tcp) == 2
            await clients[0].forget()
            await closed.wait()
            assert len(transport._tcp) == 1
            tg.cancel_scope.cancel()
