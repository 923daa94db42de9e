"""A stop straight after a start (no checkpoint between) ends the start before it takes anything.

``start_async`` records the sandbox ``pending`` and hands the start to a task that has not run
yet when it returns; a ``stop`` called at once must cancel that task, not stop the record and
let the task create (or claim) a unit for a sandbox nobody wants any more.
"""

from __future__ import annotations

import anyio
import pytest

from rock_core.actions import SandboxStartRequest
from rock_core.engine.manager import SandboxManager
from rock_core.states import State
from rock_core.testing import ScriptedRuntime

pytestmark = pytest.mark.anyio

# A guard against a test hanging (the engine regressed): it fails the test; nothing waits for it.
HANG = 30

REQUEST = SandboxStartRequest(image="scripted:1")


def _units_of(runtime: ScriptedRuntime, sandbox_id: str) -> list[str]:
    return [unit_id for unit_id, u in runtime.units.items() if u.sandbox_id == sandbox_id]


async def test_a_stop_at_once_after_start_async_creates_no_unit(
    engine: SandboxManager, runtime: ScriptedRuntime
) -> None:
    create = runtime.hold("create")
    with anyio.fail_after(HANG):
        sandbox_id = (await engine.start_async(REQUEST)).sandbox_id
        await engine.stop(sandbox_id)
        await anyio.wait_all_tasks_blocked()  # whatever the start task would do, it has done
    assert create.arrived == []
    assert engine.get_record(sandbox_id).state in (State.STOPPED, State.DELETED)
    assert _units_of(runtime, sandbox_id) == []


async def test_a_stop_at_once_after_start_async_leaves_the_warm_pool_its_member(
    engine: SandboxManager, runtime: ScriptedRuntime
) -> None:
    with anyio.fail_after(HANG):
        await engine.set_warm_pool(REQUEST, 1)
        await engine.wait_warm()
        [member] = runtime.running()
        assign = runtime.hold("assign")
        create = runtime.hold("create")
        sandbox_id = (await engine.start_async(REQUEST)).sandbox_id
        await engine.stop(sandbox_id)
        await anyio.wait_all_tasks_blocked()
    assert (assign.arrived, create.arrived) == ([], [])
    assert engine.get_record(sandbox_id).state in (State.STOPPED, State.DELETED)
    assert _units_of(runtime, sandbox_id) == []
    assert runtime.running() == [member]  # never taken: still the pool's, ready for a start
    [pool] = engine.warm_pools()
    assert (pool.ready, pool.claimed) == (1, 0)


async def test_a_stop_at_once_after_restart_starts_no_unit(
    engine: SandboxManager, runtime: ScriptedRuntime
) -> None:
    with anyio.fail_after(HANG):
        started = await engine.start_async(
            SandboxStartRequest(image="scripted:1", auto_delete_seconds=3600)
        )
        sandbox_id = started.sandbox_id
        await engine.wait_until_running(sandbox_id)
        await engine.stop(sandbox_id)
        start = runtime.hold("start")
        await engine.restart(sandbox_id)
        await engine.stop(sandbox_id)
        await anyio.wait_all_tasks_blocked()
    assert start.arrived == []
    assert engine.get_record(sandbox_id).state is State.STOPPED
    assert runtime.running() == []
