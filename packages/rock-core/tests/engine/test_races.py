"""Races in the engine, forced in order on a scripted in-memory runtime: no Docker, no sleeps.

Each test holds runtime calls at gates (:class:`~rock_core.testing.scripted_runtime.Gate`) and
waits on arrivals or on ``anyio.wait_all_tasks_blocked``, so the interleaving under test happens
every run. The same behaviours are checked against Docker in ``tests/test_engine_docker.py`` and
``tests/test_warm_pool.py``.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from rock_core.actions import SandboxStartRequest
from rock_core.converters import spec_from_start_request
from rock_core.engine import removals
from rock_core.engine.config import EngineConfig
from rock_core.engine.live import LABEL_ENGINE, LABEL_OWNER, LABEL_SANDBOX_ID
from rock_core.engine.manager import SandboxManager
from rock_core.engine.store import SqliteRecordStore
from rock_core.errors import RockError
from rock_core.states import State
from rock_core.testing import ScriptedRuntime, eventually_async

pytestmark = pytest.mark.anyio

# A guard against a test hanging on an arrival that never comes (the engine regressed): it
# fails the test; nothing waits for it to pass.
HANG = 30


def _config(**fields: object) -> EngineConfig:
    # The background loops never fire during a test: the tests run timers themselves.
    return EngineConfig(**{"timer_interval": 3600, "reconcile_interval": 3600, **fields})  # type: ignore[arg-type]


@contextlib.asynccontextmanager
async def _engine(runtime: ScriptedRuntime, **config: object) -> AsyncIterator[SandboxManager]:
    async with SandboxManager(_config(**config), runtime=runtime) as engine:
        try:
            yield engine
        finally:
            runtime.open_gates()  # a failed test must not leave the engine's clean-up held


@pytest.fixture
async def engine(runtime: ScriptedRuntime) -> AsyncIterator[SandboxManager]:
    async with _engine(runtime) as engine:
        yield engine


REQUEST = SandboxStartRequest(image="scripted:1")


async def test_a_stop_racing_a_warm_pool_claim_removes_the_claimed_unit(
    engine: SandboxManager, runtime: ScriptedRuntime
) -> None:
    with anyio.fail_after(HANG):
        await engine.set_warm_pool(REQUEST, 1)
        await engine.wait_warm()
        [member] = runtime.running()
        assign = runtime.hold("assign")
        remove = runtime.hold("remove")
        sandbox_id = (await engine.start_async(REQUEST)).sandbox_id
        assert sandbox_id is not None
        # The sandbox runs before its unit is renamed after it (off the claim's path).
        await assign.arrivals(1)
        assert engine.get_record(sandbox_id).state is State.RUNNING
        async with anyio.create_task_group() as tg:
            tg.start_soon(engine.stop, sandbox_id)
            await anyio.wait_all_tasks_blocked()  # the stop waits for the rename (its lock)
            assert engine.get_record(sandbox_id).state is State.RUNNING
            assign.release(sandbox_id)
        # The stop found the unit the claim had taken over (renamed), and removes it.
        assert engine.get_record(sandbox_id).state in (State.STOPPED, State.DELETED)
        assert await remove.arrivals(1) == [sandbox_id]
        remove.open()
        with pytest.raises(RockError, match="not running"):
            await engine.wait_until_running(sandbox_id)
        await anyio.wait_all_tasks_blocked()
        assert engine.get_record(sandbox_id).state is State.DELETED
        assert sandbox_id not in [u.sandbox_id for u in runtime.units.values()]
        assert member not in runtime.running()  # the member became the sandbox, and went with it
        assert engine.warm_pools()[0].claimed == 1


@pytest.mark.parametrize(
    ("limit", "order"),
    [
        # Round-robin between experiments among those waiting, first come first served within one.
        (1, ["big-0", "big-1", "small-0", "big-2", "small-1", "big-3"]),
        (2, ["big-0", "big-1", "big-2", "small-0", "big-3", "small-1"]),
        (3, ["big-0", "big-1", "big-2", "big-3", "small-0", "small-1"]),
    ],
)
async def test_starts_go_through_the_queue_in_fair_order_at_most_limit_at_once(
    runtime: ScriptedRuntime, limit: int, order: list[str]
) -> None:
    create = runtime.hold("create")
    async with _engine(runtime, max_concurrent_starts=limit) as engine:
        with anyio.fail_after(HANG):
            # A big experiment submits four starts, then a small one submits two.
            for name in ["big-0", "big-1", "big-2", "big-3", "small-0", "small-1"]:
                experiment = name.split("-")[0]
                await engine.start_async(
                    SandboxStartRequest(image="scripted:1", sandbox_id=name),
                    experiment_id=experiment,
                )
            await anyio.wait_all_tasks_blocked()
            assert create.waiting == order[:limit]  # as many creating as the limit allows, no more
            waiting = order[limit:]
            positions = {name: (await engine.get_status(name)).queue_position for name in waiting}
            assert positions == {name: place for place, name in enumerate(waiting, start=1)}
            assert engine.queue.depth == len(waiting)
            for done in range(len(order)):
                create.release()  # one start finishes; its slot goes to the next in line
                await create.arrivals(min(len(order), done + 1 + limit))
                await anyio.wait_all_tasks_blocked()
                assert len(create.waiting) <= limit
            assert create.arrived == order
            for name in order:
                assert (await engine.wait_until_running(name)).state is State.RUNNING
            assert engine.queue.active == 0 and engine.queue.depth == 0


async def test_timers_stop_every_expired_sandbox_at_once_and_spare_a_busy_one(
    engine: SandboxManager, runtime: ScriptedRuntime
) -> None:
    with anyio.fail_after(HANG):
        ids = []
        for _ in range(4):
            started = await engine.start_async(
                SandboxStartRequest(
                    image="scripted:1", auto_clear_seconds=60, auto_delete_seconds=600
                )
            )
            assert started.sandbox_id is not None
            ids.append(started.sandbox_id)
        for sandbox_id in ids:
            await engine.wait_until_running(sandbox_id)
        *idle, busy = ids
        stop = runtime.hold("stop")
        later = time.time() + 3600  # every idle deadline has passed by then
        with engine.call(busy):  # a call in flight: not idle, however long it runs
            async with anyio.create_task_group() as tg:
                tg.start_soon(engine.run_timers, later)
                # All three stops are inside the runtime together: none waits on another's unit.
                assert sorted(await stop.arrivals(3)) == sorted(idle)
                await anyio.wait_all_tasks_blocked()
                assert len(stop.arrived) == 3
                stop.open()
        for sandbox_id in idle:
            record = engine.get_record(sandbox_id)
            assert (record.state, record.reason) == (State.STOPPED, "expired")
        assert engine.get_record(busy).state is State.RUNNING

        # Past their auto-delete time, the three are deleted at once too.
        remove = runtime.hold("remove")
        async with anyio.create_task_group() as tg:
            tg.start_soon(engine.run_timers, later + 600 + 60)
            assert sorted(await remove.arrivals(3)) == sorted(idle)
            remove.open()
        assert [engine.get_record(i).state for i in idle] == [State.DELETED] * 3
        assert sorted(u.sandbox_id for u in runtime.units.values()) == [busy]


# -- the start-up sweep of orphans yields to starts -------------------------------------------


async def _orphans(runtime: ScriptedRuntime, count: int) -> list[str]:
    """``count`` running units of engine kind "rock" whose owner is dead (this pid, another start time)."""
    dead = f"proc:{socket.gethostname()}:{os.getpid()}:1"
    ids = [f"orphan-{i:02d}" for i in range(count)]
    for sandbox_id in ids:
        spec = spec_from_start_request(
            SandboxStartRequest(image="scripted:1", sandbox_id=sandbox_id)
        )
        labels = {LABEL_ENGINE: "rock", LABEL_OWNER: dead, LABEL_SANDBOX_ID: sandbox_id}
        await runtime.start(await runtime.create(spec, labels=labels, rocklet_token="orphan"))
    return ids


def _orphans_left(runtime: ScriptedRuntime) -> list[str]:
    return [u.sandbox_id for u in runtime.units.values() if u.sandbox_id.startswith("orphan-")]


async def test_the_sweep_begins_no_removal_while_the_first_start_is_in_flight(
    runtime: ScriptedRuntime,
) -> None:
    with anyio.fail_after(HANG):
        orphans = await _orphans(runtime, 20)
        start, remove = runtime.hold("start"), runtime.hold("remove")
        async with _engine(runtime) as engine:
            sandbox_id = (await engine.start_async(REQUEST)).sandbox_id
            assert sandbox_id is not None
            await start.arrivals(1)  # the first start is inside runtime.start ...
            await anyio.wait_all_tasks_blocked()
            assert remove.arrived == []  # ... and the sweep, which has found the orphans, waits
            assert len(_orphans_left(runtime)) == 20
            start.open()
            remove.open()
            await engine.wait_until_running(sandbox_id)
            assert sorted(await remove.arrivals(20)) == orphans  # then all go
            assert _orphans_left(runtime) == []


async def test_a_start_during_the_sweep_is_not_held_behind_its_removals_and_pauses_the_rest(
    runtime: ScriptedRuntime,
) -> None:
    with anyio.fail_after(HANG):
        await _orphans(runtime, 20)
        remove = runtime.hold("remove")
        async with _engine(runtime) as engine:
            # No start: the sweep removes at full pace, a few at once.
            await remove.arrivals(removals.CONCURRENCY)
            # A start now runs to the end while those removals are still inside the runtime.
            first = (await engine.start_async(REQUEST)).sandbox_id
            assert first is not None
            await engine.wait_until_running(first)
            assert len(remove.waiting) == removals.CONCURRENCY
            # While another start is in flight, removals that finish make room for none.
            create = runtime.hold("create")
            second = (await engine.start_async(REQUEST)).sandbox_id
            assert second is not None
            await create.arrivals(1)
            while remove.waiting:
                remove.release()
            await anyio.wait_all_tasks_blocked()
            assert len(remove.arrived) == removals.CONCURRENCY
            create.open()
            remove.open()
            await engine.wait_until_running(second)
            await remove.arrivals(20)
            assert _orphans_left(runtime) == []


async def test_the_sweep_removes_one_at_a_time_when_starts_never_pause(
    runtime: ScriptedRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(removals, "MAX_YIELD", 0.0)  # it has yielded long enough at once
    with anyio.fail_after(HANG):
        await _orphans(runtime, 3)
        start, remove = runtime.hold("start"), runtime.hold("remove")
        async with _engine(runtime) as engine:
            sandbox_id = (await engine.start_async(REQUEST)).sandbox_id
            assert sandbox_id is not None
            await start.arrivals(1)
            for n in (1, 2, 3):
                await remove.arrivals(n)
                await anyio.wait_all_tasks_blocked()
                assert len(remove.arrived) == n  # one removal in flight, never more
                remove.release()
            start.open()
            await engine.wait_until_running(sandbox_id)
            assert _orphans_left(runtime) == []


async def test_sixty_queued_starts_in_three_priorities_are_created_highest_first(
    runtime: ScriptedRuntime,
) -> None:
    create = runtime.hold("create")
    async with _engine(runtime, max_concurrent_starts=1) as engine:
        with anyio.fail_after(HANG):
            await engine.start_async(SandboxStartRequest(image="scripted:1", sandbox_id="holder"))
            await create.arrivals(1)  # the one slot is taken: everything after waits in the queue
            names = []
            for priority, name in ((1, "low"), (5, "normal"), (9, "urgent")):
                for i in range(20):
                    names.append(f"{name}-{i:02d}")
                    request = SandboxStartRequest(
                        image="scripted:1", sandbox_id=names[-1], priority=priority
                    )
                    await engine.start_async(request, experiment_id=f"exp-{i % 3}")
            await anyio.wait_all_tasks_blocked()
            assert (await engine.get_status("urgent-00")).queue_position == 1
            assert (await engine.get_status("low-19")).queue_position == 60
            create.open()
            for name in names:
                assert (await engine.wait_until_running(name)).state is State.RUNNING
        arrived = [a for a in create.arrived if a != "holder"]
        assert [a.split("-")[0] for a in arrived] == ["urgent"] * 20 + ["normal"] * 20 + [
            "low"
        ] * 20
        assert arrived[:3] == ["urgent-00", "urgent-01", "urgent-02"]  # experiments take turns


async def test_a_stops_removal_waits_for_a_start_in_flight_and_then_deletes_the_record(
    engine: SandboxManager, runtime: ScriptedRuntime
) -> None:
    """A sandbox deleted at its stop leaves through the removal queue: while another sandbox is
    starting its unit waits (the stop has returned, the record says stopped), and once the
    start is done the unit goes and the record turns deleted."""
    with anyio.fail_after(HANG):
        first = (await engine.start_async(REQUEST)).sandbox_id
        assert first is not None
        await engine.wait_until_running(first)
        remove = runtime.hold("remove")
        create = runtime.hold("create")
        second = (await engine.start_async(REQUEST)).sandbox_id
        assert second is not None
        await create.arrivals(1)  # the second start is in flight
        await engine.stop(first)  # returns at once
        await anyio.wait_all_tasks_blocked()
        assert engine.get_record(first).state is State.STOPPED
        assert remove.arrived == []  # its removal yields to the start
        assert len(engine.removals) == 1
        create.open()
        await engine.wait_until_running(second)
        assert await remove.arrivals(1) == [first]
        remove.open()
        while engine.get_record(first).state is not State.DELETED:
            await anyio.wait_all_tasks_blocked()
        assert engine.removals.removed == 1


async def test_units_waiting_for_removal_at_close_are_handed_to_the_runtime(
    runtime: ScriptedRuntime, tmp_path: Path
) -> None:
    """An engine that keeps sandboxes past its close (the admin) does not wait for removals
    stuck behind a start: the runtime's discard takes them and their records turn deleted."""
    with anyio.fail_after(HANG):
        store = str(tmp_path / "records.db")
        async with _engine(runtime, remove_on_close=False, store_path=store) as engine:
            first = (await engine.start_async(REQUEST)).sandbox_id
            assert first is not None
            await engine.wait_until_running(first)
            create = runtime.hold("create")
            second = (await engine.start_async(REQUEST)).sandbox_id
            assert second is not None
            await create.arrivals(1)
            await engine.stop(first)
            await anyio.wait_all_tasks_blocked()
            assert len(engine.removals) == 1
        record = SqliteRecordStore(store).get(first)
        assert record is not None and record.state is State.DELETED
        assert all(unit.sandbox_id != first for unit in runtime.units.values())


