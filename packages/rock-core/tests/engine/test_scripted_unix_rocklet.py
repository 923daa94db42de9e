"""The control-plane bench's simulated rocklet on a unix socket (``rock bench control-plane``'s
``scripted_admin --rocklet process``): :func:`serve_loop_first_rocklet` listens there, the
scripted runtime reports the path as the unit's ``rocklet_socket``, and the engine reaches it as
it reaches rock-docker's sandboxes: the readiness probe answered in the loop, a command handed
to the real rocklet."""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from rock_core.actions import Command, SandboxStartRequest
from rock_core.engine.config import EngineConfig
from rock_core.engine.manager import SandboxManager
from rock_core.models import UnitState
from rock_core.states import State
from rock_core.testing import ScriptedRuntime
from rock_core.testing.loop_rocklet import serve_loop_first_rocklet

pytestmark = pytest.mark.anyio

HANG = 30  # a guard against a hang: it fails the test; nothing waits for it


@pytest.fixture
def unix_rocklet() -> Iterator[tuple[str, int]]:
    with tempfile.TemporaryDirectory(prefix="rock-unix-rocklet-") as folder:
        path = str(Path(folder) / "rocklet.sock")
        listening: list[tuple[str, int]] = []
        ready, done = threading.Event(), threading.Event()

        def on_listening(address: tuple[str, int]) -> None:
            listening.append(address)
            ready.set()

        thread = threading.Thread(
            target=serve_loop_first_rocklet,
            args=(on_listening, done.is_set),
            kwargs={"unix_path": path},
            daemon=True,
        )
        thread.start()
        try:
            assert ready.wait(HANG), "the rocklet did not listen"
            yield listening[0]
        finally:
            done.set()
            thread.join(timeout=5)


async def test_a_scripted_unit_on_a_unix_socket_rocklet_runs_and_takes_commands(
    unix_rocklet: tuple[str, int],
) -> None:
    path, port = unix_rocklet
    assert port == 0 and Path(path).is_socket()
    runtime = ScriptedRuntime(unix_rocklet)
    config = EngineConfig(timer_interval=3600, reconcile_interval=3600)
    async with SandboxManager(config, runtime=runtime) as engine:
        with anyio.fail_after(HANG):
            record = await engine.start(SandboxStartRequest(image="scripted:1"))
        assert record.state is State.RUNNING
        (unit_id,) = runtime.units
        status = await runtime.inspect(runtime._handle(unit_id, runtime.units[unit_id]))
        assert status.state is UnitState.RUNNING
        assert (status.rocklet_socket, status.rocklet_host) == (path, None)
        with anyio.fail_after(HANG):
            answer = await engine.rocklet(record.sandbox_id).execute(
                Command(command=["echo", "through the unix socket"])
            )
        assert answer.stdout.strip() == "through the unix socket"
