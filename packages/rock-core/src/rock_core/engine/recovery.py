"""Recovery: taking back, after a restart of the process, the sandboxes this owner's store
lists as not deleted.

Each record is matched with its unit by the unit id it notes (a claimed warm-pool unit keeps
its pool name on a runtime that does not rename), else by label. A running sandbox whose rocklet answers is
adopted (usable again, with its recorded secret); one whose unit died or vanished meanwhile,
and one whose start the restart interrupted before its unit answered, is recorded as stopped
with that reason, or started again when its restart policy says so; in a cluster, a start cut short before its unit was made is made by the new
leader. A restore the restart cut short leaves the sandbox archived again; an
archive it cut short is resolved with the store (done when both parts are stored, else failed:
``stopped``). Archived sandboxes are taken in as they are. Nothing is left pending or unknown.
"""

from __future__ import annotations

import logging
import time

import anyio
import attrs

from rock_core.engine import archiving, crash_restarts, starting
from rock_core.engine.bringup import open_ports
from rock_core.engine.core import EngineCore
from rock_core.engine.live import LABEL_OWNER, LABEL_SANDBOX_ID, LiveSandbox, describe_exit, now
from rock_core.engine.removals import remove_quietly
from rock_core.engine.resetting import is_reset_leftover
from rock_core.engine.stopping import stop_locked
from rock_core.errors import RockError
from rock_core.models import PHASE_DOCKER_RUN, PhaseStatus, RuntimeStatus, UnitState
from rock_core.rocklet_client import RockletClient
from rock_core.states import Event, State

__all__ = ["adopt", "recover"]

log = logging.getLogger("rock.engine")

#: Times a recovered sandbox's rocklet is asked whether it is alive before it is given up.
ADOPT_TRIES = 3
#: Sandboxes taken back at once (each asks its runtime and its rocklet): one after another,
#: an admin on Nomad took 30 s to answer again with 300 sandboxes, and longer than its
#: start-up is waited for with 5,000.
RECOVER_AT_ONCE = 32


async def recover(core: EngineCore) -> int:
    """:meth:`SandboxManager.recover <rock_core.engine.manager.SandboxManager.recover>`: take back
    this owner's sandboxes that are not deleted; return how many."""
    records = [
        r
        for r in core.store.list(
            states=[State.PENDING, State.RUNNING, State.STOPPED, State.ARCHIVING, State.ARCHIVED]
        )
        if r.owner == core.owner and r.sandbox_id not in core.live
    ]
    if not records:
        return 0
    try:
        units = await core.runtime.list({LABEL_OWNER: core.owner})
    except RockError as exc:
        log.warning("could not list units to recover sandboxes: %s", exc)
        units = []
    # An old unit a reset renamed out of the way keeps its sandbox's labels: never taken for it
    # by label (by the unit id its record notes, it is: the reset ended before the new one).
    by_id = {
        h.labels.get(LABEL_SANDBOX_ID, h.sandbox_id): h for h in units if not is_reset_leftover(h)
    }
    by_unit = {h.unit_id: h for h in units}
    taken_back: list[tuple[LiveSandbox, bool]] = []
    for record in records:
        handle = by_unit.get(record.unit_id) if record.unit_id else None
        if handle is None:
            handle = by_id.get(record.sandbox_id)
        if handle is not None:
            handle = attrs.evolve(
                handle, sandbox_id=record.sandbox_id
            )  # a claimed pool unit keeps its name
        live = LiveSandbox(record=record, handle=handle)
        live.start_done.set()
        core.live[record.sandbox_id] = live
        core.watch(live)  # its deadlines (taken in without a write)
        if record.state is State.STOPPED and record.auto_transition_state is State.PENDING:
            crash_restarts.resume(core, live)  # planned by a run that ended during its back-off
            continue
        if record.state in (State.STOPPED, State.ARCHIVED):
            live.settled.set()
            continue
        if record.state is State.ARCHIVING:
            live.settled.set()
            await archiving.recover_archiving(core, live)
            continue
        cut_short = (
            record.state is State.PENDING
            and core.lease is not None
            and not archiving.is_restoring(live)
        )  # a cluster's leader ended during the start
        if cut_short and handle is None:  # before it made the unit: this leader starts it
            starting.resume(core, live)
            continue
        taken_back.append((live, cut_short))
    limiter = anyio.CapacityLimiter(RECOVER_AT_ONCE)
    async with anyio.create_task_group() as group:
        for live, cut_short in taken_back:
            group.start_soon(_take_back, core, live, cut_short, limiter)
    return len(records)


