"""Stopping and deleting sandboxes: the one way a live sandbox becomes stopped, then deleted.

A stop cancels a start under way (and waits for its task, so a unit made in a worker thread
meanwhile is found and not leaked), fires ``stop`` under the sandbox's lock, and then applies
the sandbox's post-stop policy: its unit removed at once and the record deleted (ROCK's
``--rm``, the default), or the unit stopped and kept until ``auto_delete_time``. The timers,
the reconciler, the disk watch, recovery and a failed start all stop sandboxes through
:func:`stop_locked`.
"""

from __future__ import annotations

import functools
import logging
from datetime import timedelta

import anyio

from rock_core.engine import archiving, pausing
from rock_core.engine.core import EngineCore
from rock_core.engine.live import LABEL_ENGINE_ID, LABEL_SANDBOX_ID, LiveSandbox, now
from rock_core.engine.removals import end_processes, remove_quietly
from rock_core.errors import RockError
from rock_core.models import SandboxSpec
from rock_core.states import LIVE_STATES, Event, State

__all__ = ["delete", "post_stop_plan", "stop", "stop_locked"]

log = logging.getLogger("rock.engine")

# A sandbox whose container died unexpectedly stays visible as stopped at least this long, so
# its reason can be read, even when its policy deletes stopped sandboxes at once.
_DEATH_GRACE_SECONDS = 60


def post_stop_plan(core: EngineCore, spec: SandboxSpec) -> tuple[State, int]:
    """What happens after a stop: (``deleted`` or ``archived``, after how many seconds).

    ``auto_archive_seconds`` wins (ROCK); else ``auto_delete_seconds`` or the engine's default,
    capped by ``max_auto_delete_seconds``. Only a delete after 0 seconds removes the unit at once.
    """
    config = core.config
    if spec.auto_archive_seconds is not None:
        return State.ARCHIVED, spec.auto_archive_seconds  # ROCK: an archive policy wins
    delay = (
        spec.auto_delete_seconds
        if spec.auto_delete_seconds is not None
        else config.default_auto_delete_seconds
    )
    if config.max_auto_delete_seconds is not None:
        delay = min(delay, config.max_auto_delete_seconds)
    return State.DELETED, delay


async def stop(core: EngineCore, sandbox_id: str, reason: str = "manual") -> None:
    """:meth:`SandboxManager.stop <rock_core.engine.manager.SandboxManager.stop>`: stop a sandbox
    (unknown id and already stopped are not errors)."""
    live = core.live.get(sandbox_id)
    if live is None:
        return
    live.cancel_restart()  # a crashed sandbox waiting to be restarted stays stopped
    if archiving.is_restoring(live):
        # A stop while restoring cancels the restore: the sandbox goes back to archived (its
        # archive is its only copy; nothing moves a restoring sandbox to stopped).
        if live.start_scope is not None:
            live.start_scope.cancel()
        with anyio.CancelScope(shield=True):
            await live.start_done.wait()
        return
    if live.start_scope is not None:
        live.start_scope.cancel()
        # A unit created in a worker thread while we cancelled is only known once the
        # start task has returned; wait for it so the unit is found and not leaked.
        with anyio.CancelScope(shield=True):
            await live.start_done.wait()
    async with live.lock:
        if live.record.state in LIVE_STATES:
            await stop_locked(core, live, reason)


async def stop_locked(
    core: EngineCore,
    live: LiveSandbox,
    reason: str,
    *,
    unexpected: bool = False,
    keep_seconds: int = 0,
) -> None:
    """Stop the sandbox, its lock held; ``unexpected``: it died (its record is kept a grace
    period to be read); ``keep_seconds``: keep its unit at least that long (files for inspection)."""
    record = await pausing.thaw(core, live)  # a paused sandbox's processes must run to end
    target, delay = post_stop_plan(core, record.spec)
    if unexpected and delay == 0 and target is State.DELETED:
        delay = _DEATH_GRACE_SECONDS
    delay = max(delay, keep_seconds)
    removed_now = delay == 0 and target is State.DELETED
    at = now()
    record = core.apply(
        record,
        Event.STOP,
        stop_time=at,
        reason=reason,
        auto_transition_state=target,
        auto_transition_time=at + timedelta(seconds=delay),
    )
    core.forwards.close(record.sandbox_id)
    client, live.client = live.client, None
    live.settled.set()
    if live.handle is None:
        # Stopped while starting: find a unit the start may have made (by its labels).
        try:
            found = await core.runtime.list(
                {LABEL_SANDBOX_ID: record.sandbox_id, LABEL_ENGINE_ID: core.engine_id}
            )
        except RockError:
            found = []
        for unit in found:
            await remove_quietly(core.runtime, unit)
    if removed_now:
        # Removing a unit takes the runtime a while (dockerd a few hundred milliseconds); the
        # caller need not wait. The rocklet ends the sandbox's processes now (nothing in it runs
        # on once stop returns), the unit joins the engine's removal queue, and the record
        # turns ``deleted`` once the unit is gone.
        handle, live.handle = live.handle, None
        live.removing = True
        if core.is_open:
            then = functools.partial(_delete_unlocked, core, live)
            if handle is None:
                core.task_group().start_soon(then)
            else:
                if client is not None:
                    await end_processes(client, core.removals.end_limiter)
                core.removals.submit(handle, then=then)
        else:
            if handle is not None:
                await remove_quietly(core.runtime, handle)
            _delete_record(core, live)
    elif live.handle is not None:
        try:
            await core.runtime.stop(live.handle, timeout=core.config.stop_timeout)
        except RockError as exc:
            log.warning("could not stop the unit of sandbox %s: %s", record.sandbox_id, exc)
    if client is not None:
        await client.forget()


async def _delete_unlocked(core: EngineCore, live: LiveSandbox) -> None:
    async with live.lock:
        _delete_record(core, live)


def _delete_record(core: EngineCore, live: LiveSandbox) -> None:
    if live.record.state is State.STOPPED:
        core.apply(
            live.record,
            Event.DELETE,
            delete_time=now(),
            auto_transition_state=None,
            auto_transition_time=None,
        )


async def delete(core: EngineCore, sandbox_id: str) -> None:
    """:meth:`SandboxManager.delete <rock_core.engine.manager.SandboxManager.delete>`: delete a
    stopped or archived sandbox and its unit or archive (unknown or deleted: no-op). A sandbox
    being archived has its archive cancelled (its partial objects deleted) first.

    :raises InvalidTransition: the sandbox is pending or running: stop it first.
    """
    live = core.live_or_load(sandbox_id)
    if live is None:
        return
    if live.removing:
        return  # already on its way to deleted
    live.cancel_restart()
    if live.record.state is State.ARCHIVING:
        await archiving.cancel_archive(live)
    async with live.lock:
        record = live.record
        record.lifecycle.apply(
            Event.DELETE, at=now(), sandbox_id=sandbox_id
        )  # raises if not allowed
        if record.state is State.ARCHIVED:
            await archiving.delete_archive(core, record)  # raises: kept archived, nothing lost
        if live.handle is not None:
            await remove_quietly(core.runtime, live.handle)
        core.apply(
            record,
            Event.DELETE,
            delete_time=now(),
            auto_transition_state=None,
            auto_transition_time=None,
        )
