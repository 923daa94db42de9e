"""A hostile rocklet cannot make the engine hold its answers (issue #22, point 4).

A sandbox's root can replace its rocklet, so what a rocklet answers is hostile input. These tests
put a real RockletClient (the engine's HTTP client, ``new_http_client(max_answer=1 MiB)``)
against a real HTTP server on 127.0.0.1 that answers every route without end: a 256 MiB JSON
body, an endless chunked one, a line that never ends, a compressed answer, an endless error. Each
call fails with an error naming the cap, and the process's peak memory (``VmHWM``, reset before
through ``/proc/self/clear_refs``) grows by far less than the answers.
"""

from __future__ import annotations

import functools
import socket
import socketserver
import threading
import zlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from rock_core.actions import Command, ReadFileRequest
from rock_core.errors import InternalServerRockError
from rock_core.rocklet_client import RockletClient, new_http_client

pytestmark = pytest.mark.anyio

MiB = 1 << 20
CAP = MiB
ENDLESS = 256 * MiB  # "endless": the server stops there, so a client without a cap ends too


@functools.lru_cache(maxsize=1)
def _bomb() -> bytes:
    """256 MiB of JSON, gzipped (some 250 KiB), made a block at a time."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [packer.compress(b'{"entries": "')]
    block = b"a" * 65536
    parts += [packer.compress(block) for _ in range(ENDLESS // len(block))]
    return b"".join(parts) + packer.flush()


class _Hostile(socketserver.BaseRequestHandler):
    """Answers each request as its path says, sending until ENDLESS or until the client leaves."""

    def handle(self) -> None:
        sock: socket.socket = self.request
        head = b""
        while b"\r\n\r\n" not in head:
            data = sock.recv(65536)
            if not data:
                return
            head += data
        path = head.split(b" ", 2)[1].decode()
        try:
            if path == "/execute":  # a JSON answer of 256 MiB, its length declared
                self._send(
                    sock,
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                    % ENDLESS
                    + b'{"stdout": "',
                    ENDLESS,
                )
            elif path == "/read_file":  # no length: chunked, without end
                sock.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                )
                block = b"a" * 65536
                for _ in range(ENDLESS // len(block)):
                    sock.sendall(b"%x\r\n%s\r\n" % (len(block), block))
            elif path == "/is_alive":  # liveness answering without end
                self._send(
                    sock,
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n"
                    + b'{"is_alive": true, "x": "',
                    ENDLESS,
                )
            elif path == "/execute_stream":  # one NDJSON line that never ends
                self._send(
                    sock,
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\n\r\n"
                    + b'{"type": "output", "data": "',
                    ENDLESS,
                )
            elif path.startswith("/processes/p/output"):  # more output than the request's limit
                self._send(
                    sock,
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n\r\n",
                    64 * MiB,
                )
            elif path == "/list_dir":  # a small compressed answer that unpacks to 256 MiB
                bomb = _bomb()
                sock.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\n"
                    b"Content-Length: %d\r\n\r\n" % len(bomb) + bomb
                )
            elif path == "/download":  # an error whose detail never ends
                self._send(
                    sock,
                    b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n\r\n"
                    + b'{"detail": "',
                    ENDLESS,
                )
        except OSError:
            pass

    @staticmethod
    def _send(sock: socket.socket, head: bytes, total: int) -> None:
        sock.sendall(head)
        block = b"a" * 65536
        for _ in range(total // len(block)):
            sock.sendall(block)


@pytest.fixture(scope="module")
def hostile() -> Iterator[tuple[str, int]]:
    _bomb()  # made before any test measures memory
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Hostile)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[:2]  # type: ignore[misc]
    server.shutdown()
    server.server_close()


@pytest.fixture(params=[False, True], ids=["httpx", "lean"])
async def client(
    hostile: tuple[str, int], request: pytest.FixtureRequest
) -> AsyncIterator[RockletClient]:
    """Over httpx (the engine's and the admin's client) and over the lean path (the embedded
    SDK's, ``new_http_client(lean=True)``): the same caps on either."""
    async with new_http_client(max_answer=CAP, lean=request.param) as http:
        yield RockletClient(http, hostile[0], hostile[1], "sbx-hostile", token="t")


def _peak() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


@pytest.fixture
def flat() -> Iterator[None]:
    """The test's peak memory grows by less than 32 MiB (the answers are 64-256 MiB)."""
    Path("/proc/self/clear_refs").write_text("5")
    before = _peak()
    yield
    growth = _peak() - before
    assert growth < 32 * MiB, f"the process grew by {growth / MiB:.1f} MiB"


async def test_a_256mib_command_answer_is_an_error_naming_the_cap(
    client: RockletClient, flat: None
) -> None:
    with pytest.raises(InternalServerRockError) as caught:
        await client.execute(Command(command="yes"))
    message = caught.value.message
    assert (
        "execute" in message
        and f"more than {CAP} bytes" in message
        and "max_rocklet_answer" in message
    )
    assert "download" in message  # what to do instead


async def test_an_endless_chunked_answer_is_an_error(client: RockletClient, flat: None) -> None:
    with pytest.raises(InternalServerRockError, match="read_file .*max_rocklet_answer"):
        await client.read_file(ReadFileRequest(path="/x"))


async def test_an_endless_liveness_answer_is_not_alive(client: RockletClient, flat: None) -> None:
    assert await client.is_alive(timeout=60) is False


async def test_an_endless_stream_line_is_an_error(client: RockletClient, flat: None) -> None:
    with pytest.raises(InternalServerRockError, match="execute_stream .*one line"):
        async for _event in client.execute_stream(Command(command="yes")):
            pass


async def test_process_output_is_read_up_to_the_requests_own_limit(
    client: RockletClient, flat: None
) -> None:
    with pytest.raises(InternalServerRockError, match="more than 1000 bytes .the request's limit"):
        await client.process_output("p", limit=1000)


async def test_a_compressed_answer_is_refused_unread(client: RockletClient, flat: None) -> None:
    with pytest.raises(InternalServerRockError, match="encoded"):
        await client.list_dir("/")


async def test_an_endless_error_answer_is_read_only_so_far(
    client: RockletClient, flat: None
) -> None:
    with pytest.raises(InternalServerRockError, match="HTTP 500"):
        async for _chunk in client.download("/x"):
            pass


async def test_the_engine_takes_its_cap_from_its_config() -> None:
    from rock_core.engine.config import EngineConfig

    assert EngineConfig(max_rocklet_answer="8m").max_rocklet_answer == 8 * MiB
    async with new_http_client(max_answer=8 * MiB) as http:
        assert RockletClient(http, "127.0.0.1", 1).max_answer == 8 * MiB
    assert isinstance(new_http_client(), httpx.AsyncClient)
