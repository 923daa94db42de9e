"""The rocklet's channel cannot be turned against the host (issue 22, point 1).

The attack, as root in a sandbox: ``rm /rock-run/rocklet.sock && ln -s /var/run/docker.sock
/rock-run/rocklet.sock``. When the engine reached the rocklet at a path in a directory the
sandbox could write, it followed that link on the host and spoke to the host's Docker API (its
127.0.0.1 forward of port 22555 answered ``GET /version`` with Docker's ``Api-Version``): root on
the host for anyone on its loopback. Now the engine makes the rocklet's listening socket in a
directory no sandbox mounts and hands it in over a one-shot socket in a read-only mount, so the
swap fails, the engine's calls still reach the sandbox's own rocklet, nothing answers for Docker
on 127.0.0.1, and the sandbox has nothing to write on the host. Runs embedded and, with
``ROCK_TEST_REMOTE=1``, through a real admin.
"""

from __future__ import annotations

import socket
from typing import Any

import anyio
import pytest

from rock.actions import Command
from rock.sdk.sandbox.client import Sandbox
from rock.sdk.sandbox.config import SandboxConfig

from .conftest import RUNTIME

pytestmark = [
    pytest.mark.docker,
    pytest.mark.anyio,
    pytest.mark.skipif(
        RUNTIME == "nomad",
        reason="Nomad sandboxes have no /rock-run: their rocklet is reached over TCP",
    ),
]

SWAP = "rm -f /rock-run/rocklet.sock; ln -sf /var/run/docker.sock /rock-run/rocklet.sock; ls -la /rock-run"
# The bind mounts a sandbox gets from the host, with their options (fields of /proc/self/mountinfo).
MOUNTS = 'awk \'$5 == "/rock" || $5 == "/rock-run" {print $5, $6}\' /proc/self/mountinfo'


def _ask_for_docker_version(port: int) -> bytes:
    """What 127.0.0.1:``port`` answers to Docker's ``GET /version`` (empty if it closes)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(b"GET /version HTTP/1.1\r\nHost: docker\r\nConnection: close\r\n\r\n")
        answer = b""
        try:
            while len(answer) < 65536:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                answer += chunk
        except OSError:
            pass
    return answer


@pytest.mark.parametrize("network", ["bridge", "none"])
async def test_a_sandbox_cannot_point_its_rocklet_channel_at_the_hosts_docker(
    engine: Any, small: dict[str, Any], network: str
) -> None:
    sandbox = Sandbox(SandboxConfig(**small, network=network))
    async with sandbox:
        await sandbox.execute(Command(command=["sh", "-c", SWAP]))

        # (a) The engine's calls, on fresh connections too (eight at once outgrow any kept-alive
        # one), still reach this sandbox's own rocklet.
        results: list[Any] = [None] * 8

        async def call(i: int) -> None:
            results[i] = await sandbox.execute(
                Command(command=["sh", "-c", f"sleep 1; echo still-mine-{i}"], timeout=60)
            )

        async with anyio.create_task_group() as tg:
            for i in range(len(results)):
                tg.start_soon(call, i)
        assert [r.stdout.strip() for r in results] == [
            f"still-mine-{i}" for i in range(len(results))
        ]

        # (b) No host port the engine forwards for the sandbox answers as Docker.
        status = await sandbox.get_status()
        for port in (status.port_mapping or {}).values():
            answer = await anyio.to_thread.run_sync(_ask_for_docker_version, port)
            head = answer.split(b"\r\n\r\n", 1)[0].lower()
            assert b"api-version" not in head, (
                f"127.0.0.1:{port} answered as Docker: {answer[:300]!r}"
            )

        # (c) The mount from the host is read-only: nothing written there lands on the host.
        written = await sandbox.execute(
            Command(command=["sh", "-c", "echo escape > /rock-run/escape"])
        )
        assert written.exit_code != 0 and "Read-only file system" in written.stderr, written
        mounts = await sandbox.execute(Command(command=["sh", "-c", MOUNTS]))
        options = dict(line.split() for line in mounts.stdout.splitlines())
        assert set(options) == {"/rock", "/rock-run"}, mounts.stdout
        assert all(value.split(",")[0] == "ro" for value in options.values()), options
