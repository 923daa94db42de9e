"""Timers and the disk watch: the engine's deadlines.

- :func:`run_timers` (every ``timer_interval``): stop running sandboxes idle past their
  ``auto_clear_seconds`` (counted from running; a call in flight counts as activity until it
  ends), delete stopped ones whose ``auto_delete_time`` passed and archive those whose
  ``auto_archive_time`` passed, all at once, so a burst of expiries does not wait on one
  another's unit;
- :func:`check_disk` (every ``disk_check_interval``, when the runtime can measure disk use):
  stop running sandboxes past their ``disk`` limit, keeping their files for inspection.
"""

from __future__ import annotations

import functools
import heapq
import logging
import time
from datetime import UTC, datetime

import anyio

from rock_core.engine import archiving, following, pausing
from rock_core.engine.core import EngineCore
from rock_core.engine.live import LABEL_OWNER, LiveSandbox
from rock_core.engine.stopping import delete, stop, stop_locked
from rock_core.errors import NotSupported, RockError
from rock_core.sizes import format_bytes
from rock_core.states import State

__all__ = ["check_disk", "disk_loop", "run_timers", "timer_loop"]

log = logging.getLogger("rock.engine")


async def timer_loop(core: EngineCore) -> None:
    """Run :func:`run_timers` every ``config.timer_interval`` seconds, forever."""
    while True:
        await anyio.sleep(core.config.timer_interval)
        await run_timers(core)


async def run_timers(core: EngineCore, at: float | None = None) -> None:
    """:meth:`SandboxManager.run_timers <rock_core.engine.manager.SandboxManager.run_timers>`:
    stop idle sandboxes and delete stopped ones whose deadline passed, all at once.

    :param at: the moment (``time.time()``) the deadlines are judged at (default: now).
    """
    now_ts = time.time() if at is None else at
    now = datetime.fromtimestamp(now_ts, UTC)
    expired: list[str] = []
    due: list[str] = []
    archives: list[str] = []
    looked = _due_ids(core, now_ts)
    for sandbox_id in looked:
        live = core.live[sandbox_id]
        record = live.record
        clear = record.spec.auto_clear_seconds
        if core.busy(sandbox_id):
            live.activity = max(live.activity, now_ts)  # a long command is activity until it ends
        elif pausing.idle_paused(core, record):
            pass  # paused time is not idle time (unless idle_counts_paused)
        elif record.state is State.RUNNING and clear and now_ts > live.activity + clear:
            # Idle time counts from running: a start waiting in a long queue is not idle (its
            # startup budget bounds it).
            expired.append(sandbox_id)
        elif (
            record.state is State.STOPPED
            and not live.removing
            and record.auto_transition_state is State.DELETED
            and record.auto_transition_time is not None
            and record.auto_transition_time <= now
        ):
            due.append(sandbox_id)
        elif archiving.archive_due(core, live, now):
            archives.append(sandbox_id)

    if expired and core.lease is not None:  # calls other admins of the cluster served count
        reported = await following.reported_activity(core, expired)
        for sandbox_id, at in reported.items():
            live = core.live[sandbox_id]
            live.activity = max(live.activity, at)
        expired = [
            i
            for i in expired
            if now_ts > core.live[i].activity + (core.live[i].record.spec.auto_clear_seconds or 0)
        ]
    acted = {*expired, *due, *archives}
    for sandbox_id in looked:  # not due after all (activity since, a call in flight): later
        if sandbox_id not in acted and (again := core.live.get(sandbox_id)) is not None:
            _watch_again(core, again, now_ts)

    async def auto_archive(sandbox_id: str) -> None:
        try:
            await archiving.archive(core, sandbox_id)
        except RockError as exc:
            log.warning("auto-archive of %s failed: %s", sandbox_id, exc)

    async def auto_delete(sandbox_id: str) -> None:
        try:
            await delete(core, sandbox_id)
        except RockError as exc:
            log.warning("auto-delete of %s failed: %s", sandbox_id, exc)

    async with anyio.create_task_group() as tg:
        for sandbox_id in expired:
            tg.start_soon(functools.partial(stop, core, sandbox_id, reason="expired"))
        for sandbox_id in due:
            tg.start_soon(auto_delete, sandbox_id)
        for sandbox_id in archives:
            tg.start_soon(auto_archive, sandbox_id)
    for sandbox_id in acted:  # a stop or delete that did not happen is tried again
        if (again := core.live.get(sandbox_id)) is not None:
            _watch_again(core, again, now_ts)


