"""The engine's port forwards listen without a worker thread: an IP address is bound in the
event loop's own thread (``anyio.create_tcp_listener`` resolved it with ``getaddrinfo`` in a
worker thread, two hops a sandbox at every start), and a forward carries what it accepts."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import anyio
import anyio.abc
import pytest

from rock_core.engine.forwarding import PortForwards
from rock_core.models import Port


class _EchoRocklet:
    """A rocklet client whose tunnel to any port is an echo server's connection."""

    sandbox_id = "sb-forward"

    def __init__(self, port: int) -> None:
        self.port = port

    async def open_tunnel(self, port: int) -> anyio.abc.ByteStream:
        return await anyio.connect_tcp("127.0.0.1", self.port)

    async def connect(self) -> anyio.abc.ByteStream:
        return await anyio.connect_tcp("127.0.0.1", self.port)


async def _echo(stream: anyio.abc.SocketStream) -> None:
    async with stream:
        async for data in stream:
            await stream.send(data)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _round_trip(port: int) -> bytes:
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(b"ping")
        return await stream.receive()


def test_forwards_of_an_ip_address_resolve_nothing_and_carry_connections(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def main() -> None:
        def no_resolving(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError(f"getaddrinfo{args} for a forward of an IP address")

        echo = await anyio.create_tcp_listener(local_host="127.0.0.1")
        async with anyio.create_task_group() as tg:
            tg.start_soon(echo.serve, _echo)
            monkeypatch.setattr(asyncio.get_running_loop(), "getaddrinfo", no_resolving)
            forwards = PortForwards(tg)
            client: Any = _EchoRocklet(echo.extra(anyio.abc.SocketAttribute.local_port))
            wanted = _free_port()
            mapping = await forwards.open(
                "sb-forward", client, [8080, 9000], {Port(8080): Port(wanted)}
            )
            assert mapping[Port(8080)] == wanted  # the record's port, still free, is kept
            assert mapping[Port(9000)] not in (0, wanted)
            for host_port in mapping.values():
                assert await _round_trip(host_port) == b"ping"
            # A preferred port that is taken: a new one, still without resolving.
            taken = mapping[Port(9000)]
            again = await forwards.open("sb-other", client, [9000], {Port(9000): Port(taken)})
            assert again[Port(9000)] != taken
            assert await _round_trip(again[Port(9000)]) == b"ping"
            forwards.close_all()
            await anyio.sleep(0.05)
            with pytest.raises(OSError):
                await _round_trip(mapping[Port(8080)])
            monkeypatch.undo()
            tg.cancel_scope.cancel()

    anyio.run(main)


def test_forwards_that_carry_nothing_hold_no_task_and_closing_cuts_what_they_carry() -> None:
    """On asyncio the loop watches a sandbox's listening sockets itself: opening forwards starts
    no task (anyio's listeners took a task group and a task per port, every start); a
    connection is a task once accepted, and closing the sandbox's forwards cuts it."""

    async def main() -> None:
        echo = await anyio.create_tcp_listener(local_host="127.0.0.1")
        async with anyio.create_task_group() as tg:
            tg.start_soon(echo.serve, _echo)
            await anyio.wait_all_tasks_blocked()
            forwards = PortForwards(tg)
            client: Any = _EchoRocklet(echo.extra(anyio.abc.SocketAttribute.local_port))
            mappings = [await forwards.open("sb-0", client, [8080, 9000])]
            tasks = len(asyncio.all_tasks())  # and the one that closes them all at the end
            mappings += [await forwards.open(f"sb-{i}", client, [8080, 9000]) for i in (1, 2, 3)]
            assert len(asyncio.all_tasks()) == tasks
            async with await anyio.connect_tcp("127.0.0.1", mappings[0][Port(8080)]) as stream:
                await stream.send(b"ping")
                assert await stream.receive() == b"ping"
                forwards.close("sb-0")
                with anyio.fail_after(5):
                    with pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError, OSError)):
                        await stream.receive()
            assert await _round_trip(mappings[1][Port(9000)]) == b"ping"  # the others still carry
            # The task group's end (the engine's close) closes every forward it served.
            async with anyio.create_task_group() as inner:
                forwards.serve_in(inner)
                ended = await forwards.open("sb-inner", client, [8080])
                assert await _round_trip(ended[Port(8080)]) == b"ping"
                inner.cancel_scope.cancel()
            with pytest.raises(OSError):
                await _round_trip(ended[Port(8080)])
            with pytest.raises(OSError):
                await _round_trip(mappings[1][Port(9000)])
            tg.cancel_scope.cancel()

    anyio.run(main)