async def test_a_start_waiting_longer_than_its_idle_limit_is_not_stopped_as_idle(
    engine: SandboxManager, runtime: ScriptedRuntime
) -> None:
    """``auto_clear_seconds`` counts from running: a start held up (a long start queue, a slow
    image) is bounded by its startup budget, not expired as idle before it ever ran."""
    with anyio.fail_after(HANG):
        create = runtime.hold("create")
        sandbox_id = (
            await engine.start_async(SandboxStartRequest(image="scripted:1", auto_clear_seconds=1))
        ).sandbox_id
        assert sandbox_id is not None
        await create.arrivals(1)
        await engine.run_timers(at=time.time() + 30)
        assert engine.get_record(sandbox_id).state is State.PENDING
        create.open()
        await engine.wait_until_running(sandbox_id)
        await engine.run_timers(at=time.time() + 30)
        record = engine.get_record(sandbox_id)
        assert record.state in (State.STOPPED, State.DELETED) and record.reason == "expired"


async def _stopped_with_failing_removals(
    engine: SandboxManager, runtime: ScriptedRuntime, failures: int
) -> str:
    """A sandbox started, running, then stopped (deleted at its stop) while the runtime's next
    ``failures`` removals fail; its id. Its removal attempts run on the queue's own timers, so
    these tests wait for conditions rather than for all tasks blocked."""
    sandbox_id = (await engine.start_async(REQUEST)).sandbox_id
    assert sandbox_id is not None
    await engine.wait_until_running(sandbox_id)
    runtime.remove_failures = failures
    await engine.stop(sandbox_id)
    return sandbox_id


