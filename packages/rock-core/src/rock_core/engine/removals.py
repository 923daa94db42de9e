"""Removals: units leave in the background, a few at a time, and never in a start's way.

Every unit the engine removes without a caller waiting for it goes through one
:class:`Removals` queue: a sandbox deleted at its stop (ROCK's ``--rm``, the default), the
orphans and stale warm-pool members a sweep finds (:mod:`rock_core.engine.reaping`).

- A sandbox's processes end at once: before its unit joins the queue, its stop asks its rocklet
  to kill every other process in it (:func:`end_processes`, ``POST /end_processes``), without a
  runtime call. What waits in the queue is a container with an idle rocklet and its files,
  never a program of the sandbox still running; the container exits when it is removed, so
  dockerd handles exits at the queue's pace.
- At most :data:`CONCURRENCY` removals run at once, and a removal begins only while no start is
  in flight (:func:`starts_in_flight`): removing a container (an unmount, a network torn down in
  dockerd) slows a container started meanwhile two to three times. After yielding
  :data:`MAX_YIELD` seconds to starts without a pause, removals go on one at a time, so a host
  that never stops starting still loses what it no longer needs.
- A removal that fails (the runtime did not answer, dockerd wedged) is tried again after
  :data:`RETRY_FIRST` seconds, doubling up to :data:`RETRY_MAX`, :data:`ATTEMPTS` times in all,
  without holding a turn meanwhile; what follows it (the record turning deleted) waits for it.
  After the last attempt it is logged and given up; the engine's close hands every unit it
  still owns to the runtime.
- When the engine closes, what still waits is handed to
  :meth:`Runtime.discard <rock_core.runtime.Runtime.discard>` at once (the runtime finishes it,
  on Docker in a reaper process that outlives the engine), and the sandboxes are recorded
  deleted.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence

import anyio
import attrs

from rock_core.engine.live import LiveSandbox
from rock_core.engine.start_queue import StartQueue
from rock_core.errors import RockError
from rock_core.rocklet_client import RockletClient
from rock_core.runtime import Runtime, UnitHandle
from rock_core.states import State

__all__ = [
    "CONCURRENCY",
    "MAX_YIELD",
    "Removals",
    "end_processes",
    "remove_quietly",
    "starts_in_flight",
]

log = logging.getLogger("rock.engine")

#: Removals under way at once (the rest wait their turn).
CONCURRENCY = 8
#: Seconds of starts without a pause after which removals go on anyway, one at a time.
MAX_YIELD = 10.0
#: The longest a yielding removal waits before it looks again, if nothing woke it sooner (it
#: wakes when a start settles, a queue slot is freed or a removal ends).
POLL = 1.0
#: Attempts at removing one unit, the seconds before the second, and the longest wait between two.
ATTEMPTS = 8
RETRY_FIRST = 2.0
RETRY_MAX = 60.0
#: Rocklets asked at once to end their sandbox, and how long each may take to answer.
END_CONCURRENCY = 64
END_TIMEOUT = 3.0


async def remove_quietly(runtime: Runtime, handle: UnitHandle) -> None:
    """Remove a unit now; a failure is logged, not raised (the unit is reaped later)."""
    try:
        await runtime.remove(handle)
    except RockError as exc:
        log.warning("could not remove unit of sandbox %s: %s", handle.sandbox_id, exc)


def starts_in_flight(queue: StartQueue, live: Mapping[str, LiveSandbox]) -> bool:
    """Whether the engine is starting a sandbox now: a start-queue slot held or awaited (warm-pool
    refills too), or a sandbox still pending (a warm-pool claim, a start not yet queued)."""
    return (
        queue.active > 0
        or queue.depth > 0
        or any(one.record.state is State.PENDING for one in live.values())
    )


async def _a_start_settles(queue: StartQueue, live: Mapping[str, LiveSandbox]) -> None:
    """Return when a start in flight may have ended: the oldest pending sandbox settled, or
    (none pending: warm-pool refills hold the queue) a start-queue slot was freed."""
    pending = next((one for one in live.values() if one.record.state is State.PENDING), None)
    if pending is None:
        await queue.freed()
    elif not pending.settled.is_set():
        await pending.settled.wait()
    else:  # settled, and its record not yet moved on: look again shortly
        await anyio.sleep(POLL / 20)


async def end_processes(client: RockletClient, limiter: anyio.CapacityLimiter) -> None:
    """Ask the rocklet behind ``client`` to kill every other process of its sandbox; a rocklet
    that does not answer within :data:`END_TIMEOUT` is left to the unit's removal.

    The unit itself does not exit here: it goes with its removal, a few at a time. Ending a
    thousand containers at once (once done by a rocklet route that ended its container) made
    dockerd 20.10 process a thousand exits at once, and it deadlocked in its network code
    (moby/moby#46661)."""
    async with limiter:
        with anyio.move_on_after(END_TIMEOUT):
            await client.end_processes(timeout=END_TIMEOUT)


@attrs.define(eq=False)
class _Removal:
    handle: UnitHandle
    then: Callable[[], Awaitable[None]] | None
    finished: anyio.Event = attrs.field(factory=anyio.Event)
    attempts: int = 0


class Removals:
    """The engine's queue of units to remove (see the module's docstring).

    :meth:`run` serves it inside the engine's task group; :meth:`submit` adds a unit without
    waiting; :meth:`remove` adds several and waits until they are gone; :meth:`hand_over`
    empties the queue when the engine closes.

    :param runtime: what removes the units.
    :param queue: the engine's start queue, and ``live`` its live sandboxes: removals wait
        while a start is in flight.
    :param remove_on_close: the engine removes everything at its close (then a removal under
        way is abandoned there, not finished first).
    """

    def __init__(
        self,
        runtime: Runtime,
        queue: StartQueue,
        live: Mapping[str, LiveSandbox],
        *,
        remove_on_close: bool,
        concurrency: int = CONCURRENCY,
    ) -> None:
        self._runtime = runtime
        self._queue = queue
        self._live = live
        self._remove_on_close = remove_on_close
        self._waiting: deque[_Removal] = deque()
        self._retrying: set[_Removal] = set()  # failed once, waiting to be tried again
        self._wake = anyio.Event()
        self._limiter = anyio.CapacityLimiter(concurrency)
        self.end_limiter = anyio.CapacityLimiter(END_CONCURRENCY)
        #: Units removed so far, and failed attempts (logged; each is tried again).
        self.removed = 0
        self.failed = 0
        self._ended = anyio.Event()  # set (and replaced) each time a removal ends

    def __len__(self) -> int:
        """Units waiting for their turn or for another attempt (not those being removed)."""
        return len(self._waiting) + len(self._retrying)

    async def settled(self, timeout: float) -> bool:
        """Wait until no removal waits, is tried again or is under way, at most ``timeout``
        seconds; whether that happened."""
        with anyio.move_on_after(timeout):
            while self._waiting or self._retrying or self._limiter.borrowed_tokens:
                with anyio.move_on_after(POLL):
                    await self._ended.wait()
            return True
        return False

    def submit(
        self, handle: UnitHandle, *, then: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        """Queue ``handle`` for removal and return at once; ``then`` runs after it is gone."""
        self._enqueue(_Removal(handle, then))

    async def remove(self, handles: Sequence[UnitHandle]) -> None:
        """Queue ``handles`` and wait until each is removed (or its removal was given up, logged)."""
        removals = [_Removal(handle, None) for handle in handles]
        for removal in removals:
            self._enqueue(removal)
        for removal in removals:
            await removal.finished.wait()

    def hand_over(self) -> list[tuple[UnitHandle, Callable[[], Awaitable[None]] | None]]:
        """Empty the queue (the engine closes): each unit waiting for its turn or for another
        attempt, and what was to follow its removal."""
        left = [*self._waiting, *self._retrying]
        for removal in left:
            removal.finished.set()
        self._waiting.clear()
        self._retrying.clear()
        return [(r.handle, r.then) for r in left]

    def _enqueue(self, removal: _Removal) -> None:
        self._waiting.append(removal)
        self._wake.set()

    async def run(self) -> None:
        """Serve the queue until cancelled (the engine's close)."""
        yielding_since: float | None = None
        async with anyio.create_task_group() as tg:
            while True:
                if not self._waiting:
                    self._wake = anyio.Event()
                    await self._wake.wait()
                    continue
                removal = self._waiting[0]
                await self._limiter.acquire_on_behalf_of(removal)
                # Begin nothing while a start is in flight; after MAX_YIELD seconds of starts
                # without a pause, one at a time.
                while starts_in_flight(self._queue, self._live):
                    at = time.monotonic()
                    yielding_since = at if yielding_since is None else yielding_since
                    left = MAX_YIELD - (at - yielding_since)
                    if left <= 0 and self._limiter.borrowed_tokens == 1:
                        break
                    with anyio.move_on_after(POLL if left <= 0 else min(POLL, left)):
                        if left <= 0:  # one at a time from now: wait for the others to end
                            await self._ended.wait()
                        else:
                            await _a_start_settles(self._queue, self._live)
                else:
                    yielding_since = None
                if not self._waiting or self._waiting[0] is not removal:  # handed over meanwhile
                    self._limiter.release_on_behalf_of(removal)
                    continue
                tg.start_soon(self._remove, self._waiting.popleft())

    async def _remove(self, removal: _Removal) -> None:
        # An engine that removes everything at close abandons a removal under way (its close
        # hands every unit it has to Runtime.discard); any other finishes it first.
        removal.attempts += 1
        done = False
        with anyio.CancelScope(shield=not self._remove_on_close):
            try:
                try:
                    await self._runtime.remove(removal.handle)
                    done = True
                    self.removed += 1
                except RockError as exc:
                    self.failed += 1
                    again = removal.attempts < ATTEMPTS
                    log.warning(
                        "could not remove unit of sandbox %s (attempt %d of %d): %s%s",
                        removal.handle.sandbox_id,
                        removal.attempts,
                        ATTEMPTS,
                        exc,
                        "" if again else "; giving up until the engine closes",
                    )
                    done = not again  # given up: what was to follow goes on
                if done and removal.then is not None:
                    await removal.then()
            finally:
                self._limiter.release_on_behalf_of(removal)
                if done:
                    removal.finished.set()
                self._ended.set()
                self._ended = anyio.Event()
        if not done:  # outside the shield: a closing engine does not wait for the retry
            # Cancelled here (the engine closes), it stays among those hand_over() takes.
            self._retrying.add(removal)
            await anyio.sleep(min(RETRY_MAX, RETRY_FIRST * 2 ** (removal.attempts - 1)))
            if removal in self._retrying:  # not handed over meanwhile
                self._retrying.discard(removal)
                self._enqueue(removal)
