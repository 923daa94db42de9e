"""The lean path of rocklet calls (``new_http_client(lean=True)``: the embedded SDK's client per
caller loop, :mod:`rock_core.rocklet_client.lean`) against a real rocklet on a unix socket with
its secret, as Docker sandboxes are reached: the same answers and the same rock errors as the
httpx path, kept-alive connections reused, and a call that fails (no answer in time, a rocklet
gone) names its sandbox. The caps on hostile answers are in ``test_rocklet_answers.py`` (both
paths)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import tempfile
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from rock_core.actions import (
    BashAction,
    Command,
    CreateBashSessionRequest,
    ReadFileRequest,
    WriteFileRequest,
)
from rock_core.errors import (
    CommandTimeout,
    InternalServerRockError,
    InvalidParameter,
    NonZeroExitCode,
    RockletUnreachable,
    SessionNotFound,
)
from rock_core.rocklet.api import Rocklet, build_router
from rock_core.rocklet.server import RockletServer
from rock_core.rocklet_client import RockletClient, new_http_client
from rock_core.rocklet_client.answers import TooLarge
from rock_core.rocklet_client.lean import Dropped, LeanPools

pytestmark = pytest.mark.anyio

TOKEN = "lean-test-secret"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def rocklet_socket() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="rock-lean-") as tmp:
        path = str(Path(tmp) / "rocklet.sock")
        server = RockletServer(build_router(Rocklet(tmp)), unix_path=path, token=TOKEN)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        yield path
        server.shutdown()
        thread.join(timeout=5)


@pytest.fixture
async def lean_http() -> AsyncIterator[object]:
    async with new_http_client(lean=True) as http:
        assert isinstance(getattr(http, "lean", None), LeanPools)
        yield http


def _opened(http: object) -> int:
    pools = getattr(http, "lean")._pools  # noqa: B009 - a private count, for the test
    return sum(len(pool.idle) for pool in pools.values())


async def test_commands_files_and_sessions_answer_as_over_httpx(
    rocklet_socket: str, lean_http: object
) -> None:
    client = RockletClient(lean_http, rocklet_socket, 0, "sbx-lean", token=TOKEN)  # type: ignore[arg-type]
    written = await client.write_file(WriteFileRequest(content="héllo\n", path="/tmp/x/lean.txt"))
    assert written.success
    read = await client.read_file(ReadFileRequest(path="/tmp/x/lean.txt"))
    assert read.content == "héllo\n"
    run = await client.execute(Command(command=["sh", "-c", "echo out; echo err >&2; exit 3"]))
    assert (run.exit_code, run.stdout, run.stderr) == (3, "out\n", "err\n")
    await client.create_session(CreateBashSessionRequest(session="s"))
    observed = await client.run_in_session(BashAction(command="echo $((6*7))", session="s"))
    assert observed.output.strip() == "42"
    assert _opened(lean_http) == 1  # one kept-alive connection served every call in turn


async def test_rocklet_errors_become_the_same_rock_errors(
    rocklet_socket: str, lean_http: object
) -> None:
    client = RockletClient(lean_http, rocklet_socket, 0, "sbx-lean", token=TOKEN)  # type: ignore[arg-type]
    with pytest.raises(SessionNotFound):
        await client.run_in_session(BashAction(command="true", session="nope"))
    await client.create_session(CreateBashSessionRequest(session="nz"))
    with pytest.raises(NonZeroExitCode):
        await client.run_in_session(BashAction(command="false", session="nz", check="raise"))
    with pytest.raises(InvalidParameter):
        await client.read_file(ReadFileRequest(path="/nonexistent/lean"))
    wrong = RockletClient(lean_http, rocklet_socket, 0, "sbx-lean", token="wrong")  # type: ignore[arg-type]
    with pytest.raises(InternalServerRockError, match="sbx-lean refused execute"):
        await wrong.execute(Command(command="true"))


async def test_concurrent_calls_each_get_their_own_answer(
    rocklet_socket: str, lean_http: object
) -> None:
    client = RockletClient(lean_http, rocklet_socket, 0, "sbx-lean", token=TOKEN)  # type: ignore[arg-type]
    runs = await asyncio.gather(
        *(client.execute(Command(command=["echo", str(i)])) for i in range(12))
    )
    assert [run.stdout for run in runs] == [f"{i}\n" for i in range(12)]
    await client.forget()
    assert _opened(lean_http) == 0


async def test_no_answer_in_time_is_a_command_timeout_naming_the_sandbox(
    rocklet_socket: str, lean_http: object
) -> None:
    client = RockletClient(lean_http, rocklet_socket, 0, "sbx-lean", token=TOKEN)  # type: ignore[arg-type]
    with pytest.raises(CommandTimeout, match="sbx-lean did not answer env/x in time"):
        await client._request("POST", "/execute", "env/x", json_body={"command": "sleep 5", "shell": True}, timeout=0.3)  # fmt: skip
    # the timed-out connection is not reused: the next call gets a whole answer of its own
    run = await client.execute(Command(command=["echo", "after"]))
    assert run.stdout == "after\n"


async def test_a_rocklet_gone_is_unreachable_naming_the_sandbox_and_where(
    lean_http: object,
) -> None:
    with tempfile.TemporaryDirectory(prefix="rock-lean-") as tmp:
        path = str(Path(tmp) / "gone.sock")
        client = RockletClient(lean_http, path, 0, "sbx-gone", token=TOKEN)  # type: ignore[arg-type]
        with pytest.raises(RockletUnreachable, match=f"sbx-gone at unix:{path} is unreachable"):
            await client.execute(Command(command="true"))
        # a rocklet that takes the request and ends the connection without an answer
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(path)
        listener.listen(1)

        def drop() -> None:
            conn, _ = listener.accept()
            conn.recv(65536)
            conn.close()

        thread = threading.Thread(target=drop, daemon=True)
        thread.start()
        with pytest.raises(RockletUnreachable, match="sbx-gone"):
            await client.execute(Command(command="true"))
        thread.join(5)
        listener.close()


async def test_a_rocklet_that_ends_its_connections_leaves_no_pool_behind() -> None:
    # A sandbox removed ends its rocklet's kept connections: the caller's pools must not keep an
    # entry for each sandbox it ever ran (a trainer runs them by the million).
    pools = LeanPools()
    answered = threading.Event()
    with tempfile.TemporaryDirectory(prefix="rock-lean-") as tmp:
        path = str(Path(tmp) / "once.sock")
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(path)
        listener.listen(1)

        def answer_then_go() -> None:
            conn, _ = listener.accept()
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
            answered.wait(5)
            conn.close()  # the sandbox is removed

        thread = threading.Thread(target=answer_then_go, daemon=True)
        thread.start()
        request = b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
        answer = await pools.exchange(path, 0, request, 1024, 5.0)
        assert answer.status_code == 200
        assert len(pools._pools) == 1  # the connection is kept for the next call
        answered.set()
        for _ in range(500):
            if not pools._pools:
                break
            await asyncio.sleep(0.01)
        assert pools._pools == {}
        thread.join(5)
        listener.close()
        # a rocklet that is not there at all leaves nothing either
        with pytest.raises(Dropped, match="cannot connect"):
            await pools.exchange(path, 0, request, 1024, 5.0)
        assert pools._pools == {}


def _one_answer_server(
    where: str, answer: bytes
) -> tuple[socket.socket, list[bytes], threading.Thread]:
    """A server on ``where`` (a unix socket's path, or ``tcp``: loopback) that reads each
    request of each connection and gives ``answer`` (or, when empty, closes unanswered)."""
    if where == "tcp":
        listener = socket.create_server(("127.0.0.1", 0))
    else:
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(where)
        listener.listen(8)
    received: list[bytes] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                request = conn.recv(65536)
                received.append(request)
                if answer:
                    with contextlib.suppress(OSError):
                        conn.sendall(answer)
                        conn.recv(1)  # until the client closes

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return listener, received, thread


def _stop(listener: socket.socket, thread: threading.Thread) -> None:
    # Woken and joined before its socket is closed: a thread in accept() on a closed socket's
    # number could take a later test's connection.
    with contextlib.suppress(OSError):
        listener.shutdown(socket.SHUT_RDWR)
    thread.join(5)
    listener.close()


@pytest.mark.parametrize("where", ["unix", "tcp"])
@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 4096\r\n\r\n" + b"x" * 4096,
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n800\r\n"
        + b"x" * 2048
        + b"\r\n"
        + b"800\r\n"
        + b"x" * 2048
        + b"\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1000\r\n" + b"x" * 10,
        b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + b"x" * 4096,
    ],
    ids=["declared", "chunked", "one-large-chunk", "until-end"],
)
async def test_an_answer_past_the_cap_is_too_large_over_a_unix_socket_and_tcp(
    where: str, answer: bytes
) -> None:
    pools = LeanPools()
    with tempfile.TemporaryDirectory(prefix="rock-lean-") as tmp:
        path = str(Path(tmp) / "cap.sock") if where == "unix" else "tcp"
        listener, received, thread = _one_answer_server(path, answer)
        host, port = (path, 0) if where == "unix" else listener.getsockname()[:2]
        request = b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n"
        try:
            with pytest.raises(TooLarge) as caught:
                await pools.exchange(host, port, request, 1000, 5.0)
            assert caught.value.limit == 1000
            assert len(received) == 1
        finally:
            pools.close()
            _stop(listener, thread)


async def test_a_request_whose_connection_ends_unanswered_is_never_sent_twice() -> None:
    # Nomad's client sends such a request once more (it may never have been read); a rocklet
    # call is not safe to repeat (a command would run twice), so it fails at once.
    pools = LeanPools()
    with tempfile.TemporaryDirectory(prefix="rock-lean-") as tmp:
        path = str(Path(tmp) / "drop.sock")
        listener, received, thread = _one_answer_server(path, b"")
        try:
            with pytest.raises(Dropped, match="without an answer") as caught:
                await pools.exchange(path, 0, b"POST /execute HTTP/1.1\r\n\r\n", 1000, 5.0)
            assert caught.value.unanswered
            # (sent again, it would have been read before the call failed: it was closed unanswered)
            assert len(received) == 1
        finally:
            pools.close()
            _stop(listener, thread)
