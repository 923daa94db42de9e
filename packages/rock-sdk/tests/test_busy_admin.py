"""A trainer starting more sandboxes at once than the admin takes connections (issue #28 point 8):
the admin says when to come back, the SDK does, and one process keeps its calls within a limit.

A real admin (``python -m rock.bench.scripted_admin``: the admin's routes, engine and store on the
scripted runtime, no containers) over its socket, with a small ``max_connections``; the SDK's
``Sandbox`` in this process. Whether the admin refused anything is read from its log, where it
counts the 503s it answered past ``max_connections``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from rock.sdk._drivers.remote import RemoteDriver
from rock.sdk.sandbox.client import Sandbox
from rock.sdk.sandbox.config import SandboxConfig
from rock_core.engine.store import SqliteRecordStore
from rock_core.states import State

PREFIX = "/apis/envs/sandbox/v1"
pytestmark = pytest.mark.anyio

MAX_CONNECTIONS = 16
REFUSED = "answered 503 past admin.max_connections"


class ScriptedAdmin:
    """A scripted admin process on a free port; :meth:`start` again after :meth:`stop` keeps its
    state folder and port (a restart)."""

    def __init__(self, state_dir: Path) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.state_dir = state_dir
        self.log = state_dir / "admin.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {
            **os.environ,
            "ROCK_ADMIN_STATE_DIR": str(self.state_dir),
            "ROCK_ADMIN_MAX_CONNECTIONS": str(MAX_CONNECTIONS),
            "ROCK_ENGINE_MAX_CONCURRENT_STARTS": "200",
        }
        env.pop("ROCK_BASE_URL", None)
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "rock.bench.scripted_admin", "--host", "127.0.0.1"]
                + ["--port", str(self.port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        for _ in range(600):
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            assert self.process.poll() is None, self.log.read_text()[-3000:]
            time.sleep(0.1)
        pytest.fail(f"the scripted admin did not answer: {self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def log_size(self) -> int:
        return self.log.stat().st_size

    def log_since(self, offset: int) -> str:
        with open(self.log, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")


@pytest.fixture(scope="module")
def admin() -> Iterator[ScriptedAdmin]:
    state_dir = Path(tempfile.mkdtemp(prefix="rock-busy-admin-"))
    server = ScriptedAdmin(state_dir)
    server.start()
    yield server
    server.stop()
    shutil.rmtree(state_dir, ignore_errors=True)


async def _start_all(url: str, count: int) -> list[Sandbox]:
    run = uuid.uuid4().hex[:8]
    sandboxes = [
        Sandbox(
            SandboxConfig(
                base_url=url, sandbox_id=f"busy-{run}-{n}", image="scripted", memory="128m"
            )
        )
        for n in range(count)
    ]
    await asyncio.gather(*(sandbox.start() for sandbox in sandboxes))
    return sandboxes


def test_past_max_connections_the_admin_says_when_to_retry(admin: ScriptedAdmin) -> None:
    request = f"GET {PREFIX}/sandboxes HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()
    held: list[socket.socket] = []
    answer = b""
    try:
        for _ in range(MAX_CONNECTIONS + 8):  # kept alive after their answer, they count
            sock = socket.create_connection(("127.0.0.1", admin.port))
            held.append(sock)
            sock.sendall(request)
            sock.settimeout(60)
            answer = sock.recv(65536)
            if answer.startswith(b"HTTP/1.1 503 "):
                while chunk := sock.recv(65536):  # the admin closes the connection after it
                    answer += chunk
                break
    finally:
        for sock in held:
            sock.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503 "), answer
    assert b"\r\nretry-after: 1\r\n" in head.lower() + b"\r\n"
    assert b"admin.max_connections" in body


def _hold(port: int, count: int) -> list[socket.socket]:
    """``count`` connections to the admin, each kept alive after one answered request."""
    request = f"GET {PREFIX}/sandboxes HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()
    held = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port))
        held.append(sock)
        sock.sendall(request)
        sock.settimeout(60)
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
    return held


async def test_starts_refused_by_a_busy_admin_are_sent_again_and_all_succeed(
    admin: ScriptedAdmin,
) -> None:
    offset = admin.log_size()
    held = _hold(admin.port, MAX_CONNECTIONS - 1)  # the admin takes one more: the SDK's first

    async def release_once_refused() -> None:
        while REFUSED not in admin.log_since(offset):
            await asyncio.sleep(0.05)
        for sock in held:
            sock.close()

    try:
        sandboxes, _ = await asyncio.gather(_start_all(admin.url, 40), release_once_refused())
    finally:
        for sock in held:
            sock.close()
    try:
        assert {(await s.get_status()).state for s in sandboxes} == {State.RUNNING}
    finally:
        await asyncio.gather(*(s.stop() for s in sandboxes))


def _connections_to(port: int) -> int:
    """Established TCP connections of this host whose far end is ``port`` on 127.0.0.1."""
    far = f"0100007F:{port:04X}"
    with open("/proc/net/tcp") as table:
        return sum(1 for line in table if line.split()[2:4] == [far, "01"])


async def test_one_process_keeps_its_quick_calls_within_its_limit(
    admin: ScriptedAdmin, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ROCK_MAX_IN_FLIGHT", "4")
    most = 0

    async def count() -> None:
        nonlocal most
        while True:
            most = max(most, _connections_to(admin.port))
            await asyncio.sleep(0.005)

    counting = asyncio.ensure_future(count())
    try:
        sandboxes = await _start_all(admin.url, 120)
    finally:
        counting.cancel()
    try:
        assert {(await s.get_status()).state for s in sandboxes} == {State.RUNNING}
        # 4 starts or reads at once, and the held waits (wait_any: at most 4 per event loop);
        # a kept-alive idle connection of either pool may still be counted while a new call
        # opens another (the clean-clone CI once saw 11). Without the limit, the 120 starts at
        # once open a connection each.
        assert 1 <= most <= 2 * (4 + 4)
    finally:
        await asyncio.gather(*(s.stop() for s in sandboxes))


async def test_a_call_made_while_the_admin_restarts_is_answered_once_it_is_back(
    admin: ScriptedAdmin,
) -> None:
    driver = RemoteDriver(admin.url)
    await driver.list_sandboxes()  # this driver has reached the admin
    admin.stop()
    restarted = asyncio.get_running_loop().run_in_executor(None, admin.start)
    try:
        await driver.list_sandboxes()  # refused while it is down, sent again until it answers
    finally:
        await restarted
    assert (await driver.list_sandboxes()) is not None


def test_a_start_the_admin_answered_is_kept_when_it_is_killed_at_once(
    admin: ScriptedAdmin,
) -> None:
    """The admin commits its records' writes together (one commit per turn of its event loop),
    and before each answer: a start it answered is in its store even if it is killed then."""
    sandbox_id = f"kept-{uuid.uuid4().hex[:8]}"
    answer = httpx.post(
        f"{admin.url}{PREFIX}/start_async",
        json={"sandbox_id": sandbox_id, "image": "scripted", "memory": "128m"},
        timeout=60,
    ).json()
    assert answer["status"] == "Success", answer
    assert admin.process is not None
    admin.process.kill()  # SIGKILL: no shutdown, no commit of its own
    admin.process.wait()
    admin.process = None
    store = SqliteRecordStore(admin.state_dir / "rock.db")
    try:
        assert store.get(sandbox_id) is not None
    finally:
        store.close()
    admin.start()  # for whatever runs next
