"""Restart after a crash (issue #14 point 3), through the engine on a scripted runtime: the unit's
death is reported as the reconciler or the event watch reports it (``engine.unit_gone``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest

from rock_core.actions import SandboxStartRequest
from rock_core.engine.config import EngineConfig
from rock_core.engine.manager import SandboxManager
from rock_core.errors import BadRequestRockError, SandboxNotFound
from rock_core.models import RuntimeStatus, UnitState
from rock_core.states import Event, State
from rock_core.testing import ScriptedRuntime, eventually_async

pytestmark = pytest.mark.anyio

HANG = 30
KILLED = RuntimeStatus(state=UnitState.EXITED, exit_code=137)
OOM = RuntimeStatus(state=UnitState.EXITED, exit_code=137, oom_killed=True)
CLEAN_EXIT = RuntimeStatus(state=UnitState.EXITED, exit_code=0)


@pytest.fixture
async def engine(runtime: ScriptedRuntime) -> AsyncIterator[SandboxManager]:
    config = EngineConfig(
        timer_interval=3600, reconcile_interval=3600, restart_backoff_seconds=0.01
    )
    async with SandboxManager(config, runtime=runtime) as engine:
        yield engine


async def _running(engine: SandboxManager, **fields: object) -> str:
    status = await engine.start(SandboxStartRequest(image="scripted:1", **fields))  # type: ignore[arg-type]
    return status.sandbox_id


async def _crash(
    engine: SandboxManager, runtime: ScriptedRuntime, sandbox_id: str, status: RuntimeStatus
) -> None:
    unit = engine.get_record(sandbox_id).unit_id
    assert unit is not None
    runtime.units[unit].state = UnitState.EXITED
    await engine.unit_gone(sandbox_id, status)


async def test_on_failure_starts_an_oom_killed_sandbox_again_with_the_same_id(
    engine: SandboxManager, runtime: ScriptedRuntime
) -> None:
    sandbox_id = await _running(engine, restart_policy="on-failure")
    unit = engine.get_record(sandbox_id).unit_id
    await _crash(engine, runtime, sandbox_id, OOM)
    with anyio.fail_after(HANG):
        status = await engine.wait_until_running(sandbox_id)
    record = status.record
    assert record.state is State.RUNNING and record.restart_count == 1
    assert record.unit_id == unit  # the runtime keeps files across a stop: the same unit
    assert [c.event for c in record.state_history][-3:] == [Event.STOP, Event.RESTART, Event.ALIVE]
    [note] = [n for n in record.notes if n.startswith("restarted")]
    assert "restarted (1 of 3)" in note and "OOM killed" in note


async def test_on_failure_leaves_a_clean_exit_stopped_and_always_restarts_it(
    engine: SandboxManager, runtime: ScriptedRuntime
) -> None:
    calm = await _running(engine, restart_policy="on-failure", auto_delete_seconds=600)
    await _crash(engine, runtime, calm, CLEAN_EXIT)
    assert engine.get_record(calm).state is State.STOPPED
    assert engine.get_record(calm).reason == "container exited with code 0"
    eager = await _running(engine, restart_policy="always")
    await _crash(engine, runtime, eager, CLEAN_EXIT)
    with anyio.fail_after(HANG):
        assert (await engine.wait_until_running(eager)).record.restart_count == 1


async def test_it_gives_up_after_max_restarts_saying_so(
    engine: SandboxManager, runtime: ScriptedRuntime
) -> None:
    sandbox_id = await _running(
        engine, restart_policy="on-failure", max_restarts=1, auto_delete_seconds=600
    )
    await _crash(engine, runtime, sandbox_id, KILLED)
    with anyio.fail_after(HANG):
        await engine.wait_until_running(sandbox_id)
    await _crash(engine, runtime, sandbox_id, KILLED)
    record = engine.get_record(sandbox_id)
    assert record.state is State.STOPPED
    assert (
        record.reason
        == "container exited with code 137 (not restarted: gave up after 1 restart, max_restarts)"
    )


async def test_never_is_the_default(engine: SandboxManager, runtime: ScriptedRuntime) -> None:
    sandbox_id = await _running(engine, auto_delete_seconds=600)
    await _crash(engine, runtime, sandbox_id, KILLED)
    assert engine.get_record(sandbox_id).state is State.STOPPED
    assert engine.get_record(sandbox_id).restart_count == 0


async def test_a_stop_during_the_back_off_cancels_the_restart(runtime: ScriptedRuntime) -> None:
    config = EngineConfig(timer_interval=3600, reconcile_interval=3600, restart_backoff_seconds=30)
    async with SandboxManager(config, runtime=runtime) as engine:
        sandbox_id = await _running(engine, restart_policy="always", auto_delete_seconds=600)
        await _crash(engine, runtime, sandbox_id, KILLED)
        assert engine.get_record(sandbox_id).state is State.STOPPED  # waiting out its back-off
        await engine.stop(sandbox_id)
        # The restart's task may not have begun its back-off yet: it learns of the stop at its
        # first step, and then its post-stop policy applies.
        record = await eventually_async(
            lambda: engine.get_record(sandbox_id),
            until=lambda r: r.auto_transition_state is not State.PENDING,
            what="the cancelled restart's post-stop plan",
        )
        assert record.state is State.STOPPED and record.restart_count == 0
        assert record.auto_transition_state is State.DELETED  # its post-stop policy applies now
        with pytest.raises(SandboxNotFound, match="not running"):
            await engine.wait_until_running(sandbox_id, timeout=5)


async def test_a_crashed_sandbox_waiting_to_restart_shows_as_pending_with_why_not_as_gone(
    runtime: ScriptedRuntime,
) -> None:
    config = EngineConfig(timer_interval=3600, reconcile_interval=3600, restart_backoff_seconds=30)
    async with SandboxManager(config, runtime=runtime) as engine:
        sandbox_id = await _running(
            engine, restart_policy="on-failure", max_restarts=2, auto_delete_seconds=600
        )
        await _crash(engine, runtime, sandbox_id, KILLED)
        status = await engine.get_status(sandbox_id)  # no include_all_states: still found
        assert status.state is State.PENDING
        assert "restarting after a crash (restart 1 of 2" in (status.reason or "")
        assert "code 137" in (status.reason or "")
        [listed] = engine.statuses_of([engine.get_record(sandbox_id)])
        assert listed.state is State.PENDING
        with pytest.raises(BadRequestRockError, match="not running yet"):  # a call: wait for it
            engine.rocklet(sandbox_id, "execute")
        # Stopped by hand during the back-off: it is stopped, as before, and not coming back.
        await engine.stop(sandbox_id)
        with pytest.raises(SandboxNotFound, match="stopped"):
            await engine.get_status(sandbox_id)
        status = await engine.get_status(sandbox_id, include_all_states=True)
        assert status.state is State.STOPPED
