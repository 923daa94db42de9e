"""The start queue: bounded concurrency for sandbox starts, fair across experiments.

A burst of start requests never fails for want of a slot: each request waits its turn. Turns are
given round-robin across *fairness keys* (the experiment id), so one experiment submitting a
thousand sandboxes does not starve another that submits ten. Within a key, order is first come,
first served.

    queue = StartQueue(max_concurrency=4)
    async with queue.slot("exp-a", "sandbox-1"):
        ...  # create and start the container

While a request waits, :meth:`StartQueue.position` tells where it stands (1 = next to start),
which ``get_status`` shows as the ``queued`` phase.
"""

from __future__ import annotations

import collections
import contextlib
from typing import AsyncIterator

import anyio

__all__ = ["StartQueue"]


class _Waiter:
    __slots__ = ("key", "item", "granted")

    def __init__(self, key: str, item: str) -> None:
        self.key = key
        self.item = item
        self.granted = anyio.Event()


class StartQueue:
    """Grant at most ``max_concurrency`` slots at once, round-robin across fairness keys.

    :param max_concurrency: how many starts may run at the same time (at least 1).
    """

    def __init__(self, max_concurrency: int) -> None:
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be at least 1, got {max_concurrency}")
        self.max_concurrency = max_concurrency
        self._active = 0
        # Waiting requests per key, and the keys in the order they get their next turn.
        self._waiting: dict[str, collections.deque[_Waiter]] = {}
        self._turns: collections.deque[str] = collections.deque()

    @property
    def active(self) -> int:
        """How many slots are held right now."""
        return self._active

    @property
    def depth(self) -> int:
        """How many requests are waiting for a slot."""
        return sum(len(q) for q in self._waiting.values())

    def position(self, item: str) -> int | None:
        """1-based place of ``item`` among the waiting requests, or ``None`` if it is not waiting.

        The place is the order in which slots will be granted if nothing else arrives.
        """
        return self.positions().get(item)

    def positions(self) -> dict[str, int]:
        """The place of every waiting request by item (1 = next): one pass over the queue, for
        a caller that asks about many items at once (a listing)."""
        return {waiter.item: place for place, waiter in enumerate(self._grant_order(), start=1)}

    def _grant_order(self) -> list[_Waiter]:
        queues = {key: collections.deque(q) for key, q in self._waiting.items()}
        turns = collections.deque(self._turns)
        order: list[_Waiter] = []
        while turns:
            key = turns.popleft()
            queue = queues[key]
            order.append(queue.popleft())
            if queue:
                turns.append(key)
        return order

    @contextlib.asynccontextmanager
    async def slot(self, key: str, item: str) -> AsyncIterator[None]:
        """Wait for a slot for ``item`` under fairness ``key``, hold it for the block, release it.

        Cancellation while waiting leaves the queue as if the request never came; a slot granted
        to a request cancelled before it could use it is passed on.
        """
        if self._active < self.max_concurrency and not self._turns:
            self._active += 1
        else:
            waiter = _Waiter(key, item)
            if key not in self._waiting:
                self._waiting[key] = collections.deque()
                self._turns.append(key)
            self._waiting[key].append(waiter)
            try:
                await waiter.granted.wait()
            except BaseException:
                if waiter.granted.is_set():
                    self._release()  # granted and cancelled at once: pass the slot on
                else:
                    self._forget(waiter)
                raise
        try:
            yield
        finally:
            self._release()

    def _forget(self, waiter: _Waiter) -> None:
        queue = self._waiting[waiter.key]
        queue.remove(waiter)
        if not queue:
            del self._waiting[waiter.key]
            self._turns.remove(waiter.key)

    def _release(self) -> None:
        # Hand the slot straight to the next waiter (the count stays the same) or free it.
        if self._turns:
            key = self._turns.popleft()
            queue = self._waiting[key]
            waiter = queue.popleft()
            if queue:
                self._turns.append(key)
            else:
                del self._waiting[key]
            waiter.granted.set()
        else:
            self._active -= 1
