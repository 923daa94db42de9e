"""A restarted engine takes its running sandboxes back several at a time, not one after
another: with thousands of sandboxes on a cluster runtime (each one asks the runtime and its
rocklet), one after another kept a restarted admin from answering for minutes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from rock_core.actions import SandboxStartRequest
from rock_core.engine.config import EngineConfig
from rock_core.engine.manager import SandboxManager
from rock_core.models import RuntimeStatus
from rock_core.runtime import UnitHandle
from rock_core.states import State
from rock_core.testing import ScriptedRuntime

pytestmark = pytest.mark.anyio

SANDBOXES = 6


class CountingRuntime(ScriptedRuntime):
    """Its ``inspect`` waits (up to a few seconds) until ``SANDBOXES`` are asked at once, and
    counts the most that were."""

    def __init__(self, rocklet: tuple[str, int]) -> None:
        super().__init__(rocklet)
        self.holding = False
        self.in_flight = 0
        self.most = 0
        self.all_in = anyio.Event()

    async def inspect(self, handle: UnitHandle) -> RuntimeStatus:
        if self.holding:
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
            if self.in_flight >= SANDBOXES:
                self.all_in.set()
            with anyio.move_on_after(5):  # one at a time would wait here for each sandbox
                await self.all_in.wait()
            self.in_flight -= 1
        return await super().inspect(handle)


async def test_a_restarted_engine_takes_its_sandboxes_back_at_once(
    rocklet: tuple[str, int], tmp_path: Path
) -> None:
    runtime = CountingRuntime(rocklet)
    config: dict[str, Any] = dict(
        timer_interval=3600,
        reconcile_interval=3600,
        store_path=str(tmp_path / "records.db"),
        remove_on_close=False,
    )
    with anyio.fail_after(60):
        async with SandboxManager(EngineConfig(**config), runtime=runtime) as engine:
            ids = [
                (await engine.start(SandboxStartRequest(image="scripted:1"))).sandbox_id
                for _ in range(SANDBOXES)
            ]
        runtime.holding = True
        async with SandboxManager(EngineConfig(**config), runtime=runtime) as engine:
            assert runtime.most == SANDBOXES
            for sandbox_id in ids:
                assert (await engine.get_status(sandbox_id)).state is State.RUNNING
