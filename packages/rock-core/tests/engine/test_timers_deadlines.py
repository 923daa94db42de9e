"""The engine's deadlines (idle stop, auto-delete) fire at their time, as a sandbox's record and
activity move them, whatever else the timers hold (engine/timers.py keeps them in a heap:
only sandboxes whose deadline may have come are looked at).

Time is the ``at`` of ``run_timers``: the tests judge deadlines at chosen moments, none waits."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import anyio
import pytest

from rock_core.actions import SandboxStartRequest
from rock_core.engine.config import EngineConfig
from rock_core.engine.manager import SandboxManager
from rock_core.states import State
from rock_core.testing import ScriptedRuntime

pytestmark = pytest.mark.anyio

HANG = 30  # a guard against a hang (the engine regressed); nothing waits for it


@pytest.fixture
async def engine(runtime: ScriptedRuntime) -> AsyncIterator[SandboxManager]:
    # The background loops never fire during a test: the tests run the timers themselves.
    config = EngineConfig(timer_interval=3600, reconcile_interval=3600)
    async with SandboxManager(config, runtime=runtime) as engine:
        yield engine


async def _running(engine: SandboxManager, **request: object) -> str:
    started = await engine.start_async(SandboxStartRequest(image="scripted:1", **request))  # type: ignore[arg-type]
    assert started.sandbox_id is not None
    await engine.wait_until_running(started.sandbox_id)
    return started.sandbox_id


def _state(engine: SandboxManager, sandbox_id: str) -> State:
    return engine.get_record(sandbox_id).state


async def test_each_sandbox_is_stopped_at_its_own_idle_deadline_and_deleted_at_its_own_time(
    engine: SandboxManager,
) -> None:
    with anyio.fail_after(HANG):
        soon = await _running(engine, auto_clear_seconds=60, auto_delete_seconds=600)
        late = await _running(engine, auto_clear_seconds=3600, auto_delete_seconds=600)
        never = await _running(engine, auto_clear_seconds=0)  # no idle limit
        t0 = time.time()
        await engine.run_timers(at=t0 + 30)
        assert [_state(engine, i) for i in (soon, late, never)] == [State.RUNNING] * 3
        await engine.run_timers(at=t0 + 120)
        assert engine.get_record(soon).reason == "expired"
        assert [_state(engine, i) for i in (soon, late, never)] == [
            State.STOPPED,
            State.RUNNING,
            State.RUNNING,
        ]
        # soon's auto-delete counts from its stop (now, in real time): 600 s later, not before.
        stopped = time.time()
        await engine.run_timers(at=stopped + 500)
        assert _state(engine, soon) is State.STOPPED
        await engine.run_timers(at=stopped + 700)
        assert _state(engine, soon) is State.DELETED
        assert _state(engine, late) is State.RUNNING
        await engine.run_timers(at=t0 + 3700)
        assert engine.get_record(late).reason == "expired"
        assert _state(engine, never) is State.RUNNING


async def test_a_call_in_flight_moves_the_idle_deadline_to_a_full_idle_limit_after_it(
    engine: SandboxManager,
) -> None:
    with anyio.fail_after(HANG):
        sandbox_id = await _running(engine, auto_clear_seconds=60)
        t0 = time.time()
        with engine.call(sandbox_id):  # past its first deadline, but busy
            await engine.run_timers(at=t0 + 100)
        assert _state(engine, sandbox_id) is State.RUNNING
        # Its idle time counts from t0 + 100 now: not stopped at t0 + 130 ...
        await engine.run_timers(at=t0 + 130)
        assert _state(engine, sandbox_id) is State.RUNNING
        # ... stopped once 60 s passed since.
        await engine.run_timers(at=t0 + 161)
        assert engine.get_record(sandbox_id).reason == "expired"


async def test_a_restart_gives_a_stopped_sandbox_its_idle_deadline_again_before_its_old_one(
    engine: SandboxManager,
) -> None:
    """Stopped with an auto-delete 600 s out, restarted with an idle limit of 60 s: it is stopped
    at the earlier deadline, and then deleted 600 s after that stop, not at the first one."""
    with anyio.fail_after(HANG):
        sandbox_id = await _running(engine, auto_clear_seconds=60, auto_delete_seconds=600)
        await engine.stop(sandbox_id)
        await engine.restart(sandbox_id)
        await engine.wait_until_running(sandbox_id)
        t0 = time.time()
        await engine.run_timers(at=t0 + 30)
        assert _state(engine, sandbox_id) is State.RUNNING
        await engine.run_timers(at=t0 + 61)
        record = engine.get_record(sandbox_id)
        assert (record.state, record.reason) == (State.STOPPED, "expired")
        assert record.auto_transition_time is not None
        second_stop = record.auto_transition_time.timestamp() - 600
        await engine.run_timers(at=second_stop + 590)
        assert _state(engine, sandbox_id) is State.STOPPED
        await engine.run_timers(at=second_stop + 601)
        assert _state(engine, sandbox_id) is State.DELETED


async def test_a_sandbox_whose_record_changes_often_holds_one_timer_entry_not_one_per_change(
    engine: SandboxManager,
) -> None:
    """The timers' heap grows with the sandboxes, not with their changes (an RL trainer restarts
    or resets a sandbox thousands of times within its idle limit); its deadline still fires."""
    with anyio.fail_after(HANG):
        sandbox_id = await _running(engine, auto_clear_seconds=60, auto_delete_seconds=600)
        for _ in range(20):
            await engine.stop(sandbox_id)
            await engine.restart(sandbox_id)
            await engine.wait_until_running(sandbox_id)
        assert len(engine._core.deadlines) <= 2
        await engine.run_timers(at=time.time() + 61)
        assert engine.get_record(sandbox_id).reason == "expired"
