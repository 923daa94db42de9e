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
        await anyio.wait_all_tasks_blocked()
        # A big experiment floods the queue first, a small one arrives after it.
        for i in range(4):
            tg.start_soon(start, "big", f"big-{i}")
            await anyio.sleep(0)
        for i in range(2):
            tg.start_soon(start, "small", f"small-{i}")
            await anyio.sleep(0)
        await anyio.wait_all_tasks_blocked()
        assert queue.depth == 6
        assert [
            queue.position(x) for x in ("big-0", "small-0", "big-1", "small-1", "big-2", "big-3")
        ] == [1, 2, 3, 4, 5, 6]
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
        await anyio.wait_all_tasks_blocked()
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as inner:
                inner.start_soon(start, "cancelled")
                await anyio.wait_all_tasks_blocked()
                assert queue.position("cancelled") == 1
                scope.cancel()
        tg.start_soon(start, "next")
        await anyio.wait_all_tasks_blocked()
        assert queue.position("cancelled") is None
        assert queue.position("next") == 1
        gate.set()
    assert order == ["next"]
    assert queue.active == 0 and queue.depth == 0


def test_rejects_a_zero_bound():
    with pytest.raises(ValueError, match="max_concurrency must be at least 1, got 0"):
        StartQueue(0)


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_sixty_starts_in_three_priorities_go_highest_first_fair_within_each():
    clock = Clock()
    queue = StartQueue(max_concurrency=1, aging_seconds=60, clock=clock)
    order: list[str] = []
    release = anyio.Event()

    async def start(key: str, item: str, priority: int) -> None:
        async with queue.slot(key, item, priority):
            order.append(item)

    async def holder() -> None:
        async with queue.slot("hold", "holder"):
            await release.wait()

    async with anyio.create_task_group() as tg:
        tg.start_soon(holder)
        await anyio.wait_all_tasks_blocked()
        # Low first, then normal, then urgent: arrival order must not decide.
        for priority, name in ((1, "low"), (5, "normal"), (9, "urgent")):
            for i in range(20):
                tg.start_soon(start, f"{name}-exp-{i % 2}", f"{name}-{i:02d}", priority)
                await anyio.wait_all_tasks_blocked()
        assert queue.depth == 60
        positions = queue.positions()
        assert (
            positions["urgent-00"] == 1
            and positions["normal-00"] == 21
            and positions["low-00"] == 41
        )
        release.set()
    assert [item.split("-")[0] for item in order] == ["urgent"] * 20 + ["normal"] * 20 + [
        "low"
    ] * 20
    # Within a priority, turns alternate between experiments, first come first served in each.
    urgent = order[:20]
    assert urgent[:4] == ["urgent-00", "urgent-01", "urgent-02", "urgent-03"]
    assert queue.active == 0 and queue.depth == 0


async def test_a_low_priority_start_is_never_starved_by_a_stream_of_urgent_ones():
    clock = Clock()
    queue = StartQueue(max_concurrency=1, aging_seconds=60, clock=clock)
    order: list[str] = []
    gates: dict[str, anyio.Event] = {}

    async def start(item: str, priority: int) -> None:
        gates[item] = anyio.Event()
        async with queue.slot("exp", item, priority):
            order.append(item)
            await gates[item].wait()

    async with anyio.create_task_group() as tg:
        tg.start_soon(start, "first", 9)
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(start, "patient", 0)  # waits from t=1000
        await anyio.wait_all_tasks_blocked()
        served = 0
        # Urgent starts keep arriving, one a minute; each running start ends after a minute.
        while "patient" not in order:
            clock.now += 60
            tg.start_soon(start, f"urgent-{served}", 9)
            await anyio.wait_all_tasks_blocked()
            gates[order[-1]].set()
            await anyio.wait_all_tasks_blocked()
            served += 1
            assert served < 20, order
        for item in order:
            gates[item].set()
        for gate in gates.values():
            gate.set()
    # Nine levels at one a minute, and the tie goes to the urgent one: served in the tenth minute.
    assert order.index("patient") == 10, order


async def test_a_slot_released_early_lets_the_next_start_in_and_is_not_released_twice():
    queue = StartQueue(max_concurrency=1)
    second_in = anyio.Event()
    first_may_leave = anyio.Event()

    async def first() -> None:
        async with queue.slot("exp", "sb-1") as release:
            release()  # its bounded part is done: the rest runs outside the count
            release()
            await first_may_leave.wait()

    async def second() -> None:
        async with queue.slot("exp", "sb-2"):
            second_in.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(first)
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(second)
        with anyio.fail_after(10):
            await second_in.wait()  # while the first is still in its block
        first_may_leave.set()
    assert queue.active == 0 and queue.depth == 0
