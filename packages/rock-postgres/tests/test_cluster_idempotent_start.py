"""A start is never duplicated across a cluster's admins (issue #24 point 4): two real admins of
one cluster on one PostgreSQL database, and the SDK naming both. A small proxy in front of one
admin forwards the start, reads the admin's answer and drops the client's connection: the SDK
sends the start again, with the same Idempotency-Key, to the other admin, which hands it to the
leader (or is the leader), and the caller gets the one sandbox the first start made."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from rock.sdk.sandbox.client import Sandbox
from rock.sdk.sandbox.config import SandboxConfig
from rock_postgres.testing import AdminProcess, postgres_url, two_admins  # noqa: F401

pytestmark = pytest.mark.anyio

HANG = 90  # a guard against a hang; nothing waits for it to pass


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def admins(tmp_path: Path, postgres_url: str) -> Iterator[tuple[AdminProcess, AdminProcess]]:
    """The cluster's (leader, follower), both serving, in a cluster of its own."""
    with two_admins(tmp_path, postgres_url) as admins:
        yield admins


class LosingProxy:
    """Forwards each request to ``target`` (a real admin), reads its answer, and closes the
    client's connection without passing it on. ``keys`` holds each request's Idempotency-Key
    and ``answers`` the admin's answers."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.keys: list[str | None] = []
        self.answers: list[dict[str, Any]] = []
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        # The socket is closed by this thread, once it no longer accepts (see close).
        with self._sock, httpx.Client(base_url=self.target, timeout=180) as upstream:
            while True:
                try:
                    conn, _ = self._sock.accept()
                except OSError:
                    return  # shut down
                with conn:
                    self._forward(conn, upstream)

    def _forward(self, conn: socket.socket, upstream: httpx.Client) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return
            data += chunk
        head, body = data.split(b"\r\n\r\n", 1)
        request_line, *lines = head.decode("latin-1").split("\r\n")
        method, path, _ = request_line.split(" ", 2)
        headers = {
            name.strip().lower(): value.strip()
            for name, value in (line.split(":", 1) for line in lines)
        }
        while len(body) < int(headers.get("content-length", "0")):
            body += conn.recv(65536)
        self.keys.append(headers.get("idempotency-key"))
        passed = {
            k: v for k, v in headers.items() if k not in ("host", "content-length", "connection")
        }
        self.answers.append(upstream.request(method, path, content=body, headers=passed).json())
        conn.shutdown(socket.SHUT_RDWR)  # the answer is lost

    def close(self) -> None:
        # The thread that accepts closes the socket on its way out, no other: a number closed
        # while a thread is about to call accept() on it is soon another test server's listener,
        # whose connections that thread would take (a CI flake of session 44).
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes accept(); a close alone does not
        self._thread.join(timeout=10)


def _containers(sandbox_id: str) -> list[str]:
    out = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=rock.sandbox_id={sandbox_id}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return out.split()


@pytest.mark.parametrize("lost_at", ["leader", "follower"])
async def test_a_start_whose_answer_is_lost_makes_one_sandbox_in_the_cluster(
    admins: tuple[AdminProcess, AdminProcess], lost_at: str
) -> None:
    leader, follower = admins
    first, second = (leader, follower) if lost_at == "leader" else (follower, leader)
    proxy = LosingProxy(first.url)
    sandbox = Sandbox(
        SandboxConfig(
            image="python:3.11", memory="512m", cpus=0.5, base_url=[proxy.url, second.url]
        )
    )
    try:
        await sandbox.start()
        sandbox_id = sandbox.sandbox_id
        assert sandbox_id is not None
        # The first admin took the start (through the proxy), the answer was lost, and the
        # second admin answered the same sandbox for the same key.
        assert proxy.answers and {a["result"]["sandbox_id"] for a in proxy.answers} == {sandbox_id}
        assert len(set(proxy.keys)) == 1 and proxy.keys[0]
        assert len(_containers(sandbox_id)) == 1
        assert (await sandbox.arun("echo one")).output.strip() == "one"
        await sandbox.stop()
    finally:
        proxy.close()
        await sandbox.close()
