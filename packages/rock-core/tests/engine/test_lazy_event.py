"""The engine's one-shot event (:class:`rock_core.engine.lazy_event.LazyEvent`): anyio's
``Event`` for its callers, and no ``anyio.Event`` made until a task has to wait."""

from __future__ import annotations

import anyio
import pytest

from rock_core.engine.lazy_event import LazyEvent
from rock_core.engine.live import LiveSandbox
from rock_core.engine.start_queue import StartQueue
from rock_core.testing.record_conformance import sample_record

pytestmark = pytest.mark.anyio


def _made(event: LazyEvent) -> bool:
    return event._event is not None


async def test_a_sandbox_set_and_never_waited_for_makes_no_anyio_event() -> None:
    live = LiveSandbox(record=sample_record())
    events = [live.settled, live.start_done, live.archive_done]
    live.begin_start()
    events += [live.settled, live.start_done]
    for event in events:
        event.set()
        assert event.is_set()
        await event.wait()  # set: returns at once
    assert not any(_made(event) for event in events)


async def test_a_freed_slot_makes_no_anyio_event_unless_waited_for() -> None:
    queue = StartQueue(2)
    async with queue.slot("exp", "a"):
        pass
    assert not _made(queue._freed)


async def test_a_waiting_task_is_woken_by_set() -> None:
    event = LazyEvent()
    woken: list[str] = []

    async def waiter(name: str) -> None:
        await event.wait()
        woken.append(name)

    async with anyio.create_task_group() as group:
        group.start_soon(waiter, "first")
        group.start_soon(waiter, "second")
        await anyio.wait_all_tasks_blocked()
        assert woken == [] and not event.is_set()
        event.set()
        event.set()  # twice: no harm
        await anyio.wait_all_tasks_blocked()
        assert sorted(woken) == ["first", "second"]


async def test_a_wait_is_a_cancellation_point_set_or_not() -> None:
    event = LazyEvent()
    with anyio.CancelScope() as scope:
        scope.cancel()
        await event.wait()  # not set: cancelled
    assert scope.cancelled_caught
    event.set()
    with anyio.CancelScope() as scope:
        scope.cancel()
        await event.wait()  # set: still checkpoints, as anyio's does
    assert scope.cancelled_caught


async def test_a_cancelled_waiter_leaves_the_event_for_others() -> None:
    event = LazyEvent()
    woken: list[str] = []

    async def waiter() -> None:
        await event.wait()
        woken.append("other")

    async with anyio.create_task_group() as group:
        with anyio.CancelScope() as scope:
            group.start_soon(waiter)
            group.start_soon(_cancel_when_blocked, scope)
            await event.wait()
        assert scope.cancelled_caught and not event.is_set()
        event.set()
    assert woken == ["other"]


async def _cancel_when_blocked(scope: anyio.CancelScope) -> None:
    await anyio.wait_all_tasks_blocked()
    scope.cancel()
