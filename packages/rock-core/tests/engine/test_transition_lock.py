"""A sandbox's transition lock (:func:`rock_core.engine.live.transition_lock`): taken without a
turn of the event loop when no one holds it, still waited for in turn when held, and a cancelled
caller still raises at once."""

from __future__ import annotations

import anyio
import pytest

from rock_core.engine.live import LiveSandbox
from rock_core.testing.record_conformance import sample_record

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_an_uncontended_transition_lock_is_taken_without_a_turn_of_the_loop() -> None:
    live = LiveSandbox(record=sample_record())
    ran: list[str] = []
    async with anyio.create_task_group() as group:
        group.start_soon(_note, ran)  # runs at the loop's next turn
        async with live.lock:
            assert ran == []  # taking the lock gave the loop no turn
        await anyio.sleep(0)
    assert ran == ["other task"]


async def test_a_held_transition_lock_is_waited_for_and_a_cancelled_caller_raises() -> None:
    live = LiveSandbox(record=sample_record())
    order: list[str] = []

    async def second() -> None:
        async with live.lock:
            order.append("second")

    async with anyio.create_task_group() as group:
        async with live.lock:
            group.start_soon(second)
            await anyio.wait_all_tasks_blocked()
            order.append("first")
    assert order == ["first", "second"]
    with anyio.CancelScope() as scope:
        scope.cancel()
        async with live.lock:
            order.append("taken while cancelled")  # never reached
    assert scope.cancelled_caught and "taken while cancelled" not in order
    assert not live.lock.locked()


async def _note(ran: list[str]) -> None:
    ran.append("other task")
