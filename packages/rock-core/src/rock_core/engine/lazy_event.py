"""A one-shot event that costs a flag until someone waits for it.

Every sandbox the engine holds has a few events (:class:`~rock_core.engine.live.LiveSandbox`'s
``settled``, ``start_done``, ``archive_done``), and the start queue makes one at each freed slot;
most are set without anyone ever waiting on them. An ``anyio.Event`` on asyncio makes an
``asyncio.Event`` at once, with its deque of waiters (760 bytes; about 3 us of the admin's loop
with anyio's backend lookup): 16,000 sandboxes held 48,000 of them, and a burst of starts spent
about 5 % of the loop making them. :class:`LazyEvent` is a flag, and makes the ``anyio.Event``
only when a task waits while it is not set.
"""

from __future__ import annotations

import anyio
import anyio.lowlevel

__all__ = ["LazyEvent"]


class LazyEvent:
    """An ``anyio.Event`` for its callers: :meth:`set`, :meth:`is_set` and :meth:`wait` behave
    as anyio's (``wait`` is a cancellation point, and checkpoints when the event is set
    already); the underlying ``anyio.Event`` is made by the first wait that has to wait."""

    __slots__ = ("_event", "_set")

    def __init__(self) -> None:
        self._set = False
        self._event: anyio.Event | None = None

    def set(self) -> None:
        """Set the flag and wake every task waiting for it."""
        if not self._set:
            self._set = True
            if self._event is not None:
                self._event.set()

    def is_set(self) -> bool:
        """Whether the flag is set."""
        return self._set

    async def wait(self) -> None:
        """Return once the flag is set (at once, after a checkpoint, if it is already)."""
        if self._set:
            await anyio.lowlevel.checkpoint()
            return
        if self._event is None:
            self._event = anyio.Event()
        await self._event.wait()
