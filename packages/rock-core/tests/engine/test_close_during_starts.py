"""The close of an engine with starts under way ends each start's task and waits for it.

Start tasks run as plain asyncio tasks, each in a cancel scope of its own
(:meth:`rock_core.engine.core.EngineCore.start_soon`), not in the engine's task group: the close
must cancel them with the task group and wait for every one before it stops the sandboxes.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from rock_core.actions import SandboxStartRequest
from rock_core.engine.config import EngineConfig
from rock_core.engine.manager import SandboxManager
from rock_core.engine.store import SqliteRecordStore
from rock_core.states import State
from rock_core.testing import ScriptedRuntime

pytestmark = pytest.mark.anyio

# A guard against a test hanging (the close regressed): it fails the test; nothing waits for it.
HANG = 30
STARTS = 20


async def test_the_close_ends_and_awaits_every_start_held_in_the_runtime(
    runtime: ScriptedRuntime, tmp_path: Path
) -> None:
    path = tmp_path / "records.db"
    config = EngineConfig(
        timer_interval=3600,
        reconcile_interval=3600,
        store_path=str(path),
        max_concurrent_starts=STARTS,
    )
    held = runtime.hold("start")
    with anyio.fail_after(HANG):
        async with SandboxManager(config, runtime=runtime) as engine:
            ids = [
                (await engine.start_async(SandboxStartRequest(image="scripted:1"))).sandbox_id
                for _ in range(STARTS)
            ]
            await held.arrivals(STARTS)  # every start is in the runtime's start now
            tasks = list(engine._core._tasks)
            assert len(tasks) == STARTS
        # The close returned: each start's task has ended, none left running.
        assert all(task.done() for task in tasks)
        assert not engine._core._tasks
    store = SqliteRecordStore(path)  # the close stopped each one (remove_on_close), none half-done
    try:
        records = [store.get(sandbox_id) for sandbox_id in ids]
        assert {r.state if r else None for r in records} <= {State.STOPPED, State.DELETED}
    finally:
        store.close()
