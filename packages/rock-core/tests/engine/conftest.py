"""Fixtures the engine's tests share: asyncio for anyio, one real rocklet in a thread per module,
a fresh scripted runtime (rock_core.testing.ScriptedRuntime) on it per test, and an engine on
that runtime with its timers and reconciliation out of the way (a module may make its own)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from rock_core.engine.config import EngineConfig
from rock_core.engine.manager import SandboxManager
from rock_core.testing import ScriptedRuntime, rocklet_in_thread


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def rocklet() -> Iterator[tuple[str, int]]:
    with rocklet_in_thread() as address:
        yield address


@pytest.fixture
def runtime(rocklet: tuple[str, int]) -> ScriptedRuntime:
    return ScriptedRuntime(rocklet)


@pytest.fixture
async def engine(runtime: ScriptedRuntime) -> AsyncIterator[SandboxManager]:
    config = EngineConfig(timer_interval=3600, reconcile_interval=3600)
    async with SandboxManager(config, runtime=runtime) as engine:
        try:
            yield engine
        finally:
            runtime.open_gates()  # a failed test must not leave the engine's clean-up held