async def test_a_removal_that_fails_is_tried_again_and_the_record_turns_deleted_once_the_unit_is_gone(
    engine: SandboxManager, runtime: ScriptedRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runtime does not answer for a while (a wedged dockerd): the stop's removal is tried
    again, the sandbox stays stopped meanwhile, and nothing is left once it answers."""
    monkeypatch.setattr(removals, "RETRY_FIRST", 0.5)  # far longer than the look below takes
    with anyio.fail_after(HANG):
        sandbox_id = await _stopped_with_failing_removals(engine, runtime, 2)
        await eventually_async(
            lambda: engine.removals.failed >= 1,
            what="a failed removal",
            timeout=HANG,
            interval=0.01,
        )
        # Between two attempts: the unit is still there, the record says stopped, not deleted.
        assert engine.get_record(sandbox_id).state is State.STOPPED
        assert any(unit.sandbox_id == sandbox_id for unit in runtime.units.values())
        assert len(engine.removals) == 1
        await eventually_async(
            lambda: engine.get_record(sandbox_id).state is State.DELETED,
            what="the record deleted",
            timeout=HANG,
            interval=0.01,
        )
        assert engine.removals.failed == 2 and runtime.remove_failures == 0
        assert all(unit.sandbox_id != sandbox_id for unit in runtime.units.values())


async def test_a_removal_given_up_leaves_its_unit_to_the_engines_close(
    runtime: ScriptedRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(removals, "RETRY_FIRST", 0.01)
    monkeypatch.setattr(removals, "ATTEMPTS", 2)
    with anyio.fail_after(HANG):
        async with _engine(runtime) as engine:
            sandbox_id = await _stopped_with_failing_removals(engine, runtime, 2)
            await eventually_async(
                lambda: engine.get_record(sandbox_id).state is State.DELETED,
                what="the record deleted",
                timeout=HANG,
                interval=0.01,
            )
            assert engine.removals.failed == 2 and len(engine.removals) == 0
            assert any(unit.sandbox_id == sandbox_id for unit in runtime.units.values())  # given up
        # The close found it by the engine's label and removed it.
        assert all(unit.sandbox_id != sandbox_id for unit in runtime.units.values())


async def test_a_removal_waiting_for_its_next_attempt_at_close_is_handed_to_the_runtime(
    runtime: ScriptedRuntime, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(
        removals, "RETRY_FIRST", 3600.0
    )  # the next attempt would come after the close
    with anyio.fail_after(HANG):
        store = str(tmp_path / "records.db")
        async with _engine(runtime, remove_on_close=False, store_path=store) as engine:
            sandbox_id = await _stopped_with_failing_removals(engine, runtime, 1)
            await eventually_async(
                lambda: engine.removals.failed >= 1,
                what="a failed removal",
                timeout=HANG,
                interval=0.01,
            )
            assert len(engine.removals) == 1
        record = SqliteRecordStore(store).get(sandbox_id)
        assert record is not None and record.state is State.DELETED
        assert all(unit.sandbox_id != sandbox_id for unit in runtime.units.values())
