"""Reaping: removing the units no live engine will ever use again.

Three sweeps, all by label (:data:`~rock_core.engine.live.LABEL_ENGINE`,
:data:`~rock_core.engine.live.LABEL_OWNER`, :data:`~rock_core.engine.live.LABEL_ENGINE_ID`):

- at engine start, in the background (:func:`background_sweep`): the units of owners whose
  process died (judged by :mod:`rock_core.engine.owners`), and the unclaimed warm-pool members an
  earlier run of this owner left, a few at a time, and none while a start is in flight (see
  :func:`sweep`): cleanup yields to starts;
- on demand (:func:`reap_orphans`): the orphans alone, for ``rock`` and the admin;
- at close with ``remove_on_close`` (:func:`remove_all_owned`): every unit of this engine, its
  sandboxes recorded stopped then deleted. Archived sandboxes have no unit: with a record store
  on disk they stay archived (another process may restore them); with one in memory their
  archives are deleted, since nothing could restore them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import anyio

from rock_core.engine.live import LABEL_ENGINE, LABEL_ENGINE_ID, LABEL_OWNER, now
from rock_core.engine.owners import owner_is_dead
from rock_core.engine.pool import is_unclaimed_member
from rock_core.engine.rocklet_client import RockletClient
from rock_core.engine.stopping import remove_quietly
from rock_core.errors import RockError
from rock_core.runtime import UnitHandle
from rock_core.states import LIVE_STATES, Event, State

if TYPE_CHECKING:
    from rock_core.engine.manager import SandboxManager

__all__ = ["background_sweep", "reap_orphans", "remove_all_owned", "starts_in_flight", "sweep"]

log = logging.getLogger("rock.engine")

# Units removed at once by the sweep of orphans and stale pool members (the rest wait their turn).
_SWEEP_CONCURRENCY = 8
# While a start is in flight the sweep begins no removal: removing a running container (a kill,
# an unmount, a network torn down in dockerd) makes a container started meanwhile take two to
# three times as long, even one removal at a time. After yielding this long without a pause in
# the starts, it removes one unit at a time, so a host that never stops starting still loses its
# orphans. How often it looks again:
_SWEEP_MAX_YIELD = 10.0
_SWEEP_POLL = 0.05
# Rocklets asked at once to end their sandbox when the engine closes, and how long each may take.
_END_CONCURRENCY = 64
_END_TIMEOUT = 3.0


async def reap_orphans(engine: SandboxManager) -> int:
    """Remove units of ``engine``'s kind whose owning process has died; return how many."""
    return await sweep(engine, reap=True)


async def sweep(engine: SandboxManager, *, reap: bool) -> int:
    """One look at ``engine``'s kind of units: with ``reap``, remove those whose owning process
    died; always remove the unclaimed pool members an earlier run of this owner left (an
    admin restart). Removals yield to starts (:func:`starts_in_flight`). Return how many
    orphans were reaped."""
    try:
        handles = await engine.runtime.list({LABEL_ENGINE: engine.config.engine_label})
    except RockError as exc:
        log.warning("could not list units to reap orphans and stale pool members: %s", exc)
        return 0
    owner = engine.owner
    claimed = engine.claimed_units()
    stale = [
        h for h in handles
        if h.labels.get(LABEL_OWNER, "") == owner
        and is_unclaimed_member(h, claimed) and h.labels.get(LABEL_ENGINE_ID) != engine.engine_id
    ]
    orphans = [
        h for h in handles
        if reap and h.labels.get(LABEL_OWNER, "") != owner and owner_is_dead(h.labels.get(LABEL_OWNER, ""))
    ]
    if orphans:
        log.info("removing %d sandbox(es) whose owner has died", len(orphans))
    await _remove_yielding(engine, [*stale, *orphans])
    return len(orphans)


def starts_in_flight(engine: SandboxManager) -> bool:
    """Whether ``engine`` is starting a sandbox now: a start-queue slot held or awaited (warm-pool
    refills too), or a sandbox still pending (a warm-pool claim, a start not yet queued)."""
    queue = engine.queue
    return queue.active > 0 or queue.depth > 0 or any(live.record.state is State.PENDING for live in engine._live.values())


