"""``SandboxConfig(network="none")``: a sandbox with no way in or out, still driven as usual.

Docker gives the container a loopback interface only; rock reaches the agent through a unix
socket in a bind-mounted directory, so nothing is published. Runs embedded and (with
``ROCK_TEST_REMOTE=1``) through a real admin.
"""

from __future__ import annotations

from typing import Any

import pytest

from rock.actions import Command, CreateBashSessionRequest, ReadFileRequest, WriteFileRequest
from rock.sdk.sandbox.client import Sandbox
from rock.sdk.sandbox.config import SandboxConfig

pytestmark = [pytest.mark.docker, pytest.mark.anyio]

# What a process in the sandbox sees of the network: its interfaces and any route out.
PROBE = """
import socket
interfaces = sorted(line.split(':')[0].strip() for line in open('/proc/net/dev').readlines()[2:])
routes = open('/proc/net/route').readlines()[1:]
try:
    socket.create_connection(('192.0.2.1', 80), timeout=3)  # TEST-NET-1: never routed anywhere
    outcome = 'connected'
except OSError as exc:
    outcome = type(exc).__name__ + ':' + str(exc.errno)
print(','.join(interfaces), len(routes), outcome)
"""


async def test_a_sandbox_without_a_network_is_driven_through_its_socket(
    engine: Any, small: dict[str, Any], containers: Any
) -> None:
    sandbox = Sandbox(SandboxConfig(**small, network="none"))
    await sandbox.start()
    try:
        status = await sandbox.get_status()
        assert status.port_mapping == {}, "nothing is published"
        assert any(note.startswith("network none:") for note in status.notes), status.notes
        (container,) = containers(sandbox.sandbox_id)
        assert container.attrs["HostConfig"]["NetworkMode"] == "none"
        assert container.attrs["HostConfig"]["PortBindings"] in ({}, None)

        probe = await sandbox.execute(Command(command=["python3", "-c", PROBE]))
        interfaces, routes, outcome = probe.stdout.split()
        assert (interfaces, routes) == ("lo", "0"), probe.stdout
        assert outcome == "OSError:101", (
            f"a connection out must fail with ENETUNREACH, got {outcome}"
        )

        # Everything else works as with any sandbox: sessions, files, commands.
        await sandbox.create_session(CreateBashSessionRequest(session="offline"))
        observation = await sandbox.arun(
            "cd /tmp && echo quiet > note && cat note", session="offline"
        )
        assert observation.output.strip() == "quiet" and observation.exit_code == 0
        await sandbox.write_file(WriteFileRequest(path="/tmp/w.txt", content="written"))
        assert (await sandbox.read_file(ReadFileRequest(path="/tmp/w.txt"))).content == "written"
    finally:
        await sandbox.stop()
    assert containers.gone(sandbox.sandbox_id)
