"""Waits for any of many starting sandboxes, that look only at the sandboxes that changed.

The engine notes every sandbox that changed (a transition, a settled start) in
:class:`Changes`: a bounded log in order, and an event set at the next change. A
:class:`SettleWatch` holds the ids a waiter waits for (``wait_any``, one held request of the
admin for a client's thousands of starting sandboxes, kept between its requests by the admin's
watch) and where in the log it has read to: each look is at the ids that changed since, and at
the ids added since, not at every id it waits for. A full look at every id is made at the first
look, when the log no longer reaches back to where it read, and at least every
:data:`FULL_LOOK` seconds: a few paths settle a start without a note (a recovery, an archive's
restore, a leader that lost its lease).
"""

from __future__ import annotations

import collections
import itertools
import time
from collections.abc import Iterable, Mapping

import anyio

from rock_core.engine.live import LiveSandbox
from rock_core.states import State

__all__ = ["FULL_LOOK", "Changes", "SettleWatch", "settled_among"]

#: At least this often (seconds) a wait looks at every id it holds.
FULL_LOOK = 0.25
#: How many changes the log keeps: a watch that read less recently looks at every id again.
KEPT_CHANGES = 65536


class Changes:
    """The sandboxes that changed, in order (the last :data:`KEPT_CHANGES`), and an event set
    at the next change (:meth:`next`)."""

    __slots__ = ("_event", "_log", "count")

    def __init__(self, kept: int = KEPT_CHANGES) -> None:
        self._log: collections.deque[str] = collections.deque(maxlen=kept)
        #: How many changes were ever noted (where the log ends).
        self.count = 0
        self._event: anyio.Event | None = None

    def note(self, sandbox_id: str) -> None:
        """``sandbox_id`` changed: log it, and wake whoever waits on :meth:`next`."""
        self._log.append(sandbox_id)
        self.count += 1
        event, self._event = self._event, None
        if event is not None:
            event.set()

    def next(self) -> anyio.Event:
        """An event set at the next change (a fresh one after each)."""
        if self._event is None:
            self._event = anyio.Event()
        return self._event

    def since(self, count: int) -> list[str] | None:
        """The ids noted after the first ``count`` changes (latest first, an id as often as it
        changed), or ``None``: the log no longer holds them all."""
        missed = self.count - count
        if missed > len(self._log):
            return None
        return list(itertools.islice(reversed(self._log), missed))


class SettleWatch:
    """The ids one waiter waits for, and how far it has read the engine's :class:`Changes`
    (see the module docstring). :meth:`add` ids, then :meth:`wait` (or :meth:`look`): each
    settled id is answered once, and leaves the watch."""

    __slots__ = ("_added", "_full_at", "_read", "pending")

    def __init__(self) -> None:
        #: The ids waited for, in the order they were added.
        self.pending: dict[str, None] = {}
        self._added: list[str] = []  # added since the last look
        self._read: int | None = None  # the changes read (None: look at every id next)
        self._full_at = 0.0  # when every id was last looked at (time.monotonic())

    def add(self, sandbox_ids: Iterable[str]) -> None:
        """Wait for ``sandbox_ids`` too (an id waited for already is not added twice)."""
        pending, added = self.pending, self._added
        for sandbox_id in sandbox_ids:
            if sandbox_id not in pending:
                pending[sandbox_id] = None
                added.append(sandbox_id)

    def look(self, live: Mapping[str, LiveSandbox], changes: Changes) -> list[str]:
        """The ids waited for whose start has settled (:func:`settled_among`: ``live``, the
        engine's sandboxes) among those that ``changes`` holds or were added since the last look
        (or every id: see the module docstring); they leave the watch."""
        at = time.monotonic()
        changed = None
        if self._read is not None and at - self._full_at < FULL_LOOK:
            changed = changes.since(self._read)
        if changed is None:
            self._full_at = at
            candidates: Iterable[str] = self.pending
        else:
            pending = self.pending
            candidates = dict.fromkeys(
                itertools.chain((i for i in reversed(changed) if i in pending), self._added)
            )
        self._read = changes.count
        self._added = []
        done = settled_among(live, candidates)
        for sandbox_id in done:
            del self.pending[sandbox_id]
        return done

    async def wait(
        self, live: Mapping[str, LiveSandbox], changes: Changes, timeout: float
    ) -> list[str]:
        """The ids waited for that have settled (:meth:`look`), as soon as there is one, or
        ``[]`` once ``timeout`` seconds passed.

        One cancel scope serves every wake-up until the next full look is due (or the time is
        up), not one per wake-up: a held wait wakes at every change of the engine."""
        end = anyio.current_time() + timeout
        while True:
            done = self.look(live, changes)
            if done:
                return done
            at = anyio.current_time()
            if at >= end:
                return []
            with anyio.CancelScope(deadline=min(end, at + FULL_LOOK)):
                while True:
                    await changes.next().wait()
                    done = self.look(live, changes)
                    if done:
                        return done


def settled_among(live: Mapping[str, LiveSandbox], sandbox_ids: Iterable[str]) -> list[str]:
    """The ids whose current start has settled (running, failed, stopped, or not among the
    engine's ``live`` sandboxes), in one pass."""
    live_of = live.get
    running = State.RUNNING
    done = []
    for sandbox_id in sandbox_ids:
        one = live_of(sandbox_id)
        if one is None or one.record.state is running or one.settled.is_set():
            done.append(sandbox_id)
    return done