async def _take_back(
    core: EngineCore, live: LiveSandbox, cut_short: bool, limiter: anyio.CapacityLimiter
) -> None:
    """Adopt one recovered sandbox that was running or starting, or stop (or start again) it."""
    record = live.record
    async with limiter:
        seen: list[RuntimeStatus] = []
        reason = await adopt(core, live, seen)
        if cut_short and reason is not None and live.handle is not None:
            # Its unit never ran (the leader ended while starting it): made again, from scratch.
            log.info(
                "sandbox %s: its start was cut short (%s); starting it again",
                record.sandbox_id,
                reason,
            )
            await remove_quietly(core.runtime, live.handle)
            live.handle = None
            starting.resume(core, live)
            return
        if reason is not None and archiving.is_restoring(live):
            await archiving.recover_restoring(core, live, reason)
            return
        live.settled.set()
        if reason is not None:
            async with live.lock:
                if seen and crash_restarts.wants_restart(live.record, seen[0]):
                    await crash_restarts.crashed(core, live, reason)  # by its restart policy
                else:
                    reason = crash_restarts.gave_up(live.record, reason)
                    await stop_locked(core, live, reason, unexpected=True)


async def adopt(
    core: EngineCore, live: LiveSandbox, seen: list[RuntimeStatus] | None = None
) -> str | None:
    """Reconnect a recovered live sandbox to its rocklet; the reason to stop it, if it can't be
    (``seen`` gets the status of its unit, when it was inspected)."""
    record = live.record
    if live.handle is None:
        if core.lease is not None and record.state is State.PENDING:
            return "its start was cut short: the cluster's leader ended before its container ran"
        return "container was removed while rock was not running"
    try:
        status = await core.runtime.inspect(live.handle)
    except RockError as exc:
        return f"could not inspect its container after a restart: {exc.message}"
    if seen is not None:
        seen.append(status)
    if status.state is not UnitState.RUNNING or status.rocklet_address is None:
        return describe_exit(status) + " while rock was not running"
    client = RockletClient(
        core.http, *status.rocklet_address, record.sandbox_id, token=record.rocklet_token
    )
    for _ in range(0 if record.paused else ADOPT_TRIES):  # a paused one cannot answer
        # The start's readiness probe (one GET /is_alive on a fresh connection of the loop's
        # own), not a pooled request: a restart adopts thousands at once, and the HTTP client's
        # pool costs several times the probe (its bookkeeping grows with its connections).
        if await client.probe(timeout=5.0):
            break
        await anyio.sleep(1.0)
    else:
        if not record.paused:
            return f"its rocklet did not answer after rock restarted ({ADOPT_TRIES} tries)"
    live.client = client
    live.activity = time.time()
    mapping = await open_ports(core, live, client, status)
    core.save(
        attrs.evolve(
            record,
            port_mapping=mapping or dict(record.port_mapping),
            rocklet_address=(client.host, client.port),
        )
    )
    if record.state is State.PENDING:  # its start was cut short just before the end: finish it
        core.set_phase(
            record.sandbox_id,
            PHASE_DOCKER_RUN,
            PhaseStatus.SUCCESS,
            "docker run success (recovered)",
        )
        core.apply(live.record, Event.ALIVE, start_time=now(), reason=None)
    return None
