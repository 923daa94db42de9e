"""Reaping: removing the units no live engine will ever use again.

Three sweeps, all by label (:data:`~rock_core.engine.live.LABEL_ENGINE`,
:data:`~rock_core.engine.live.LABEL_OWNER`, :data:`~rock_core.engine.live.LABEL_ENGINE_ID`):

- at engine start, in the background (:func:`background_sweep`): the units of owners whose
  process died, and those of an admin of this host whose state folder is gone (both judged by
  :mod:`rock_core.engine.owners`), and the unclaimed warm-pool members
  and reset leftovers (old units a reset renamed out of the way and had not removed yet, no
  record holding them) and snapshot transfer leftovers (the temporary units of a snapshot's
  export or import) an earlier run of this owner left, through the engine's removal queue
  (:mod:`rock_core.engine.removals`: a few at a time, and none while a start is in flight);
- on demand (:func:`reap_orphans`): the orphans alone, for ``rock`` and the admin;
- in a cluster, by the leader after each reconcile (:func:`sweep_untracked`): units of the
  cluster that another engine made and no record holds (a leader that died or was paused
  between making a unit and recording it: its record write was fenced off), once seen twice;
- at close with ``remove_on_close`` (:func:`remove_all_owned`): every unit of this engine, its
  sandboxes recorded stopped then deleted; without it (:func:`hand_over_removals`), only the
  units still waiting in the removal queue, handed to the runtime. Archived sandboxes have no unit: with a record store
  on disk they stay archived (another process may restore them); with one in memory their
  archives are deleted, since nothing could restore them.
"""

from __future__ import annotations

import logging

import anyio

from rock_core.engine.core import EngineCore
from rock_core.engine.live import LABEL_ENGINE, LABEL_ENGINE_ID, LABEL_OWNER, now
from rock_core.engine.owners import LABEL_OWNER_HOST, admin_folder_gone, owner_is_dead
from rock_core.engine.pool import is_unclaimed_member
from rock_core.engine.removals import END_TIMEOUT, end_processes
from rock_core.engine.resetting import is_reset_leftover
from rock_core.engine.snapshot_store import is_transfer_leftover
from rock_core.errors import RockError
from rock_core.models import SandboxRecord
from rock_core.states import LIVE_STATES, Event, State
from rock_core.tenancy import archive_key

__all__ = [
    "background_sweep",
    "sweep_untracked",
    "hand_over_removals",
    "reap_orphans",
    "remove_all_owned",
    "sweep",
]

log = logging.getLogger("rock.engine")


async def reap_orphans(core: EngineCore) -> int:
    """Remove units of the engine's kind whose owning process has died (or whose admin's state
    folder is gone from this host); return how many."""
    return await sweep(core, reap=True)


async def sweep(core: EngineCore, *, reap: bool) -> int:
    """One look at the engine's kind of units: with ``reap``, remove those whose owning process
    died; always remove the unclaimed pool members and reset leftovers an earlier run of this
    owner left (an admin restart, or one that died during a reset). Removals yield to starts (:mod:`rock_core.engine.removals`). Return how many
    orphans were reaped."""
    try:
        handles = await core.runtime.list({LABEL_ENGINE: core.config.engine_label})
    except RockError as exc:
        log.warning("could not list units to reap orphans and stale pool members: %s", exc)
        return 0
    owner = core.owner
    claimed = core.claimed_units()
    stale = [
        h
        for h in handles
        if h.labels.get(LABEL_OWNER, "") == owner
        and (
            is_unclaimed_member(h, claimed)
            or is_reset_leftover(h, claimed)
            or is_transfer_leftover(h, claimed)
        )
        and h.labels.get(LABEL_ENGINE_ID) != core.engine_id
    ]
    orphans = [
        h
        for h in handles
        if reap
        and h.labels.get(LABEL_OWNER, "") != owner
        and _owner_gone(h.labels.get(LABEL_OWNER, ""), h.labels.get(LABEL_OWNER_HOST, ""))
    ]
    if orphans:
        log.info(
            "removing %d sandbox(es) whose owner has died or whose admin's folder is gone",
            len(orphans),
        )
    await core.removals.remove([*stale, *orphans])
    return len(orphans)


def _owner_gone(owner: str, owner_host: str) -> bool:
    return owner_is_dead(owner) or admin_folder_gone(owner, owner_host)