async def _remove_yielding(engine: SandboxManager, handles: Sequence[UnitHandle]) -> None:
    """Remove ``handles``, :data:`_SWEEP_CONCURRENCY` at once, each begun only while no start is
    in flight; after :data:`_SWEEP_MAX_YIELD` seconds of starts without a pause, one at a time."""
    limiter = anyio.CapacityLimiter(_SWEEP_CONCURRENCY)
    yielding_since: float | None = None

    async def remove(handle: UnitHandle, borrower: object) -> None:
        try:
            await remove_quietly(engine.runtime, handle)
        finally:
            limiter.release_on_behalf_of(borrower)

    async with anyio.create_task_group() as tg:
        for handle in handles:
            borrower = object()
            await limiter.acquire_on_behalf_of(borrower)
            # A closing engine starts nothing more: what is left goes at full pace.
            while starts_in_flight(engine) and not engine._closed:
                at = time.monotonic()
                yielding_since = at if yielding_since is None else yielding_since
                if at - yielding_since >= _SWEEP_MAX_YIELD and limiter.borrowed_tokens == 1:
                    break  # starts without a pause: this one goes alone
                await anyio.sleep(_SWEEP_POLL)
            else:
                yielding_since = None
            tg.start_soon(remove, handle, borrower)


async def background_sweep(engine: SandboxManager, done: anyio.Event) -> None:
    """The start-up sweep (orphans only when ``config.reap_orphans``); sets ``done`` when finished."""
    try:
        await sweep(engine, reap=engine.config.reap_orphans)
    finally:
        done.set()


async def remove_all_owned(engine: SandboxManager) -> None:
    """End and remove every unit of ``engine`` (starts under way are cancelled first) and record
    its sandboxes stopped (``"engine closed"``) and deleted.

    Built for a trainer's exit with a thousand sandboxes: first every rocklet is asked to end
    its sandbox (``POST /shutdown``, :data:`_END_CONCURRENCY` at once), which kills every
    process in it without a runtime call; then the runtime is asked to remove all the units
    with :meth:`~rock_core.runtime.Runtime.discard`, which may leave the work to the runtime's
    own service (dockerd finishes after this process is gone). A unit whose rocklet did not
    answer is removed by that same call (Docker's forced removal kills it first).
    """
    lives = engine._live
    for live in list(lives.values()):
        if live.start_scope is not None:
            live.start_scope.cancel()
    handles = [live.handle for live in lives.values() if live.handle is not None]
    try:
        handles += [
            h for h in await engine.runtime.list({LABEL_ENGINE_ID: engine.engine_id})
            if all(h.unit_id != known.unit_id for known in handles)
        ]
    except RockError as exc:
        log.warning("could not list this engine's units at close: %s", exc)
    limiter = anyio.CapacityLimiter(_END_CONCURRENCY)

    async def end(client: RockletClient) -> None:
        async with limiter:
            with anyio.move_on_after(_END_TIMEOUT):
                await client.end_sandbox(timeout=_END_TIMEOUT)

    async with anyio.create_task_group() as tg:
        for live in lives.values():
            if live.client is not None:
                tg.start_soon(end, live.client)
    if handles:
        await engine.runtime.discard(handles)
    at = now()
    keep_archives = engine.store.persistent
    for live in list(lives.values()):
        record = live.record
        if record.state is State.ARCHIVED:
            if keep_archives:
                continue  # no unit; its archive and record wait for restart() or delete()
            await _forget_archive(engine, record.sandbox_id)  # nobody could ever restore it
        if record.state in LIVE_STATES:
            record = engine._apply(record, Event.STOP, reason="engine closed", stop_time=at)
        if record.state in (State.STOPPED, State.ARCHIVED):
            record = engine._apply(record, Event.DELETE, delete_time=at)
    lives.clear()


async def _forget_archive(engine: SandboxManager, sandbox_id: str) -> None:
    if engine.archive_store is None:
        return
    with anyio.move_on_after(_END_TIMEOUT * 10):
        try:
            await engine.archive_store.delete(sandbox_id)
        except RockError as exc:
            log.warning("could not delete the archive of sandbox %s at close: %s", sandbox_id, exc)
