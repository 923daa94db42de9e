"""Reset: a running sandbox put back to its image's files, or to a snapshot's (issue #25).

:func:`reset` replaces the sandbox's unit, under its lock: the old unit is removed (its
processes and sessions end with it) and a new one is made from the same spec and started, with
the sandbox's id (Docker: its container name), labels and rocklet secret. The record keeps its
id, limits and ``port_mapping`` (the engine's forwards reopen on the same host ports while they
are free); its state stays ``running`` throughout, and calls made meanwhile are refused as to a
sandbox still starting. The runtime must rename units (capability ``assign``: Docker; Nomad is
refused, naming it): the old unit is renamed out of the way, its processes ended, and removed in
the background once the new unit runs.

- ``snapshot=None``: the files of the sandbox's image, the one it runs now. A sandbox started
  from a snapshot, or reset to one, goes back to that snapshot's files.
- ``snapshot=name``: a snapshot of the sandbox's tenant (another tenant's name is an unknown
  snapshot); the sandbox's image becomes the snapshot's, so later resets come back to it.
- Refused (naming the state) unless the sandbox is running; a paused one: resume it first.
- If the new unit cannot be started, the sandbox is stopped, with the reason.

The phase ``reset`` of its status says what it was reset to and how long it took. After a
reset, the next one's unit is started in the background (:mod:`~rock_core.engine.spares`, on
Docker), so that reset is a swap: "(its spare unit)" in the phase's message.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Container

import anyio
import attrs

from rock_core.engine import egress, snapshots, spares, stopping
from rock_core.engine.admission import startup_timeout, with_defaults
from rock_core.engine.bringup import _wait_for_rocklet, note_unit, open_ports
from rock_core.engine.core import EngineCore
from rock_core.engine.live import LiveSandbox, describe_exit
from rock_core.engine.pausing import paused_error
from rock_core.engine.removals import end_processes
from rock_core.errors import (
    BadRequestRockError,
    InternalServerRockError,
    NotSupported,
    RockError,
    SandboxNotFound,
)
from rock_core.models import (
    NonBlankStr,
    PhaseStatus,
    PullPolicy,
    RuntimeStatus,
    SandboxRecord,
    UnitState,
)
from rock_core.rocklet_client import RockletClient
from rock_core.runtime import UnitHandle
from rock_core.states import State

__all__ = ["PHASE_RESET", "RESET_PREFIX", "is_reset_leftover", "reset"]

log = logging.getLogger("rock.engine")

#: The phase of a sandbox's status that tells its last reset.
PHASE_RESET = "reset"
#: What a reset renames a sandbox's old unit to (then a random suffix) until it is removed.
RESET_PREFIX = "rock-reset-"


def is_reset_leftover(handle: UnitHandle, claimed: Container[str] = ()) -> bool:
    """Whether ``handle`` (from :meth:`Runtime.list`) is an old unit a reset renamed out of the
    way (it keeps its sandbox's labels) that no record holds: an engine that ended in the
    middle of that reset left it behind."""
    return handle.sandbox_id.startswith(RESET_PREFIX) and handle.unit_id not in claimed


def _refuse(record: SandboxRecord) -> BadRequestRockError:
    why = f": {record.reason}" if record.reason else ""
    return BadRequestRockError(
        f"sandbox {record.sandbox_id} cannot be reset: it is {record.state.value}{why}; "
        "only a running sandbox can be",
        sandbox_id=record.sandbox_id,
        attempted="reset",
    )


async def reset(
    core: EngineCore, sandbox_id: str, snapshot: str | None = None, *, tenant: str | None = None
) -> SandboxRecord:
    """:meth:`SandboxManager.reset <rock_core.engine.manager.SandboxManager.reset>`.

    :raises SandboxNotFound: no such sandbox (of ``tenant``, the caller's, when given).
    :raises BadRequestRockError: the sandbox is not running (naming its state), or is paused.
    :raises InvalidParameter: ``unknown snapshot`` (none of that name of the sandbox's tenant).
    :raises NotSupported: the runtime lacks ``assign`` (or ``snapshot_image``, a snapshot named).
    """
    if not core.runtime.capabilities.assign:
        # The new unit takes the old one's name; a runtime that cannot rename the old one out of
        # the way would report its end as the new one's (a Nomad job's id is its name).
        raise NotSupported(
            f"runtime {core.runtime.name!r} cannot reset sandboxes: it cannot rename units "
            "(capability assign)",
            sandbox_id=sandbox_id,
            attempted="reset",
        )
    record = core.get_record(sandbox_id)
    if tenant is not None and (record.spec.tenant or core.owner) != tenant:
        raise SandboxNotFound(
            f"Sandbox {sandbox_id} not found", sandbox_id=sandbox_id, attempted="reset"
        )
    live = core.live.get(sandbox_id)
    if live is None or live.removing:
        raise _refuse(record)
    image: str = record.spec.image
    target = f"image {image}"
    if snapshot is not None:
        image = await snapshots.snapshot_reference(core, record.spec.tenant, snapshot, "reset")
        target = f"snapshot {snapshot}"
    async with live.lock:
        record = live.record
        if record.state is not State.RUNNING or live.handle is None or live.client is None:
            raise _refuse(record)
        if record.paused:
            raise paused_error(record, "reset")
        began = time.monotonic()
        core.set_phase(sandbox_id, PHASE_RESET, PhaseStatus.RUNNING, f"resetting to {target}")
        spec = record.spec
        if image != spec.image:
            spec = attrs.evolve(spec, image=NonBlankStr(image), pull=PullPolicy.NEVER)
            core.save(attrs.evolve(live.record, spec=spec))
        try:
            with anyio.fail_after(startup_timeout(core, spec)):
                swapped = await _replace_unit(core, live)
        except (RockError, TimeoutError) as exc:
            message = exc.message if isinstance(exc, RockError) else "timed out"
            core.set_phase(sandbox_id, PHASE_RESET, PhaseStatus.FAILED, message)
            await stopping.stop_locked(core, live, f"reset to {target} failed: {message}")
            if isinstance(exc, RockError):
                raise
            raise InternalServerRockError(
                f"reset of sandbox {sandbox_id} to {target} timed out",
                sandbox_id=sandbox_id,
                attempted="reset",
            ) from exc
        took = time.monotonic() - began
        core.set_phase(
            sandbox_id,
            PHASE_RESET,
            PhaseStatus.SUCCESS,
            f"reset to {target} in {took:.2f} s" + (" (its spare unit)" if swapped else ""),
        )
        live.activity = time.time()
        live.usage = None
        spares.keep(core, sandbox_id)  # the next reset's unit, started meanwhile
        return live.record


async def _put_away(
    core: EngineCore, old: UnitHandle, client: RockletClient | None
) -> UnitHandle | None:
    """End the old unit's processes and free its name (Docker's container name is the sandbox
    id, which the new unit takes). A runtime that can rename units (capability ``assign``)
    renames it out of the way, to be removed in the background once the new unit runs (removing
    a container takes dockerd a few hundred milliseconds, and slows a start meanwhile): returned
    then. Another runtime removes it now."""
    if client is not None:
        if core.runtime.capabilities.assign and core.is_open:
            await end_processes(client, core.removals.end_limiter)
        await client.forget()
    if core.runtime.capabilities.assign and core.is_open:
        try:
            await core.runtime.assign(old, f"{RESET_PREFIX}{secrets.token_hex(8)}")
        except RockError as exc:
            log.warning("could not rename the old unit of %s: %s", old.sandbox_id, exc)
        else:
            return old
    await core.runtime.remove(old)
    return None


async def _replace_unit(core: EngineCore, live: LiveSandbox) -> bool:
    """Remove the sandbox's unit and bring up a new one of its spec (the lock held); whether
    its spare unit served."""
    old, live.handle = live.handle, None
    client, live.client = live.client, None
    assert old is not None
    spare = spares.take(core, live.record.sandbox_id, live.record.spec.image)
    renamed = await _put_away(core, old, client)
    try:
        if spare is not None and await _swap_in(core, live, spare):
            return True
        await _bring_up_again(core, live)
        return False
    finally:
        if renamed is not None:
            core.removals.submit(renamed)


async def _swap_in(core: EngineCore, live: LiveSandbox, spare: spares.Spare) -> bool:
    """Make the sandbox's spare unit its unit (renamed after it); whether it answered."""
    sandbox_id = live.record.sandbox_id
    token = live.record.rocklet_token
    assert spare.status.rocklet_address is not None and token is not None
    try:
        with anyio.CancelScope(shield=True):  # a stop meanwhile must find it in live.handle
            handle = await core.runtime.assign(spare.handle, sandbox_id)
            live.handle = handle
    except RockError as exc:
        log.warning("could not take the spare unit of %s: %s", sandbox_id, exc)
        core.removals.submit(spare.handle)
        return False
    client = RockletClient(core.http, *spare.status.rocklet_address, sandbox_id, token=token)
    try:
        await egress.apply(core, live, handle)  # before the new unit is asked anything
        alive = await client.is_alive(timeout=2.0)
    except RockError as exc:
        log.warning("could not put sandbox %s's egress policy on its spare: %s", sandbox_id, exc)
        alive = False
    if not alive:
        live.handle = None
        with anyio.CancelScope(shield=True):
            await core.runtime.remove(handle)  # its name is the next unit's
        return False
    note_unit(core, live, attrs.evolve(handle, security=spare.handle.security))
    await _serve(core, live, client, spare.status)
    return True


async def _serve(
    core: EngineCore, live: LiveSandbox, client: RockletClient, status: RuntimeStatus
) -> None:
    """The new unit answers: carry the sandbox's ports to it (the same host ports: the
    engine's forwards stay open) and route calls to it."""
    sandbox_id = live.record.sandbox_id
    kept = core.forwards.retarget(sandbox_id, client)
    if kept and not status.port_mapping and set(kept) <= set(live.record.port_mapping):
        mapping = dict(live.record.port_mapping)
    else:
        mapping = await open_ports(core, live, client, status)
    core.save(
        attrs.evolve(live.record, port_mapping=mapping, rocklet_address=(client.host, client.port))
    )
    live.client = client


async def _bring_up_again(core: EngineCore, live: LiveSandbox) -> None:
    """Create and start the sandbox's new unit, wait for its rocklet, reopen its ports."""
    runtime = core.runtime
    record = live.record
    sandbox_id = record.sandbox_id
    assert record.rocklet_token is not None
    handle = await runtime.create(
        with_defaults(core, record.spec),
        labels=core.labels(sandbox_id),
        rocklet_token=record.rocklet_token,
    )
    live.handle = handle
    note_unit(core, live, handle)
    status = await runtime.start(handle) or await runtime.inspect(handle)
    if status.rocklet_address is None:
        message = (
            describe_exit(status)
            if status.state is not UnitState.RUNNING
            else "the runtime reported no rocklet address"
        )
        raise InternalServerRockError(
            f"reset of sandbox {sandbox_id} failed: {message}",
            sandbox_id=sandbox_id,
            attempted="reset",
        )
    await egress.apply(core, live, handle)  # before the new unit is asked anything
    client = RockletClient(
        core.http, *status.rocklet_address, sandbox_id, token=record.rocklet_token
    )
    await _wait_for_rocklet(core, live, handle, client)
    await _serve(core, live, client, status)