def _due_ids(core: EngineCore, now_ts: float) -> list[str]:
    """The live sandboxes whose entry in the timers' heap (:attr:`EngineCore.deadlines`) is
    due by ``now_ts``, each once, taken out of the heap: the only ones a deadline may have
    passed for (every deadline of a sandbox is in the heap from its record's last change, no
    later than it falls)."""
    heap = core.deadlines
    ids: dict[str, None] = {}
    while heap and heap[0][0] <= now_ts:
        at, sandbox_id = heapq.heappop(heap)
        if core.watched.get(sandbox_id) == at:
            del core.watched[sandbox_id]  # its earliest entry: the next one may be pushed
        if sandbox_id in core.live:
            ids[sandbox_id] = None
    return list(ids)


def _watch_again(core: EngineCore, live: LiveSandbox, now_ts: float) -> None:
    """Put back a sandbox the timers looked at and left: at its deadline as it is now, or, if
    that has passed (a stopped sandbox whose unit is being removed, or that holds no unit
    yet), at the next look, as every look did before."""
    core.watch(live, not_before=now_ts)


async def disk_loop(core: EngineCore) -> None:
    """Run :func:`check_disk` every ``config.disk_check_interval`` seconds, if the runtime can
    measure disk use (its notes say which disk limits stay unenforced otherwise)."""
    runtime = core.runtime
    if not runtime.capabilities.disk_usage:
        return
    while True:
        await anyio.sleep(core.config.disk_check_interval)
        try:
            await check_disk(core)
        except NotSupported:
            log.info(
                "runtime %r cannot measure disk use: disk limits it cannot enforce stay unenforced",
                runtime.name,
            )
            return


async def check_disk(core: EngineCore) -> list[str]:
    """:meth:`SandboxManager.check_disk <rock_core.engine.manager.SandboxManager.check_disk>`:
    one look at the disk use of every running sandbox; stop those past their limit; their ids.

    :raises NotSupported: the runtime cannot measure disk use.
    """
    watched = {
        live.handle.unit_id: live
        for live in core.live.values()
        if live.record.state is State.RUNNING
        and live.handle is not None
        and live.record.spec.disk is not None
    }
    if not watched:
        return []
    try:
        usage = await core.runtime.disk_usage({LABEL_OWNER: core.owner})
    except NotSupported:
        raise
    except RockError as exc:
        log.warning("could not measure the disk use of sandboxes: %s", exc)
        return []
    over = [
        (watched[unit_id], used)
        for unit_id, used in usage.items()
        if unit_id in watched and used > (watched[unit_id].record.spec.disk or 0)
    ]
    async with anyio.create_task_group() as tg:
        for live, used in over:
            tg.start_soon(_stop_over_disk, core, live, used)
    return [live.record.sandbox_id for live, _ in over]


async def _stop_over_disk(core: EngineCore, live: LiveSandbox, used: int) -> None:
    limit = live.record.spec.disk or 0
    keep = core.config.disk_keep_seconds
    reason = (
        f"disk limit exceeded: the sandbox wrote {format_bytes(used)}, its limit is {format_bytes(limit)}; "
        f"its files are kept for at least {keep} s for inspection"
    )
    log.warning("stopping sandbox %s: %s", live.record.sandbox_id, reason)
    async with live.lock:
        if live.record.state is State.RUNNING:
            await stop_locked(core, live, reason, keep_seconds=keep)
