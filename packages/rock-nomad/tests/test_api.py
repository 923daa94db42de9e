"""rock-nomad's HTTP client of Nomad's API (``rock_nomad._api.NomadApi``) against a small real
server that drops kept-alive connections as they are reused: the way a server's (or a proxy's)
idle timeout meets a client that reuses the connection at that moment. A start in
``rock bench cluster`` failed so ("cannot reach the Nomad API ... ReadError") before the client
sent such a request again."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import anyio
import pytest

from rock_core.errors import RuntimeFailure
from rock_nomad._api import QUICK_CALLS, NomadApi, Setting

ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nX-Nomad-Index: 7\r\n\r\n[]"


class DroppingServer:
    """Answers the first ``answer_per_connection`` requests of each connection, then reads the
    next one and closes the connection without a word."""

    def __init__(self, answer_per_connection: int, hold: float = 0.0) -> None:
        self.answer_per_connection = answer_per_connection
        self.hold = hold  # seconds each answer waits (a busy Nomad)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = "http://127.0.0.1:%d" % self.listener.getsockname()[1]
        self.received = 0
        self.answered = 0
        self.connections = 0
        self._lock = threading.Lock()
        self._acceptor = threading.Thread(target=self._accept, daemon=True)
        self._acceptor.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        served = 0
        buffer = b""
        with conn:
            while True:
                while b"\r\n\r\n" not in buffer:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buffer += chunk
                _, buffer = buffer.split(b"\r\n\r\n", 1)  # the client's GETs carry no body
                with self._lock:
                    self.received += 1
                if served >= self.answer_per_connection:
                    return  # closed, no answer
                if self.hold:
                    time.sleep(self.hold)
                served += 1
                with self._lock:  # counted before it is sent: the client may look at once
                    self.answered += 1
                conn.sendall(ANSWER)

    def close(self) -> None:
        # Woken and joined before its socket is closed: a thread left in accept() on a closed
        # socket's number could take a later test's connection.
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self._acceptor.join(5)
        self.listener.close()


@pytest.fixture
def dropping() -> Iterator[type[DroppingServer]]:
    made: list[DroppingServer] = []

    def make(answer_per_connection: int, hold: float = 0.0) -> DroppingServer:
        server = DroppingServer(answer_per_connection, hold)
        made.append(server)
        return server

    yield make  # type: ignore[misc]
    for server in made:
        server.close()


def _api(address: str, max_connections: int = 4) -> NomadApi:
    settings = {
        name: Setting(name, "set in the test")
        for name in ("address", "token", "namespace", "region")
    }
    return NomadApi(
        address,
        token=None,
        namespace="default",
        region=None,
        verify=True,
        cert=None,
        timeout=5.0,
        max_connections=max_connections,
        settings=settings,
    )


def test_a_request_on_a_connection_the_server_dropped_is_sent_again_on_a_fresh_one(
    dropping,
) -> None:
    server = dropping(answer_per_connection=1)

    async def main() -> list[int]:
        api = _api(server.address)
        try:
            return [
                (await api.request("GET", "jobs", attempted="list")).status_code for _ in range(3)
            ]
        finally:
            await api.aclose()

    assert anyio.run(main) == [200, 200, 200]
    # The second and third requests each met a reused connection that was dropped, and went again.
    assert (server.received, server.answered, server.connections) == (5, 3, 3)


def test_a_server_that_drops_every_request_is_an_error_naming_the_address_after_one_more_try(
    dropping,
) -> None:
    server = dropping(answer_per_connection=0)

    async def main() -> None:
        api = _api(server.address)
        try:
            await api.request("GET", "jobs", attempted="list", sandbox_id="sb-1")
        finally:
            await api.aclose()

    with pytest.raises(RuntimeFailure) as caught:
        anyio.run(main)
    message = caught.value.message
    assert (
        f"cannot reach the Nomad API at {server.address}" in message
        and "plugins.nomad.address" in message
    )
    assert server.received == 2  # the request, and once more: no endless retries


def test_a_burst_of_calls_is_answered_over_a_bounded_number_of_connections(dropping) -> None:
    """5,000 starts at once once opened 512 connections to Nomad in one httpx pool, whose walk
    over them on every call was most of the admin's CPU: quick calls now wait their turn, at
    most QUICK_CALLS in flight over small pools."""
    server = dropping(answer_per_connection=10_000, hold=0.01)

    async def main() -> list[int]:
        api = _api(server.address, max_connections=512)
        codes: list[int] = []

        async def one() -> None:
            codes.append((await api.request("GET", "jobs", attempted="list")).status_code)

        try:
            async with anyio.create_task_group() as group:
                for _ in range(300):
                    group.start_soon(one)
        finally:
            await api.aclose()
        return codes

    assert anyio.run(main) == [200] * 300
    assert server.connections <= QUICK_CALLS


def test_an_answer_past_the_lean_clients_cap_is_a_failure_naming_its_size() -> None:
    """A stand-in or a real Nomad must not make rock buffer without bound: an answer that says it
    is larger than the lean client's cap (rock_core.lean_http.MAX_ANSWER) is refused unread."""
    from rock_core.lean_http import MAX_ANSWER

    listener = socket.create_server(("127.0.0.1", 0))
    size = MAX_ANSWER + 1

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n[" % size)
            conn.recv(1)  # until the client closes

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()

    async def main() -> None:
        api = _api("http://127.0.0.1:%d" % listener.getsockname()[1])
        try:
            await api.request("GET", "allocations", attempted="list")
        finally:
            await api.aclose()

    try:
        with pytest.raises(RuntimeFailure) as caught:
            anyio.run(main)
    finally:
        thread.join(5)
        listener.close()
    message = caught.value.message
    assert f"answered GET /v1/allocations with an answer of {size} bytes" in message
    assert f"more than the {MAX_ANSWER} bytes" in message
