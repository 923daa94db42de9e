"""A sandbox whose rocklet is still booting does not hold a start-queue slot: the next start
goes ahead (the slot bounds the runtime's create and start, not the boot inside the unit)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from rock_core.actions import SandboxStartRequest
from rock_core.engine.config import EngineConfig
from rock_core.engine.manager import SandboxManager
from rock_core.models import Port, RuntimeStatus, UnitState
from rock_core.runtime import UnitHandle
from rock_core.states import State
from rock_core.testing import ScriptedRuntime, rocklet_in_thread

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def rocklet() -> Iterator[tuple[str, int]]:
    with rocklet_in_thread() as address:
        yield address


@pytest.fixture
def silent() -> Iterator[tuple[str, int]]:
    """A listening socket that never answers: a rocklet still booting."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield listener.getsockname()


class _OneBootsForever(ScriptedRuntime):
    """The scripted runtime, but the first sandbox's rocklet never answers."""

    def __init__(self, rocklet: tuple[str, int], silent: tuple[str, int]) -> None:
        super().__init__(rocklet)
        self.silent = silent
        self.slow_sandbox: str | None = None

    async def inspect(self, handle: UnitHandle) -> RuntimeStatus:
        status = await super().inspect(handle)
        if handle.sandbox_id == self.slow_sandbox and status.state is UnitState.RUNNING:
            host, port = self.silent
            return RuntimeStatus(state=status.state, rocklet_host=host, rocklet_port=Port(port))
        return status


async def test_a_start_goes_ahead_while_another_sandbox_s_rocklet_boots(
    tmp_path: Path, rocklet: tuple[str, int], silent: tuple[str, int]
) -> None:
    runtime = _OneBootsForever(rocklet, silent)
    config = EngineConfig(
        timer_interval=3600,
        reconcile_interval=3600,
        store_path=str(tmp_path / "rock.db"),
        max_concurrent_starts=1,
    )
    async with SandboxManager(config, runtime=runtime) as manager:
        runtime.slow_sandbox = "booting"
        await manager.start_async(SandboxStartRequest(image="scripted:1", sandbox_id="booting"))
        other = await manager.start_async(SandboxStartRequest(image="scripted:1"))
        assert other.sandbox_id is not None
        with anyio.fail_after(60):
            status = await manager.wait_until_running(other.sandbox_id)
        assert status.state is State.RUNNING
        assert manager.get_record("booting").state is State.PENDING  # still booting
        await manager.stop("booting")
