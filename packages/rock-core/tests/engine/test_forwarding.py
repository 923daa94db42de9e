"""The engine's forwarded ports: host ports whose connections go through a sandbox's rocklet.

A real rocklet (rock's server, in a thread, on a unix socket with a secret, as Docker sandboxes
are reached) stands for the sandbox; a TCP echo server on 127.0.0.1 stands for a service in it.
"""

from __future__ import annotations

import socket
import tempfile
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import pytest

from rock_core.engine.forwarding import PortForwards
from rock_core.errors import InternalServerRockError, InvalidParameter
from rock_core.rocklet.api import Rocklet, build_router
from rock_core.rocklet.server import RockletServer
from rock_core.rocklet_client import RockletClient, new_http_client
from rock_core.testing import upper_echo_server

pytestmark = pytest.mark.anyio

TOKEN = "forwarding-test-secret"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def rocklet_socket() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="rock-fwd-") as tmp:
        path = str(Path(tmp) / "rocklet.sock")
        server = RockletServer(build_router(Rocklet(tmp)), unix_path=path, token=TOKEN)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        yield path
        server.shutdown()
        thread.join(timeout=5)


@pytest.fixture
def echo_port() -> Iterator[int]:
    """A service on 127.0.0.1 that upper-cases what it gets (the test's host plays the sandbox)."""
    with upper_echo_server() as port:
        yield port


@pytest.fixture
async def client(rocklet_socket: str) -> AsyncIterator[RockletClient]:
    async with new_http_client() as http:
        yield RockletClient(http, rocklet_socket, 0, "sbx-1", token=TOKEN)


async def _exchange(port: int, data: bytes) -> bytes:
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(data)
        await stream.send_eof()
        received = b""
        try:
            while True:
                received += await stream.receive()
        except anyio.EndOfStream:
            return received


async def test_a_forwarded_port_reaches_the_service_and_the_rocklet(
    client: RockletClient, echo_port: int
) -> None:
    async with anyio.create_task_group() as tg:
        forwards = PortForwards(tg)
        mapping = await forwards.open("sbx-1", client, [22555, echo_port])
        assert set(mapping) == {22555, echo_port} and all(1 <= p <= 65535 for p in mapping.values())
        assert forwards.mapping("sbx-1") == mapping
        # a service in the sandbox
        assert await _exchange(mapping[echo_port], b"ping") == b"PING"
        # the rocklet itself (ROCK's 22555)
        answer = await _exchange(
            mapping[22555], b"GET /is_alive HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        assert answer.startswith(b"HTTP/1.1 200 ") and b'"is_alive":true' in answer.replace(
            b" ", b""
        )
        forwards.close("sbx-1")
        await anyio.wait_all_tasks_blocked()
        with pytest.raises(OSError):
            await anyio.connect_tcp("127.0.0.1", mapping[echo_port])
        assert forwards.mapping("sbx-1") == {} and len(forwards) == 0
        tg.cancel_scope.cancel()


async def test_a_preferred_host_port_is_kept_when_free(
    client: RockletClient, echo_port: int
) -> None:
    async with anyio.create_task_group() as tg:
        forwards = PortForwards(tg)
        first = await forwards.open("sbx-1", client, [echo_port])
        forwards.close("sbx-1")
        await anyio.wait_all_tasks_blocked()
        again = await forwards.open("sbx-1", client, [echo_port], preferred=first)
        assert again == first
        # taken by someone else: a new port, not a failure
        taken = socket.create_server(("127.0.0.1", 0))
        busy = {echo_port: taken.getsockname()[1]}
        moved = await forwards.open("sbx-2", client, [echo_port], preferred=busy)
        assert moved[echo_port] != busy[echo_port]
        assert await _exchange(moved[echo_port], b"x") == b"X"
        taken.close()
        tg.cancel_scope.cancel()


async def test_a_port_nobody_listens_on_closes_the_connection(client: RockletClient) -> None:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    dead = probe.getsockname()[1]
    probe.close()
    with pytest.raises(
        InternalServerRockError, match=f"nothing listens on port {dead} in the sandbox"
    ):
        await client.open_tunnel(dead)
    with pytest.raises(InvalidParameter, match="port: expected a port number 1..65535, got 0"):
        await client.open_tunnel(0)
    async with anyio.create_task_group() as tg:
        forwards = PortForwards(tg)
        mapping = await forwards.open("sbx-1", client, [dead])
        assert await _exchange(mapping[dead], b"hello") == b""  # accepted, then closed
        tg.cancel_scope.cancel()


async def test_many_connections_at_once(client: RockletClient, echo_port: int) -> None:
    async with anyio.create_task_group() as tg:
        forwards = PortForwards(tg)
        mapping = await forwards.open("sbx-1", client, [echo_port])
        answers: dict[int, bytes] = {}

        async def one(i: int) -> None:
            answers[i] = await _exchange(mapping[echo_port], b"sandbox-%d;" % i * 1000)

        async with anyio.create_task_group() as clients:
            for i in range(50):
                clients.start_soon(one, i)
        assert [answers[i] for i in range(50)] == [b"SANDBOX-%d;" % i * 1000 for i in range(50)]
        tg.cancel_scope.cancel()


async def test_a_rocklet_inside_another_program_ends_no_process(client: RockletClient) -> None:
    """A rocklet served inside another program (here: the test's own) is no sandbox's agent:
    the engine's request to end the other processes it sees is refused, and the test survives."""
    assert await client.end_processes() is False
    assert await client.is_alive()


def test_the_open_files_limit_is_raised_to_the_hard_limit() -> None:
    import resource

    from rock_core.engine.forwarding import raise_open_files_limit

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        if hard != resource.RLIM_INFINITY and hard > 256:
            resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
        assert raise_open_files_limit() == resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == hard
    finally:
        resource.setrlimit(
            resource.RLIMIT_NOFILE, (max(soft, resource.getrlimit(resource.RLIMIT_NOFILE)[0]), hard)
        )
