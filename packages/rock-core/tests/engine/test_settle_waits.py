"""Waits for any of many starting sandboxes (:mod:`rock_core.engine.settle_waits`): after its
first look a watch looks at the sandboxes that changed and the ids added since, not at every
id, and misses none: one settled before the wait began, one added settled, one settling during
the wait, one settled while the log ran past the watch."""

from __future__ import annotations

import anyio
import pytest

from rock_core.actions import SandboxStartRequest
from rock_core.engine import settle_waits
from rock_core.engine.config import EngineConfig
from rock_core.engine.live import LiveSandbox
from rock_core.engine.manager import SandboxManager
from rock_core.engine.settle_waits import Changes, SettleWatch
from rock_core.states import State
from rock_core.testing import ScriptedRuntime
from rock_core.testing.record_conformance import sample_record

pytestmark = pytest.mark.anyio

# A guard against a test hanging (a missed wake-up): it fails the test; nothing waits for it.
HANG = 30
REQUEST = SandboxStartRequest(image="scripted:1")


@pytest.fixture(autouse=True)
def no_timed_full_look(monkeypatch: pytest.MonkeyPatch) -> None:
    """No full look by the clock: what a watch sees here comes from the changes alone."""
    monkeypatch.setattr(settle_waits, "FULL_LOOK", 3600.0)


class _Core:
    """What a watch reads of the engine's core: its sandboxes and its changes."""

    def __init__(self, ids: list[str], kept: int = settle_waits.KEPT_CHANGES) -> None:
        self.live = {i: LiveSandbox(record=sample_record(i, state=State.PENDING)) for i in ids}
        self.changes = Changes(kept)


def _settle(core: _Core, sandbox_id: str, *, note: bool = True) -> None:
    core.live[sandbox_id].settled.set()
    if note:
        core.changes.note(sandbox_id)


async def test_a_sandbox_settled_before_the_wait_began_is_answered() -> None:
    core = _Core(["a", "b"])
    _settle(core, "a", note=False)  # before any watch: the first look sees every id
    watch = SettleWatch()
    watch.add(["a", "b"])
    assert await watch.wait(core.live, core.changes, 0) == ["a"]
    assert list(watch.pending) == ["b"]


async def test_after_its_first_look_a_watch_looks_only_at_what_changed() -> None:
    core = _Core(["a", "b", "c"])
    watch = SettleWatch()
    watch.add(["a", "b", "c"])
    assert watch.look(core.live, core.changes) == []
    _settle(core, "b", note=False)
    assert watch.look(core.live, core.changes) == []  # b was not noted: not looked at
    core.changes.note("b")
    assert watch.look(core.live, core.changes) == ["b"]
    assert watch.look(core.live, core.changes) == []  # answered once


async def test_an_id_added_settled_is_answered_at_the_next_look() -> None:
    core = _Core(["a", "b"])
    watch = SettleWatch()
    watch.add(["a"])
    assert watch.look(core.live, core.changes) == []
    _settle(core, "b", note=False)  # before it was added
    watch.add(["b", "a"])
    assert watch.look(core.live, core.changes) == ["b"]
    assert list(watch.pending) == ["a"]


async def test_a_wait_is_woken_by_a_sandbox_settling_during_it() -> None:
    core = _Core(["a", "b", "c"])
    watch = SettleWatch()
    watch.add(["a", "b", "c"])
    answers: list[list[str]] = []

    async def waiter() -> None:
        answers.append(await watch.wait(core.live, core.changes, 3600))

    async with anyio.create_task_group() as group:
        group.start_soon(waiter)
        await anyio.wait_all_tasks_blocked()
        core.changes.note("a")  # a change, nothing settled: the wait goes on
        await anyio.wait_all_tasks_blocked()
        assert answers == []
        _settle(core, "c")
    assert answers == [["c"]]


async def test_a_watch_the_log_ran_past_looks_at_every_id() -> None:
    core = _Core(["a", "b"], kept=2)
    watch = SettleWatch()
    watch.add(["a", "b"])
    assert watch.look(core.live, core.changes) == []
    _settle(core, "a")
    for other in ("x", "y"):  # a's note falls out of the log
        core.changes.note(other)
    assert watch.look(core.live, core.changes) == ["a"]


async def test_every_id_is_looked_at_again_once_the_full_look_is_due(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    core = _Core(["a", "b"])
    watch = SettleWatch()
    watch.add(["a", "b"])
    assert watch.look(core.live, core.changes) == []
    _settle(core, "b", note=False)  # settled by a path that notes nothing (a recovery)
    monkeypatch.setattr(settle_waits, "FULL_LOOK", 0.0)
    assert watch.look(core.live, core.changes) == ["b"]


def test_the_log_of_changes_answers_what_was_noted_since() -> None:
    changes = Changes(2)
    assert changes.since(0) == []
    changes.note("a")
    changes.note("b")
    assert changes.since(0) == ["b", "a"] and changes.since(1) == ["b"]
    changes.note("c")
    assert changes.since(0) is None and changes.since(1) == ["c", "b"]


async def test_the_engine_notes_a_start_settling_and_a_stop_during_a_start(
    runtime: ScriptedRuntime,
) -> None:
    config = EngineConfig(timer_interval=3600, reconcile_interval=3600)
    create = runtime.hold("create")
    async with SandboxManager(config, runtime=runtime) as engine:
        try:
            with anyio.fail_after(HANG):
                ids = [(await engine.start_async(REQUEST)).sandbox_id for _ in range(3)]
                watch = SettleWatch()
                assert await engine.wait_any(ids, 0, watch=watch) == []  # the first, full look
                await create.arrivals(3)
                create.release(ids[0])
                assert await engine.wait_any((), HANG, watch=watch) == [ids[0]]  # running
                async with anyio.create_task_group() as group:
                    group.start_soon(engine.stop, ids[1])  # its start is cancelled
                    assert await engine.wait_any((), HANG, watch=watch) == [ids[1]]
                assert list(watch.pending) == [ids[2]]
        finally:
            runtime.open_gates()


class _CountingScopes:
    """``anyio`` for settle_waits, counting the cancel scopes a wait makes."""

    def __init__(self) -> None:
        self.made = 0

    def __getattr__(self, name: str) -> object:
        return getattr(anyio, name)

    def CancelScope(self, **kwargs: float) -> anyio.CancelScope:  # noqa: N802 - anyio's name
        self.made += 1
        return anyio.CancelScope(**kwargs)

    def move_on_after(self, delay: float) -> object:
        self.made += 1
        return anyio.move_on_after(delay)


async def test_a_held_wait_makes_one_cancel_scope_for_its_many_wake_ups(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    counting = _CountingScopes()
    monkeypatch.setattr(settle_waits, "anyio", counting)
    core = _Core(["a", "b"])
    watch = SettleWatch()
    watch.add(["a", "b"])
    answers: list[list[str]] = []

    async def waiter() -> None:
        answers.append(await watch.wait(core.live, core.changes, 3600))

    async with anyio.create_task_group() as group:
        group.start_soon(waiter)
        for _ in range(5):  # five changes of other sandboxes: five wake-ups
            await anyio.wait_all_tasks_blocked()
            core.changes.note("other")
        await anyio.wait_all_tasks_blocked()
        _settle(core, "b")
    assert answers == [["b"]]
    assert counting.made == 1


async def test_a_wait_whose_time_runs_out_answers_nothing() -> None:
    core = _Core(["a"])
    watch = SettleWatch()
    watch.add(["a"])
    assert await watch.wait(core.live, core.changes, 0.05) == []
    assert list(watch.pending) == ["a"]
