"""Leadership: with ``[engine] cluster`` set, the engines sharing one record store elect one
leader, and only the leader runs the engine's background work (issue #24 points 2 and 3).

:func:`lead` loops for the engine's life: it takes the lease the store offers
(:meth:`RecordStore.leadership <rock_core.records.RecordStore.leadership>`, asked for by
:meth:`EngineCore.open <rock_core.engine.core.EngineCore.open>`: ``EngineCore.lease``), and while it holds
runs the background work (``background``: the start-up sweep, recovery of this owner's
sandboxes, warm pools, timers, reconcile and the runtime's watch, the disk watch, the usage
sampler; restarts after crashes come from these) in a task group of its own, under a
:class:`~rock_core.engine.fencing.Fence`. It renews every :data:`RENEW_INTERVAL` seconds; a
lease lasts :data:`LEASE_TTL`, so a dead or hung leader's lease runs out within that and another
engine takes it on its next try (:data:`RETRY_INTERVAL`): a takeover within
``LEASE_TTL + RETRY_INTERVAL`` (4 s) of the leader's end.

The lease is lost when a renewal answers so, or when this process's monotonic clock passes the
lease's end without a renewal having answered (a renewal stuck, or the process paused by
``SIGSTOP``: the clock kept going). Then the background work is cancelled and awaited before the
engine tries anything else, and it is a follower again. Until it is cancelled, a runtime call of
that work is refused (the engine's runtime is :func:`~rock_core.engine.fencing.guarded`): a
paused leader that wakes does nothing more on the runtime, even in the step it was in. Every record the work writes goes
through the fence: not written once the monotonic clock says the lease ended, and written in
one statement with the store's check of the epoch otherwise, so a write of a stale leader does
nothing (see :mod:`~rock_core.engine.fencing`).

Without ``cluster`` none of this runs: the engine runs its background work itself, as always.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import anyio
import anyio.abc

from rock_core.engine import fencing
from rock_core.errors import RockError
from rock_core.leadership import Leadership

__all__ = ["LEASE_TTL", "RENEW_INTERVAL", "RETRY_INTERVAL", "Role", "lead"]

log = logging.getLogger("rock.engine")

#: Seconds a taking or renewal of a cluster's lease lasts.
LEASE_TTL = 3.0
#: Seconds between renewals by the leader.
RENEW_INTERVAL = 1.0
#: Seconds between a follower's tries to take the lease.
RETRY_INTERVAL = 1.0

T = TypeVar("T")

Background = Callable[[anyio.abc.TaskGroup], Coroutine[Any, Any, None]]


class Role:
    """What this engine is in its cluster now: :attr:`fence` is set while it leads."""

    def __init__(self, leadership: Leadership) -> None:
        self.leadership = leadership
        self.fence: fencing.Fence | None = None
        #: How many times this engine took the lease (each under a new epoch).
        self.terms = 0
        #: Held by the thread of a call to the lease while it runs (see ``_ask``).
        self.calling = threading.Lock()
        #: Set once this term's leader took the cluster's sandboxes back (its recovery ran):
        #: what only the leader does waits for it (a stop must find the sandbox it names).
        self.recovered = anyio.Event()

    @property
    def leading(self) -> bool:
        """Whether this engine is the leader now (its background work runs)."""
        return self.fence is not None and self.fence.valid()


async def lead(
    role: Role, background: Background, on_lost: Callable[[], None] | None = None
) -> None:
    """For the engine's life: take the lease, run ``background`` while it holds, follow;
    ``on_lost()`` once the background work of a lost lease has ended."""
    leadership = role.leadership
    while True:
        began = time.monotonic()
        epoch = await _ask(role, leadership.acquire, None, RETRY_INTERVAL)
        if epoch is None:
            await anyio.sleep(RETRY_INTERVAL)
            continue
        fence = fencing.Fence(leadership, epoch, began + leadership.ttl)
        role.recovered = anyio.Event()
        role.fence = fence
        role.terms += 1
        log.info("leader of the cluster under epoch %d", epoch)
        try:
            await _hold(role, fence, background)
        finally:
            role.fence = None
            if not fence.lost and fence.valid():  # closing: hand the lease over at once
                with anyio.CancelScope(shield=True):
                    await _ask(role, functools.partial(leadership.release, epoch), None, 1.0)
        log.warning("lost the lease of epoch %d: a follower now", epoch)
        if on_lost is not None:
            on_lost()


async def _hold(role: Role, fence: fencing.Fence, background: Background) -> None:
    """Run ``background`` under ``fence``, renewing the lease; return once it is lost, the
    background work cancelled and ended."""
    try:
        await _renewing(role, fence, background)
    except* fencing.LeaseLost:
        pass  # background work that met the lapse before its cancellation: it did nothing


async def _renewing(role: Role, fence: fencing.Fence, background: Background) -> None:
    async with anyio.create_task_group() as tg:
        token = fencing.entered(fence)
        try:
            tg.start_soon(background, tg)
        finally:
            fencing.left(token)
        while True:
            left = fence.valid_until - time.monotonic()
            await anyio.sleep(min(RENEW_INTERVAL, max(left, 0.0)))
            if not fence.valid():
                break
            began = time.monotonic()
            renewed = await _ask(
                role,
                functools.partial(fence.leadership.renew, fence.epoch),
                False,
                fence.valid_until - began,
            )
            if not renewed:
                if time.monotonic() < fence.valid_until and renewed is None:
                    continue  # the store did not answer in time, yet the lease may still hold
                fence.lost = True
                break
            fence.valid_until = began + fence.leadership.ttl
        fence.lost = True
        tg.cancel_scope.cancel()


async def _ask(role: Role, call: Callable[[], T], failed: T, within: float) -> T | None:
    """``call()`` off the event loop; ``failed`` when the store answered an error, ``None``
    when it did not answer within ``within`` seconds. A call left without an answer keeps its
    thread until the store answers; no other call is made meanwhile (a hung store would
    otherwise take a thread per try)."""

    def alone() -> T | None:
        if not role.calling.acquire(blocking=False):
            return None  # the last call has not answered yet
        try:
            return call()
        finally:
            role.calling.release()

    with anyio.move_on_after(max(within, 0.0)):
        try:
            return await anyio.to_thread.run_sync(alone, abandon_on_cancel=True)
        except RockError as exc:
            log.warning("the lease's store failed: %s", exc)
            return failed
    return None
