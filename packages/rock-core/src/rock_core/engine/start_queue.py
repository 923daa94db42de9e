"""The start queue: bounded concurrency for sandbox starts, by priority, fair across experiments.

A burst of start requests never fails for want of a slot: each request waits its turn. Turns go:

1. **by priority**: a request of a higher priority (``SandboxSpec.priority``, 0..9, 5 normal)
   starts before one of a lower priority;
2. **fairly within a priority**: round-robin across *fairness keys* (the experiment id), so one
   experiment submitting a thousand sandboxes does not starve another that submits ten; within
   a key, first come, first served;
3. **with aging, so nothing starves**: a priority's waiting requests gain one level for every
   ``aging_seconds`` (default 60 s) its oldest request has waited. A priority-0 request that has
   waited 9 minutes competes with fresh priority-9 ones (ties go to the higher base priority),
   and a steady stream of urgent work delays normal work by at most ``aging_seconds`` per level
   between them.

    queue = StartQueue(max_concurrency=4)
    async with queue.slot("exp-a", "sandbox-1", priority=7):
        ...  # create and start the container

While a request waits, :meth:`StartQueue.position` tells where it stands (1 = next to start, if
nothing else arrives), which ``get_status`` shows as the ``queued`` phase.
"""

from __future__ import annotations

import collections
import contextlib
import time
from collections.abc import AsyncIterator, Callable

import anyio

from rock_core.engine.lazy_event import LazyEvent
from rock_core.models import PRIORITY_NORMAL

__all__ = ["DEFAULT_AGING_SECONDS", "StartQueue"]

#: Seconds of waiting that raise a priority's requests by one level.
DEFAULT_AGING_SECONDS = 60.0


class _Waiter:
    __slots__ = ("key", "item", "priority", "since", "granted")

    def __init__(self, key: str, item: str, priority: int, since: float) -> None:
        self.key = key
        self.item = item
        self.priority = priority
        self.since = since
        self.granted = anyio.Event()


class _Band:
    """The waiting requests of one priority: a queue per fairness key, and the keys' turns."""

    __slots__ = ("waiting", "turns")

    def __init__(self) -> None:
        self.waiting: dict[str, collections.deque[_Waiter]] = {}
        self.turns: collections.deque[str] = collections.deque()

    def add(self, waiter: _Waiter) -> None:
        if waiter.key not in self.waiting:
            self.waiting[waiter.key] = collections.deque()
            self.turns.append(waiter.key)
        self.waiting[waiter.key].append(waiter)

    def pop(self) -> _Waiter:
        key = self.turns.popleft()
        queue = self.waiting[key]
        waiter = queue.popleft()
        if queue:
            self.turns.append(key)
        else:
            del self.waiting[key]
        return waiter

    def forget(self, waiter: _Waiter) -> None:
        queue = self.waiting[waiter.key]
        queue.remove(waiter)
        if not queue:
            del self.waiting[waiter.key]
            self.turns.remove(waiter.key)

    def oldest(self) -> float:
        return min(queue[0].since for queue in self.waiting.values())

    def copy(self) -> _Band:
        band = _Band()
        band.waiting = {key: collections.deque(q) for key, q in self.waiting.items()}
        band.turns = collections.deque(self.turns)
        return band

    def __len__(self) -> int:
        return sum(len(q) for q in self.waiting.values())


class StartQueue:
    """Grant at most ``max_concurrency`` slots at once: by priority with aging, round-robin across
    fairness keys within a priority (see the module docstring).

    :param max_concurrency: how many starts may run at the same time (at least 1).
    :param aging_seconds: waiting this long raises a priority's requests by one level.
    :param clock: seconds, monotonic (tests pass their own).
    """

    def __init__(
        self,
        max_concurrency: int,
        *,
        aging_seconds: float = DEFAULT_AGING_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be at least 1, got {max_concurrency}")
        if not aging_seconds > 0:
            raise ValueError(f"aging_seconds must be > 0, got {aging_seconds}")
        self.max_concurrency = max_concurrency
        self.aging_seconds = aging_seconds
        self._clock = clock
        self._active = 0
        self._bands: dict[int, _Band] = {}
        self._freed = LazyEvent()

    @property
    def active(self) -> int:
        """How many slots are held right now."""
        return self._active

    async def freed(self) -> None:
        """Return once a held slot is freed (not handed to a waiter): for a task that waits
        for the queue to fall idle without polling it."""
        await self._freed.wait()

    @property
    def depth(self) -> int:
        """How many requests are waiting for a slot."""
        return sum(len(band) for band in self._bands.values())

    def position(self, item: str) -> int | None:
        """1-based place of ``item`` among the waiting requests, or ``None`` if it is not waiting.

        The place is the order in which slots would be granted if nothing else arrived and the
        waits stood still.
        """
        return self.positions().get(item)

    def positions(self) -> dict[str, int]:
        """The place of every waiting request by item (1 = next): one pass over the queue, for
        a caller that asks about many items at once (a listing)."""
        bands = {priority: band.copy() for priority, band in self._bands.items()}
        now = self._clock()
        order: dict[str, int] = {}
        while bands:
            priority = self._next_priority(bands, now)
            band = bands[priority]
            order[band.pop().item] = len(order) + 1
            if not band.turns:
                del bands[priority]
        return order

    def _next_priority(self, bands: dict[int, _Band], now: float) -> int:
        """The band whose turn it is: the highest priority once each is raised by its oldest
        request's wait (a level per ``aging_seconds``); ties go to the higher base priority."""
        return max(
            bands, key=lambda p: (p + int((now - bands[p].oldest()) // self.aging_seconds), p)
        )

    @contextlib.asynccontextmanager
    async def slot(
        self, key: str, item: str, priority: int = PRIORITY_NORMAL
    ) -> AsyncIterator[Callable[[], None]]:
        """Wait for a slot for ``item`` under fairness ``key`` at ``priority``, hold it for the
        block, release it. The block gets a function that releases it sooner (once the part
        that needs bounding is done: a sandbox's rocklet boots in its own unit, outside the slot).

        Cancellation while waiting leaves the queue as if the request never came; a slot granted
        to a request cancelled before it could use it is passed on.
        """
        if self._active < self.max_concurrency and not self._bands:
            self._active += 1
        else:
            waiter = _Waiter(key, item, priority, self._clock())
            self._bands.setdefault(priority, _Band()).add(waiter)
            try:
                await waiter.granted.wait()
            except BaseException:
                if waiter.granted.is_set():
                    self._release()  # granted and cancelled at once: pass the slot on
                else:
                    self._forget(waiter)
                raise
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self._release()

        try:
            yield release
        finally:
            release()

    def _forget(self, waiter: _Waiter) -> None:
        band = self._bands[waiter.priority]
        band.forget(waiter)
        if not band.turns:
            del self._bands[waiter.priority]

    def _release(self) -> None:
        # Hand the slot straight to the next waiter (the count stays the same) or free it.
        if self._bands:
            priority = self._next_priority(self._bands, self._clock())
            band = self._bands[priority]
            waiter = band.pop()
            if not band.turns:
                del self._bands[priority]
            waiter.granted.set()
        else:
            self._active -= 1
            self._freed.set()
            self._freed = LazyEvent()
