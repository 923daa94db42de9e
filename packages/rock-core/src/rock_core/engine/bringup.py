"""Bringing a sandbox's unit up: from a record to a running sandbox whose rocklet answers.

:func:`bring_up` creates the unit (unless it is reused: a restart, a restore), starts it, finds
its rocklet's address and polls the rocklet until it answers, each step recorded in the start's
phases (``image_pull``, ``docker_run``); :func:`became_ready` opens the sandbox's ports
(:func:`open_ports`) and makes it ``running``. A warm-pool claim
(:mod:`~rock_core.engine.claims`) and recovery (:mod:`~rock_core.engine.recovery`) end the same
way. The start's budget, its queue slot and its failure are the caller's
(:mod:`~rock_core.engine.starting`, :mod:`~rock_core.engine.archiving`).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any

import anyio
import attrs

from rock_core._evolve import evolve
from rock_core.engine import egress
from rock_core.engine.admission import commit_refusal, with_defaults
from rock_core.engine.core import EngineCore, with_phases
from rock_core.engine.live import LiveSandbox, describe_exit, new_rocklet_token, now
from rock_core.errors import ImagePullFailed, InternalServerRockError, RockError
from rock_core.models import (
    PHASE_DOCKER_RUN,
    PHASE_IMAGE_PULL,
    ROCKLET_PORT,
    Phase,
    PhaseStatus,
    Port,
    RuntimeStatus,
    UnitState,
)
from rock_core.rocklet_client import RockletClient
from rock_core.runtime import UnitHandle
from rock_core.states import Event, State

__all__ = ["became_ready", "bring_up", "note_unit", "open_ports"]

log = logging.getLogger("rock.engine")


async def bring_up(
    core: EngineCore,
    live: LiveSandbox,
    reuse: bool,
    *,
    on_started: Callable[[], None] | None = None,
) -> None:
    """Create (unless ``reuse``) and start the sandbox's unit, wait for its rocklet, make it
    running; ``on_started`` is called once the runtime has started the unit, before the wait."""
    sandbox_id = live.record.sandbox_id
    spec = live.record.spec
    runtime = core.runtime
    # A fresh unit's steps within pending are progress (RecordStore.put_progress): a restart
    # that finds the record pending finds its unit by its labels, with or without them. A
    # reused unit's (a restart, a restore) are written as any other.
    handle = live.handle if reuse else None
    fresh = handle is None

    def on_phase(name: str, phase: Phase) -> None:
        core.set_phase(sandbox_id, name, phase.status, phase.message, progress=fresh)

    if handle is not None:
        reused: dict[str, tuple[PhaseStatus, str]] = {}
        pulled = live.record.phases.get(PHASE_IMAGE_PULL)
        if pulled is None or pulled.status is not PhaseStatus.SUCCESS:  # a restore set it already
            reused[PHASE_IMAGE_PULL] = (
                PhaseStatus.SUCCESS,
                "restart: reuse the existing container",
            )
        reused[PHASE_DOCKER_RUN] = (PhaseStatus.RUNNING, "starting the container")
        core.save(attrs.evolve(live.record, phases=with_phases(live.record.phases, reused)))
    else:
        core.set_phase(sandbox_id, PHASE_IMAGE_PULL, PhaseStatus.RUNNING, "", progress=True)
        try:
            handle = await runtime.create(
                with_defaults(core, spec),
                labels=core.labels(sandbox_id),
                rocklet_token=_token_of(core, live),
                on_phase=on_phase,
            )
        except ImagePullFailed as exc:
            core.set_phase(sandbox_id, PHASE_IMAGE_PULL, PhaseStatus.FAILED, exc.message)
            raise
        except RockError as exc:
            core.set_phase(sandbox_id, PHASE_DOCKER_RUN, PhaseStatus.FAILED, exc.message)
            raise
        # What the record learns now, written at once with the unit (one write, not three).
        phases: dict[str, tuple[PhaseStatus, str]] = {}
        if live.record.phases[PHASE_IMAGE_PULL].status is PhaseStatus.RUNNING:  # runtime: silent
            phases[PHASE_IMAGE_PULL] = (PhaseStatus.SUCCESS, "image ready")
        if _asks_unit_image(core, live):
            if phases:
                pull_status, pull_message = phases.pop(PHASE_IMAGE_PULL)
                core.set_phase(
                    sandbox_id, PHASE_IMAGE_PULL, pull_status, pull_message, progress=True
                )
            await _check_unit_image(core, live, handle)  # before the record knows the unit
        live.handle = handle
        phases[PHASE_DOCKER_RUN] = (PhaseStatus.RUNNING, "starting the container")
        note_unit(core, live, handle, phases, progress=True)
    try:
        # A runtime that places the unit on another host may pull the image only now.
        status = await runtime.start(handle, on_phase=on_phase) or await runtime.inspect(handle)
    except ImagePullFailed as exc:
        core.set_phase(sandbox_id, PHASE_IMAGE_PULL, PhaseStatus.FAILED, exc.message)
        core.set_phase(
            sandbox_id, PHASE_DOCKER_RUN, PhaseStatus.FAILED, "the image could not be had"
        )
        raise
    except RockError as exc:
        core.set_phase(sandbox_id, PHASE_DOCKER_RUN, PhaseStatus.FAILED, exc.message)
        raise
    if live.record.phases[PHASE_IMAGE_PULL].status is not PhaseStatus.SUCCESS:
        core.set_phase(
            sandbox_id, PHASE_IMAGE_PULL, PhaseStatus.SUCCESS, "image ready", progress=fresh
        )
    if status.rocklet_address is None:
        message = (
            describe_exit(status)
            if status.state is not UnitState.RUNNING
            else "the runtime reported no rocklet address"
        )
        core.set_phase(sandbox_id, PHASE_DOCKER_RUN, PhaseStatus.FAILED, message)
        raise InternalServerRockError(
            f"Failed to start sandbox because docker_run: {message}",
            sandbox_id=sandbox_id,
            attempted="start",
        )
    try:
        await egress.apply(core, live, handle)  # before the rocklet is asked anything
    except RockError as exc:
        core.set_phase(sandbox_id, PHASE_DOCKER_RUN, PhaseStatus.FAILED, exc.message)
        raise
    client = RockletClient(
        core.http, *status.rocklet_address, sandbox_id, token=live.record.rocklet_token
    )
    if on_started is not None:
        on_started()
    await _wait_for_rocklet(core, live, handle, client)
    await became_ready(core, live, client, status, "docker run success")


async def _check_unit_image(core: EngineCore, live: LiveSandbox, handle: UnitHandle) -> None:
    """A tenant's unit is not made from another tenant's commit: the labels of the image the
    unit holds (by its id), so a tag re-pointed since the start was accepted
    (:func:`rock_core.engine.commits.check_commit_tenant`) is seen before the unit starts.
    A refused unit is removed at once, never started (no restart can reuse it). Without keys
    (the spec's tenant is the engine's owner) nothing is asked."""
    spec = live.record.spec
    if spec.tenant is None or spec.tenant == core.owner:  # as _asks_unit_image
        return
    refusal = commit_refusal(spec.image, spec.tenant, await core.runtime.unit_image_labels(handle))
    if refusal is not None:
        core.set_phase(
            live.record.sandbox_id, PHASE_DOCKER_RUN, PhaseStatus.FAILED, refusal.message
        )
        with anyio.CancelScope(shield=True):
            try:
                await core.runtime.remove(handle)
            except RockError:
                pass  # the stop finds it by its labels (the start left no handle)
        raise refusal


def _asks_unit_image(core: EngineCore, live: LiveSandbox) -> bool:
    """Whether :func:`_check_unit_image` asks the runtime anything (a tenant's sandbox)."""
    tenant = live.record.spec.tenant
    return tenant is not None and tenant != core.owner


def _token_of(core: EngineCore, live: LiveSandbox) -> str:
    """The sandbox's rocklet secret (made now for a record that predates secrets)."""
    if live.record.rocklet_token is None:
        core.save(attrs.evolve(live.record, rocklet_token=new_rocklet_token()))
    assert live.record.rocklet_token is not None
    return live.record.rocklet_token


def note_unit(
    core: EngineCore,
    live: LiveSandbox,
    handle: UnitHandle,
    phases: dict[str, tuple[PhaseStatus, str]] | None = None,
    *,
    progress: bool = False,
) -> None:
    """Record what the runtime said of a new unit: its id, notes, and the hardening it applied;
    with ``phases`` (name: status and message) set in the same write. ``progress``: a fresh
    unit, found again by its labels (:meth:`EngineCore.save`'s); never a claimed warm-pool
    unit, which keeps its pool's name and labels and is found only by the id written here."""
    record = live.record
    notes = tuple(dict.fromkeys((*record.notes, *handle.notes)))
    security = dict(handle.security) or dict(record.security)
    if (
        notes != record.notes
        or security != record.security
        or handle.unit_id != record.unit_id
        or phases
    ):
        changes: dict[str, Any] = {"notes": notes, "security": security, "unit_id": handle.unit_id}
        if phases:
            changes["phases"] = with_phases(record.phases, phases)
        core.save(evolve(record, **changes), progress=progress)


async def open_ports(
    core: EngineCore, live: LiveSandbox, client: RockletClient, status: RuntimeStatus
) -> dict[Port, Port]:
    """The sandbox's ``port_mapping``: the ports its runtime published, plus host ports the
    engine forwards through the rocklet for those the runtime lists in ``forwarded_ports``
    (keeping the host ports the record already names when they are free: a restart, an admin
    that recovers its sandboxes). The rocklet's own port 22555 only with the engine's
    ``forward_rocklet_port``: no client of rock's needs it."""
    assert status.rocklet_address is not None
    mapping = dict(status.port_mapping)
    forwarded = tuple(
        port
        for port in status.forwarded_ports
        if port != ROCKLET_PORT or core.config.forward_rocklet_port
    )
    if forwarded:
        try:
            mapping.update(
                await core.forwards.open(
                    live.record.sandbox_id, client, forwarded, preferred=live.record.port_mapping
                )
            )
        except OSError as exc:  # out of file descriptors, say: the sandbox still works
            note = f"ports {', '.join(map(str, forwarded))} not forwarded to the host: {exc}"
            log.warning("sandbox %s: %s", live.record.sandbox_id, note)
            core.save(attrs.evolve(live.record, notes=(*live.record.notes, note)))
    port = status.rocklet_address[1]
    return mapping or ({Port(ROCKLET_PORT): Port(port)} if port else {})  # no port: a unix socket


async def became_ready(
    core: EngineCore,
    live: LiveSandbox,
    client: RockletClient,
    status: RuntimeStatus,
    message: str,
) -> None:
    """A started sandbox's rocklet answered: record its ports and make it running (unless it
    was stopped meanwhile)."""
    mapping = await open_ports(core, live, client, status)
    found: dict[str, Any] = {
        "port_mapping": mapping,
        "rocklet_address": (client.host, client.port),
    }
    if status.node_name or status.node_address:  # a runtime that places units names the node
        found["host_name"] = status.node_name or live.record.host_name
        found["host_ip"] = status.node_address or live.record.host_ip
    live.client = client
    live.activity = time.time()
    async with live.lock:
        record = live.record
        if record.state is not State.PENDING:
            if record.state is not State.DELETED:  # a restart prefers the same host ports
                core.save(attrs.evolve(record, **found))
            core.forwards.close(record.sandbox_id)
            return  # stopped meanwhile
        # The ports, the phase and the transition to running: one record, one write.
        core.apply(
            record,
            Event.ALIVE,
            start_time=now(),
            auto_transition_state=None,
            auto_transition_time=None,
            reason=None,
            phases=with_phases(record.phases, {PHASE_DOCKER_RUN: (PhaseStatus.SUCCESS, message)}),
            **found,
        )


# Readiness polling: the first pause, and the longest. A rocklet on a unix socket is watched
# closely: until its socket file exists a look is one stat (microseconds), so the engine sees it
# listen within a few milliseconds; one reached over TCP is probed with a backoff up to 50 ms.
_FIRST_POLL = 0.002
_LAST_POLL_UNIX = 0.004
_LAST_POLL_TCP = 0.05


async def _wait_for_rocklet(
    core: EngineCore, live: LiveSandbox, handle: UnitHandle, client: RockletClient
) -> None:
    """Poll the rocklet until it answers (the caller's deadline bounds it); between polls,
    notice a unit that died."""
    unix_path = client.host if client.host.startswith("/") else None
    longest = _LAST_POLL_UNIX if unix_path else _LAST_POLL_TCP
    delay = _FIRST_POLL
    last_inspect = time.monotonic()
    while True:
        # No socket file yet: nothing listens, and a probe would only fail.
        exists = unix_path is None or os.path.exists(unix_path)  # noqa: ASYNC240 - a stat
        if exists and await client.probe(timeout=1.0):
            return
        if time.monotonic() - last_inspect >= 0.5:  # every half second: did it die?
            last_inspect = time.monotonic()
            status = await core.runtime.inspect(handle)
            if status.state is not UnitState.RUNNING:
                message = describe_exit(status)
                try:
                    tail = (await core.runtime.logs(handle, tail=5)).strip()
                except RockError:
                    tail = ""
                if tail and tail not in message:
                    message += f"; output: {tail}"
                core.set_phase(
                    live.record.sandbox_id, PHASE_DOCKER_RUN, PhaseStatus.FAILED, message
                )
                raise InternalServerRockError(
                    f"Failed to start sandbox because docker_run: {message}",
                    sandbox_id=live.record.sandbox_id,
                    attempted="start",
                )
        await anyio.sleep(delay)
        delay = min(delay * 1.5, longest)