async def sweep_untracked(core: EngineCore, suspects: set[str]) -> int:
    """Remove the units of this owner another engine made that no record holds and that
    ``suspects`` (the last sweep's finds, updated here) already held; return how many."""
    try:
        handles = await core.runtime.list({LABEL_OWNER: core.owner})
    except RockError as exc:
        log.warning("could not list units to find untracked ones: %s", exc)
        return 0
    claimed = core.claimed_units()
    found = {
        h.unit_id: h
        for h in handles
        if h.labels.get(LABEL_ENGINE_ID) != core.engine_id
        and h.unit_id not in claimed
        and h.sandbox_id not in core.live
    }
    gone = [h for unit_id, h in found.items() if unit_id in suspects]
    suspects.clear()
    suspects.update(u for u in found if u not in {h.unit_id for h in gone})
    if gone:
        log.warning(
            "removing %d unit(s) no record holds (made by a leader that ended): %s",
            len(gone),
            ", ".join(h.sandbox_id for h in gone),
        )
        await core.removals.remove(gone)
    return len(gone)


async def background_sweep(core: EngineCore, done: anyio.Event) -> None:
    """The start-up sweep (orphans only when ``config.reap_orphans``); sets ``done`` when finished."""
    try:
        await sweep(core, reap=core.config.reap_orphans)
    finally:
        done.set()


async def remove_all_owned(core: EngineCore) -> None:
    """End and remove every unit of the engine (starts under way are cancelled first; units
    waiting in its removal queue join the rest) and record its sandboxes stopped (``"engine
    closed"``) and deleted.

    Built for a trainer's exit with a thousand sandboxes: first every rocklet is asked to kill
    the other processes of its sandbox (``POST /end_processes``,
    :data:`~rock_core.engine.removals.END_CONCURRENCY` at once), so nothing of them runs on;
    then the runtime is asked to remove all the units with
    :meth:`~rock_core.runtime.Runtime.discard`, which may leave the work to the runtime's own
    service (Docker's reaper process removes them a few at a time after this process is gone).
    A unit whose rocklet did not answer is removed by that same call.
    """
    lives = core.live
    for live in list(lives.values()):
        if live.start_scope is not None:
            live.start_scope.cancel()
    handles = [live.handle for live in lives.values() if live.handle is not None]
    handles += [handle for handle, _ in core.removals.hand_over()]
    known = {handle.unit_id for handle in handles}
    try:
        handles += [
            h
            for h in await core.runtime.list({LABEL_ENGINE_ID: core.engine_id})
            if h.unit_id not in known
        ]
    except RockError as exc:
        log.warning("could not list this engine's units at close: %s", exc)
    async with anyio.create_task_group() as tg:
        for live in lives.values():
            if live.client is not None:
                tg.start_soon(end_processes, live.client, core.removals.end_limiter)
    if handles:
        await core.runtime.discard(handles)
    at = now()
    keep_archives = core.store.persistent
    for live in list(lives.values()):
        record = live.record
        if record.state is State.ARCHIVED:
            if keep_archives:
                continue  # no unit; its archive and record wait for restart() or delete()
            await _forget_archive(core, record)  # nobody could ever restore it
        if record.state in LIVE_STATES:
            record = core.apply(record, Event.STOP, reason="engine closed", stop_time=at)
        if record.state in (State.STOPPED, State.ARCHIVED):
            record = core.apply(record, Event.DELETE, delete_time=at)
    lives.clear()


async def hand_over_removals(core: EngineCore) -> None:
    """At close, units still waiting in the removal queue go to the runtime's discard (it
    finishes them after the engine is gone) and their sandboxes are recorded deleted."""
    waiting = core.removals.hand_over()
    if not waiting:
        return
    try:
        await core.runtime.discard([handle for handle, _ in waiting])
    except RockError as exc:
        log.warning(
            "could not hand %d unit(s) to the runtime for removal at close: %s",
            len(waiting),
            exc,
        )
        return  # their records stay stopped; the next sweep finds the units
    for _, then in waiting:
        if then is not None:
            await then()


async def _forget_archive(core: EngineCore, record: SandboxRecord) -> None:
    if core.archive_store is None:
        return
    sandbox_id = record.sandbox_id
    with anyio.move_on_after(END_TIMEOUT * 10):
        try:
            await core.archive_store.delete(archive_key(record))
        except RockError as exc:
            log.warning("could not delete the archive of sandbox %s at close: %s", sandbox_id, exc)
