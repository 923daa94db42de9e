"""Network groups of embedded engines: a group name belongs to the engine's owner process.

Two trainer processes on one machine that both name the group ``episode-1`` get two networks:
sandboxes of the same process reach each other by sandbox id, those of the other process reach
them neither by id nor by address. Embedded only (in front of a keyless admin every client is
the admin's one tenant, and shares its groups by design).
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from typing import Any

import pytest

from rock.actions import Command
from rock.sdk.sandbox.client import Sandbox
from rock.sdk.sandbox.config import SandboxConfig

pytestmark = [pytest.mark.docker, pytest.mark.anyio]

SMALL: dict[str, Any] = {"image": "python:3.11", "memory": "256m", "cpus": 0.5}
# A request to port 8000 of HOST from inside a sandbox: prints the status line, or fails.
PROBE = (
    'python3 -c "import socket,sys; s=socket.create_connection((sys.argv[1], 8000), timeout=5); '
    "s.sendall(b'GET / HTTP/1.0\\r\\n\\r\\n'); print(s.recv(12).decode())\" {host}"
)
SERVE = "mkdir -p /srv && echo mine > /srv/index.html && (nohup python3 -m http.server 8000 -d /srv >/dev/null 2>&1 &)"

# The other trainer process: a sandbox in the same group name, probing the first one.
OTHER_PROCESS = f"""
import asyncio, json, sys
from rock.actions import Command
from rock.sdk.sandbox.client import Sandbox
from rock.sdk.sandbox.config import SandboxConfig
PROBE = {PROBE!r}

async def main(group, target, address):
    sandbox = Sandbox(SandboxConfig(**{SMALL!r}, network_group=group))
    await sandbox.start()
    try:
        seen = {{}}
        for name, host in (("by_id", target), ("by_address", address)):
            result = await sandbox.execute(Command(command=["sh", "-c", PROBE.format(host=host)]))
            seen[name] = [result.exit_code, result.stdout]
        seen["network"] = (await sandbox.get_status()).security["network"]
        print(json.dumps(seen))
    finally:
        await sandbox.stop()

asyncio.run(main(*sys.argv[1:]))
"""


async def test_the_same_group_name_in_two_processes_is_two_networks(
    containers: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ROCK_BASE_URL", raising=False)  # both processes embedded
    group = f"episode-{uuid.uuid4().hex[:6]}"
    server = Sandbox(SandboxConfig(**SMALL, network_group=group))
    member = Sandbox(SandboxConfig(**SMALL, network_group=group))
    await server.start()
    await member.start()
    try:
        await server.execute(Command(command=["sh", "-c", SERVE]))
        wait = f"for i in $(seq 60); do {PROBE.format(host=server.sandbox_id)} && exit 0; sleep 0.5; done; exit 1"
        reached = await member.execute(Command(command=["sh", "-c", wait]))
        assert reached.exit_code == 0 and reached.stdout.startswith("HTTP/1.0 200"), reached
        (container,) = containers(server.sandbox_id)
        (network,) = container.attrs["NetworkSettings"]["Networks"].values()
        done = subprocess.run(
            [sys.executable, "-c", OTHER_PROCESS, group, server.sandbox_id, network["IPAddress"]],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        seen = json.loads(done.stdout.strip().splitlines()[-1])
        assert seen["by_id"][0] != 0 and "HTTP" not in seen["by_id"][1], seen
        assert seen["by_address"][0] != 0 and "HTTP" not in seen["by_address"][1], seen
        assert seen["network"] == f"group:{group}"
    finally:
        await member.stop()
        await server.stop()
