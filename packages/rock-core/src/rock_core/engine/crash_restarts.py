"""Restarts after a crash, by restart policy: a running sandbox whose unit died behind the
engine's back is started again, same id, when its ``restart_policy`` says so. (The restart a
caller asks of a stopped sandbox is :func:`rock_core.engine.starting.restart`.)

When the reconciler or the runtime's event watch finds a running sandbox's unit ended
(:func:`rock_core.engine.reconcile.unit_gone`), :func:`wants_restart` decides by the sandbox's
spec: ``never`` (the default) stops it as before; ``on-failure`` starts it again after a
non-zero exit, an OOM kill or a vanished unit; ``always`` after any end. At most
``max_restarts`` times; then it is stopped with the reason and "gave up after N restarts".

A crash that is restarted is recorded like any stop (``stop``, with the exit as the reason) and
then ``restart`` after a back-off (``restart_backoff_seconds``, doubling per restart, at most
30 s). The new start runs the ordinary start pipeline on the same unit when the runtime keeps
files across a stop (Docker: the same container, files kept), else on a new unit from the same
spec. Sessions and processes are gone either way. During the back-off the status shows the
sandbox ``pending`` (not stopped, so ``get_status`` without ``include_all_states`` finds it),
its reason saying it is restarting after a crash and why it crashed. Each restart adds a note with its reason
(``notes`` in the status) and counts in ``restart_count``. A ``stop()`` or ``delete()`` during the
back-off cancels the restart. The record keeps the planned restart as its next step
(``auto_transition_state`` ``pending`` at the back-off's end), so a follower of a cluster shows
it pending too (:func:`rock_core.engine.live.restart_reason`), and an engine that ended during
the back-off leaves it to the next one's recovery (:func:`resume`: the next leader, or this
admin started again), which makes it after what is left of the back-off.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta

import anyio
import attrs

from rock_core.engine.admission import waiting_phases
from rock_core.engine.core import EngineCore
from rock_core.engine.lazy_event import LazyEvent
from rock_core.engine.live import LiveSandbox, now, restart_reason
from rock_core.engine.removals import remove_quietly
from rock_core.engine.starting import run_start
from rock_core.engine.stopping import post_stop_plan
from rock_core.models import RestartPolicy, RuntimeStatus, SandboxRecord, UnitState
from rock_core.states import Event, State

__all__ = ["MAX_BACKOFF_SECONDS", "crashed", "gave_up", "resume", "wants_restart"]

log = logging.getLogger("rock.engine")

#: The longest wait before a restart.
MAX_BACKOFF_SECONDS = 30.0
# Restart notes kept in a record (the newest), so a sandbox that crashes often keeps a short status.
_NOTES_KEPT = 10


def _failed(status: RuntimeStatus) -> bool:
    return status.state is UnitState.MISSING or status.oom_killed or status.exit_code != 0


def wants_restart(record: SandboxRecord, status: RuntimeStatus) -> bool:
    """Whether the running sandbox of ``record``, whose unit ended as ``status`` says, is started again."""
    policy = record.spec.restart_policy
    if policy is RestartPolicy.NEVER or record.state is not State.RUNNING:
        return False
    if record.restart_count >= record.spec.max_restarts:
        return False
    return policy is RestartPolicy.ALWAYS or _failed(status)


def gave_up(record: SandboxRecord, reason: str) -> str:
    """``reason``, with why it was not restarted when its policy would have."""
    if (
        record.spec.restart_policy is RestartPolicy.NEVER
        or record.restart_count < record.spec.max_restarts
    ):
        return reason
    count = record.restart_count
    return f"{reason} (not restarted: gave up after {count} restart{'s' if count != 1 else ''}, max_restarts)"


async def crashed(core: EngineCore, live: LiveSandbox, reason: str) -> None:
    """Record the crash as a stop (the unit kept) and start the sandbox again after the back-off.
    The sandbox's lock is held."""
    count = live.record.restart_count
    delay = min(MAX_BACKOFF_SECONDS, core.config.restart_backoff_seconds * 2**count)
    at = now()
    record = core.apply(
        live.record,
        Event.STOP,
        stop_time=at,
        reason=reason,
        # The planned restart, in the store: what the cluster's other admins and a next run see.
        auto_transition_state=State.PENDING,
        auto_transition_time=at + timedelta(seconds=delay),
    )
    core.forwards.close(record.sandbox_id)
    client, live.client = live.client, None
    if client is not None:
        await client.forget()
    log.warning("sandbox %s crashed (%s); restarting it in %gs", record.sandbox_id, reason, delay)
    _plan(core, live, reason, delay)


def resume(core: EngineCore, live: LiveSandbox) -> None:
    """Make the restart a crash planned (its record: stopped, next step ``pending``) that the
    engine which planned it did not (it ended during the back-off), after what is left of it."""
    record = live.record
    due = record.auto_transition_time
    left = max(0.0, (due - now()).total_seconds()) if due is not None else 0.0
    log.info("sandbox %s: its restart after a crash is made in %gs", record.sandbox_id, left)
    _plan(core, live, record.reason or "crashed", left)


def _plan(core: EngineCore, live: LiveSandbox, reason: str, delay: float) -> None:
    live.settled = LazyEvent()  # a wait_until_running now waits for the restart
    # Until it runs again (or the restart is cancelled), its status shows it pending, saying why.
    live.coming_back = restart_reason(live.record)
    scope = anyio.CancelScope()
    live.restart_scope = scope
    core.task_group().start_soon(_restart_later, core, live, reason, delay, scope)


async def _restart_later(
    core: EngineCore, live: LiveSandbox, reason: str, delay: float, scope: anyio.CancelScope
) -> None:
    with scope:
        await anyio.sleep(delay)
    live.restart_scope = None
    if scope.cancelled_caught and not live.removing and live.record.state is State.STOPPED:
        # Stopped by hand during the back-off: from now on its post-stop policy applies, as
        # for any sandbox that died (kept a minute at least, so the reason can be read).
        target, keep = post_stop_plan(core, live.record.spec)
        core.save(
            attrs.evolve(
                live.record,
                auto_transition_state=target,
                auto_transition_time=now() + timedelta(seconds=max(keep, 60)),
            )
        )
    if scope.cancelled_caught or live.removing or live.record.state is not State.STOPPED:
        live.coming_back = None
        live.settled.set()
        return
    runtime = core.runtime
    reuse = runtime.keeps_files_across_stop and live.handle is not None
    if not reuse and live.handle is not None:
        handle, live.handle = live.handle, None
        await remove_quietly(runtime, handle)  # a new unit comes from the spec
    async with live.lock:
        record = live.record
        live.coming_back = None  # from here its record says pending (or what else it is)
        if record.state is not State.STOPPED:
            live.settled.set()
            return
        count = record.restart_count + 1
        note = f"restarted ({count} of {record.spec.max_restarts}) at {now():%Y-%m-%d %H:%M:%S}Z after: {reason}"
        others = [n for n in record.notes if not n.startswith("restarted (")]
        restarts = [n for n in record.notes if n.startswith("restarted (")][-(_NOTES_KEPT - 1) :]
        core.apply(
            record,
            Event.RESTART,
            start_time=None,
            stop_time=None,
            reason=None,
            restart_count=count,
            notes=(*others, *restarts, note),
            phases=waiting_phases(),
            auto_transition_state=None,
            auto_transition_time=None,
        )
        live.begin_start(keep_settled=True)  # made fresh when the restart was planned
    await run_start(core, live.record.sandbox_id, time.monotonic(), reuse)
