"""Pause and resume: a running sandbox's processes frozen, its memory kept, then thawed.

How it maps to ROCK's six states: a paused sandbox stays ``running`` (the state machine of
:mod:`rock_core.states` is ROCK's, and ROCK's SDK must read the state); the record's
``paused_time`` says it is paused (``get_status`` answers ``paused: true`` and
``paused_time``, and ``is_alive: false``: its rocklet does not answer). Pausing is not a
transition, so ``rock_sandbox_transition`` is not announced.

- :func:`pause`: the runtime freezes the unit (Docker: ``docker pause``, the cgroup freezer);
  refused for a sandbox that is not running (naming its state) and on a runtime without the
  capability ``pause`` (naming it). Pausing a paused sandbox does nothing.
- :func:`resume`: the runtime thaws it; its processes go on where they were (same pids).
  Resuming a sandbox that is not paused does nothing.
- A call into a paused sandbox (commands, files, sessions) is refused at once:
  :func:`paused_error` (``BadRequestRockError``: "sandbox X is paused; resume it first").
- Idle time: paused time does not count towards ``auto_clear_seconds`` (resume moves the
  sandbox's last activity forward by the time it was paused) unless the engine's
  ``idle_counts_paused`` says it does; the timers skip a paused sandbox the same way.
- A stop of a paused sandbox thaws it first (:func:`thaw`), so its processes can end.
"""

from __future__ import annotations

import logging
import time

import attrs

from rock_core.engine.core import EngineCore
from rock_core.engine.live import LiveSandbox, not_running_error, now
from rock_core.errors import BadRequestRockError, NotSupported, RockError, SandboxNotFound
from rock_core.models import SandboxRecord
from rock_core.states import State

__all__ = ["idle_paused", "pause", "paused_error", "resume", "thaw"]

log = logging.getLogger("rock.engine")


def paused_error(record: SandboxRecord, attempted: str) -> BadRequestRockError:
    """The refusal of a call into a paused sandbox."""
    return BadRequestRockError(
        f"sandbox {record.sandbox_id} is paused; resume it first",
        sandbox_id=record.sandbox_id,
        attempted=attempted,
    )


def idle_paused(core: EngineCore, record: SandboxRecord) -> bool:
    """Whether ``record``'s sandbox is paused and its idle clock is held meanwhile."""
    return record.paused and not core.config.idle_counts_paused


def _running(core: EngineCore, sandbox_id: str, attempted: str) -> LiveSandbox:
    runtime = core.runtime
    if not runtime.capabilities.pause:
        raise NotSupported(
            runtime.capabilities.missing("pause", runtime.name),
            sandbox_id=sandbox_id,
            attempted=attempted,
        )
    live = core.live.get(sandbox_id)
    if live is None:
        record = core.get_record(sandbox_id)  # raises SandboxNotFound for an unknown id
        raise not_running_error(record, attempted)
    return live


def _check_running(live: LiveSandbox, attempted: str) -> None:
    record = live.record
    if record.state is not State.RUNNING or live.handle is None:
        why = f": {record.reason}" if record.reason else ""
        raise BadRequestRockError(
            f"sandbox {record.sandbox_id} cannot be {attempted}d: it is {record.state.value}{why}",
            sandbox_id=record.sandbox_id,
            attempted=attempted,
        )


async def pause(core: EngineCore, sandbox_id: str) -> SandboxRecord:
    """:meth:`SandboxManager.pause <rock_core.engine.manager.SandboxManager.pause>`."""
    live = _running(core, sandbox_id, "pause")
    async with live.lock:
        _check_running(live, "pause")
        if live.record.paused:
            return live.record
        assert live.handle is not None
        await core.runtime.pause(live.handle)
        core.save(attrs.evolve(live.record, paused_time=now()))
        return live.record


async def resume(core: EngineCore, sandbox_id: str) -> SandboxRecord:
    """:meth:`SandboxManager.resume <rock_core.engine.manager.SandboxManager.resume>`."""
    live = _running(core, sandbox_id, "resume")
    async with live.lock:
        _check_running(live, "resume")
        record = live.record
        if not record.paused or record.paused_time is None:
            return record
        assert live.handle is not None
        await core.runtime.resume(live.handle)
        if not core.config.idle_counts_paused:  # the paused time is not idle time
            live.activity += max(0.0, time.time() - record.paused_time.timestamp())
        core.save(attrs.evolve(record, paused_time=None))
        return live.record


async def thaw(core: EngineCore, live: LiveSandbox) -> SandboxRecord:
    """Before a stop (its lock held): thaw a paused sandbox so its processes can end; the
    record without ``paused_time`` (not saved: the stop's transition saves it)."""
    record = live.record
    if record.paused_time is None:
        return record
    if live.handle is not None:
        try:
            await core.runtime.resume(live.handle)
        except (RockError, SandboxNotFound) as exc:
            log.warning("could not resume sandbox %s before its stop: %s", record.sandbox_id, exc)
    return attrs.evolve(record, paused_time=None)
