"""The start queue bounds concurrency, is fair across experiments and survives cancellation."""

from __future__ import annotations

import anyio
import pytest

from rock_core.engine.start_queue import StartQueue

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def test_never_more_than_max_concurrency_and_everyone_gets_through():
    queue = StartQueue(max_concurrency=3)
    running = peak = 0
    done = []

    async def start(i: int) -> None:
        nonlocal running, peak
        async with queue.slot(f"exp-{i % 2}", f"sb-{i}"):
            running += 1
            peak = max(peak, running)
            await anyio.sleep(0.001)
            running -= 1
        done.append(i)

    async with anyio.create_task_group() as tg:
        for i in range(40):
            tg.start_soon(start, i)
    assert peak == 3
    assert sorted(done) == list(range(40))
    assert queue.active == 0 and queue.depth == 0


async def test_turns_alternate_between_experiments():
    queue = StartQueue(max_concurrency=1)
    order = []
    gate = anyio.Event()

    async def holder() -> None:
        async with queue.slot("first", "holder"):
            await gate.wait()

    async def start(key: str, item: str) -> None:
        async with queue.slot(key, item):
            order.append(item)

    async with anyio.create_task_group() as tg:
        tg.start_soon(holder)
        await anyio.sleep(0.01)
        # A big experiment floods the queue first, a small one arrives after it.
        for i in range(4):
            tg.start_soon(start, "big", f"big-{i}")
            await anyio.sleep(0)
        for i in range(2):
            tg.start_soon(start, "small", f"small-{i}")
            await anyio.sleep(0)
        await anyio.sleep(0.01)
        assert queue.depth == 6
        assert [queue.position(x) for x in ("big-0", "small-0", "big-1", "small-1", "big-2", "big-3")] == [1, 2, 3, 4, 5, 6]
        assert queue.position("holder") is None
        gate.set()
    assert order == ["big-0", "small-0", "big-1", "small-1", "big-2", "big-3"]


async def test_a_cancelled_waiter_leaves_no_trace():
    queue = StartQueue(max_concurrency=1)
    gate = anyio.Event()
    order = []

    async def holder() -> None:
        async with queue.slot("a", "holder"):
            await gate.wait()

    async def start(item: str) -> None:
        async with queue.slot("a", item):
            order.append(item)

    async with anyio.create_task_group() as tg:
        tg.start_soon(holder)
        await anyio.sleep(0.01)
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as inner:
                inner.start_soon(start, "cancelled")
                await anyio.sleep(0.01)
                assert queue.position("cancelled") == 1
                scope.cancel()
        tg.start_soon(start, "next")
        await anyio.sleep(0.01)
        assert queue.position("cancelled") is None
        assert queue.position("next") == 1
        gate.set()
    assert order == ["next"]
    assert queue.active == 0 and queue.depth == 0


def test_rejects_a_zero_bound():
    with pytest.raises(ValueError, match="max_concurrency must be at least 1, got 0"):
        StartQueue(0)
