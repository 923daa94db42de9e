"""The trainer's end of the model service's channel (rock/sdk/sandbox/model_service/_channel.py)
against a sandbox that does not play fair: the sandbox is the agent's, so whatever listens on
the service's port may send anything. A line that never ends must not grow in the trainer's
memory: past the channel's limit the channel closes, saying why."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from rock.sdk.sandbox.client import Sandbox
from rock.sdk.sandbox.config import SandboxConfig
from rock.sdk.sandbox.model_service._channel import Channel
from rock_core.actions import Command
from rock_core.testing import eventually_async

pytestmark = [pytest.mark.docker, pytest.mark.anyio]

#: Answers the channel's head, then 4 MiB with no newline, then ends.
FLOOD = r"""
import socket
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("127.0.0.1", 8931))
server.listen()
while True:
    conn, _ = server.accept()
    try:
        if conn.recv(4096):  # not the readiness check's empty connection
            conn.sendall(b"HTTP/1.1 200 OK\r\n\r\n" + b"x" * (4 << 20))
    except OSError:
        pass
    conn.close()
"""


async def test_a_sandbox_sending_an_endless_line_closes_the_channel_at_its_limit(
    small: dict[str, Any],
):
    async with Sandbox(SandboxConfig(**small)) as sandbox:
        await sandbox.write_file_by_path(FLOOD, "/tmp/flood.py")
        await sandbox.execute(
            Command(command=["sh", "-c", "nohup python3 /tmp/flood.py >/dev/null 2>&1 &"])
        )

        async def listening() -> bool:
            done = await sandbox.execute(
                Command(
                    command=[
                        "python3",
                        "-c",
                        "import socket; socket.create_connection(('127.0.0.1', 8931))",
                    ]
                )
            )
            return done.exit_code == 0

        await eventually_async(listening, until=bool, what="the flood listens", timeout=60)
        seen: list[dict[str, Any]] = []
        closed = asyncio.Event()

        def deliver(message: dict[str, Any]) -> None:
            seen.append(message)
            if "closed" in message:
                closed.set()

        channel = await Channel.open(sandbox, 8931, 1, deliver, max_line=1 << 20)
        try:
            await closed.wait()
        finally:
            await channel.aclose()
        (message,) = seen
        assert "longer than 1048576 bytes" in message["closed"], message
