"""The start pipeline: from a start request to a running sandbox whose rocklet answers.

:func:`start_async` checks the request (:func:`validate`: the engine's maximums, the allowed
capabilities, the runtime's network modes and sandbox-id rule), writes the record ``pending``
with a fresh rocklet secret and hands the rest to a task, :func:`run_start`: a claim from a warm
pool (:mod:`rock_core.engine.claims`), else a slot in the fair start queue and
:func:`bring_up` (``runtime.create`` -> ``start`` -> ``inspect`` -> poll the rocklet), each
under the sandbox's startup budget. :func:`became_ready` makes the sandbox ``running``; a failed
start stops it with the reason, which :func:`wait_until_running` reports. :func:`restart` runs
the same pipeline again on a stopped sandbox's own unit.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from typing import TYPE_CHECKING

import anyio
import attrs

from rock_core.actions import SandboxStartRequest
from rock_core.converters import spec_from_start_request
from rock_core.engine import archiving, claims
from rock_core.engine.live import (
    LiveSandbox,
    describe_exit,
    new_rocklet_token,
    not_running_error,
    now,
)
from rock_core.engine.stopping import stop_locked
from rock_core.errors import (
    BadRequestRockError,
    ImagePullFailed,
    InternalServerRockError,
    InvalidParameter,
    QuotaExceeded,
    RockError,
    SandboxAlreadyExists,
    StartupTimeout,
)
from rock_core.models import (
    PHASE_DOCKER_RUN,
    PHASE_IMAGE_PULL,
    ROCKLET_PORT,
    Phase,
    PhaseStatus,
    Port,
    RuntimeStatus,
    SandboxRecord,
    SandboxSpec,
    SandboxStatus,
    UnitState,
)
from rock_core.rocklet_client import RockletClient
from rock_core.runtime import UnitHandle
from rock_core.sizes import format_size
from rock_core.states import LIVE_STATES, Event, State
from rock_core.tenancy import Quota, quota_refusal, tenant_usage, usage_of

if TYPE_CHECKING:
    from rock_core.engine.manager import SandboxManager

__all__ = [
    "became_ready",
    "check_quota",
    "bring_up",
    "note_unit",
    "restart",
    "run_start",
    "start_async",
    "startup_timeout",
    "validate",
    "wait_until_running",
    "waiting_phases",
    "with_defaults",
]

log = logging.getLogger("rock.engine")


def waiting_phases() -> dict[str, Phase]:
    """The phases of a start that has not begun: ``image_pull`` and ``docker_run`` waiting."""
    return {
        PHASE_IMAGE_PULL: Phase(status=PhaseStatus.WAITING),
        PHASE_DOCKER_RUN: Phase(status=PhaseStatus.WAITING),
    }


def with_defaults(engine: SandboxManager, spec: SandboxSpec) -> SandboxSpec:
    """What the runtime gets: ``spec`` with the engine's defaults where the request left a
    unit-shaping field unset. (The record keeps the request's ``None``, so the warm pool a
    client names by its request is the pool its starts are served from.)"""
    if spec.pids_limit is None:
        spec = attrs.evolve(spec, pids_limit=engine.config.default_pids_limit)
    return spec


def startup_timeout(engine: SandboxManager, spec: SandboxSpec) -> float:
    """Seconds a start of ``spec`` may take once it leaves the queue."""
    return float(spec.startup_timeout or engine.config.default_startup_timeout)


def validate(engine: SandboxManager, spec: SandboxSpec) -> None:
    """Check ``spec`` against the engine's maximums and what its runtime and archive store offer.

    :raises InvalidParameter: every problem at once, each field named.
    """
    c = engine.config
    runtime = engine.runtime
    problems = []
    if spec.cpus > c.max_cpus:
        problems.append(
            ("cpus", f"cpus: {spec.cpus:g} is above the maximum of {c.max_cpus:g}", spec.cpus)
        )
    if spec.limit_cpus is not None and spec.limit_cpus > c.max_cpus:
        problems.append(
            (
                "limit_cpus",
                f"limit_cpus: {spec.limit_cpus:g} is above the maximum of {c.max_cpus:g}",
                spec.limit_cpus,
            )
        )
    if spec.memory > c.max_memory:
        problems.append(
            (
                "memory",
                f"memory: {format_size(spec.memory)} is above the maximum of {format_size(c.max_memory)}",
                spec.memory,
            )
        )
    if spec.disk is not None and spec.disk > c.max_disk:
        problems.append(
            (
                "disk",
                f"disk: {format_size(spec.disk)} is above the maximum of {format_size(c.max_disk)}",
                spec.disk,
            )
        )
    network = spec.runtime_options.get("network")
    modes = runtime.network_modes
    if network is not None and network not in modes:
        problems.append(
            (
                "network",
                f"network: expected one of {', '.join(modes)}, got {network!r} (what runtime {runtime.name!r} offers)",
                network,
            )
        )
    group = spec.runtime_options.get("network_group")
    if group is not None and not runtime.capabilities.network_groups:
        problems.append(
            (
                "network_group",
                f"network_group: {runtime.capabilities.missing('network_groups', runtime.name)}; got {group!r}",
                group,
            )
        )
    if spec.pids_limit is not None and spec.pids_limit > c.max_pids_limit:
        problems.append(
            (
                "pids_limit",
                f"pids_limit: {spec.pids_limit} is above the maximum of {c.max_pids_limit}",
                spec.pids_limit,
            )
        )
    refused = [name for name in spec.cap_add if name not in c.allowed_cap_add]
    if refused:
        allowed = ", ".join(c.allowed_cap_add) or "none"
        problems.append(
            (
                "cap_add",
                f"cap_add: {', '.join(refused)} may not be added here (allowed: {allowed}; see docs/security.md)",
                list(spec.cap_add),
            )
        )
    if spec.auto_archive_seconds is not None and (
        engine.archive_store is None or not runtime.can_snapshot
    ):
        why = (
            "no archive store is configured (archive_store; rock-archive-s3)"
            if engine.archive_store is None
            else f"the runtime {runtime.name!r} cannot snapshot sandboxes"
        )
        problems.append(
            (
                "auto_archive_seconds",
                f"auto_archive_seconds: sandboxes cannot be archived here: {why}; unset it",
                spec.auto_archive_seconds,
            )
        )
    if problems:
        field = ", ".join(p[0] for p in problems)
        raise InvalidParameter(
            "; ".join(p[1] for p in problems), field=field, value=problems[0][2], attempted="start"
        )


def check_quota(
    engine: SandboxManager, spec: SandboxSpec, quota: Quota | None, *, attempted: str
) -> None:
    """Refuse a start of ``spec`` that would take its tenant past ``quota``, counted over the
    tenant's pending and running sandboxes (:mod:`rock_core.tenancy`).

    Synchronous, and the caller makes the sandbox pending before it next awaits: two starts
    cannot both pass for the last slot.

    :raises QuotaExceeded: naming the quota, the tenant's use and what was asked, e.g.
        ``tenant 'team-a': max_memory 8.00g reached (using 6.00g, asked 4.00g)``.
    """
    if not quota or spec.tenant is None:
        return
    using = tenant_usage((live.record for live in engine._live.values()), spec.tenant)
    refusal = quota_refusal(spec.tenant, quota, using, usage_of(spec))
    if refusal is not None:
        _quota_field, message = refusal
        raise QuotaExceeded(message, sandbox_id=spec.sandbox_id, attempted=attempted)


async def start_async(
    engine: SandboxManager,
    request: SandboxStartRequest,
    *,
    tenant: str | None = None,
    quota: Quota | None = None,
    **identity: str | None,
) -> SandboxRecord:
    """:meth:`SandboxManager.start_async <rock_core.engine.manager.SandboxManager.start_async>`:
    record the start ``pending``, hand it to :func:`run_start`, and return at once.

    ``tenant``: the sandbox's namespace (default: the engine's owner); ``quota``: what that
    tenant may hold at once (:func:`check_quota`). ``identity``: ROCK's identity headers
    (``user_id``, ``experiment_id``, ``namespace``, ``cluster``).
    """
    tg = engine._open_task_group()
    spec = attrs.evolve(spec_from_start_request(request, **identity), tenant=tenant or engine.owner)
    validate(engine, spec)
    sandbox_id = spec.sandbox_id or uuid.uuid4().hex
    why = engine.runtime.sandbox_id_problem(sandbox_id)
    if why is not None:
        raise InvalidParameter(
            f"sandbox_id: {sandbox_id!r} is not a valid id ({why})",
            field="sandbox_id",
            value=sandbox_id,
            attempted="start",
        )
    if sandbox_id in engine._live or (
        (old := engine.store.get(sandbox_id)) is not None and old.state is not State.DELETED
    ):
        raise SandboxAlreadyExists(
            f"Sandbox {sandbox_id} already exists", sandbox_id=sandbox_id, attempted="start"
        )
    if spec.auto_clear_seconds is None:
        spec = attrs.evolve(spec, auto_clear_seconds=engine.config.default_auto_clear_seconds)
    spec = attrs.evolve(spec, sandbox_id=sandbox_id)
    # No await from here until the record is live: the quota sees every start before this one.
    check_quota(engine, spec, quota, attempted="start")
    record = SandboxRecord(
        sandbox_id=sandbox_id,
        spec=spec,
        create_time=now(),
        state=State.PENDING,
        phases=waiting_phases(),
        host_name=socket.gethostname(),
        host_ip="127.0.0.1",
        owner=engine.owner,
        runtime=engine.runtime.name,
        rocklet_token=new_rocklet_token(),
    )
    engine._live[sandbox_id] = LiveSandbox(record=record)
    engine._save(record)
    tg.start_soon(run_start, engine, sandbox_id, time.monotonic(), False)
    return record


async def run_start(engine: SandboxManager, sandbox_id: str, t0: float, reuse: bool) -> None:
    """The task behind a start: a warm-pool claim or a queue slot and :func:`bring_up`, within
    the startup budget; on failure the sandbox is stopped with the reason. ``reuse``: a restart,
    on the sandbox's own unit."""
    live = engine._live.get(sandbox_id)
    if live is None:
        return
    spec = live.record.spec
    budget = startup_timeout(engine, spec)
    key = spec.experiment_id or spec.user_id or "default"
    error: RockError | None = None
    with anyio.CancelScope() as scope:
        live.start_scope = scope
        try:
            with anyio.fail_after(budget):
                claimed = not reuse and await claims.claim_warm(engine, live)
            if not claimed:
                # The startup budget starts when the start leaves the queue: a burst waits,
                # it does not time out for want of a slot.
                async with engine.queue.slot(key, sandbox_id, spec.priority):
                    with anyio.fail_after(budget):
                        await bring_up(engine, live, reuse)
        except TimeoutError:
            error = StartupTimeout(
                f"Failed to start sandbox within {budget:g}s",
                sandbox_id=sandbox_id,
                attempted="start",
            )
            phase = _first_unfinished_phase(live)
            engine._set_phase(
                sandbox_id, phase, PhaseStatus.TIMEOUT, f"did not finish within {budget:g}s"
            )
        except RockError as exc:
            error = exc
        except Exception as exc:  # a runtime bug must not leave the sandbox pending forever
            log.exception("start of sandbox %s failed", sandbox_id)
            error = InternalServerRockError(
                f"start failed: {exc!r}", sandbox_id=sandbox_id, attempted="start"
            )
    live.start_scope = None
    live.start_done.set()
    if scope.cancelled_caught:
        live.settled.set()
        return
    if error is None:
        seconds = time.monotonic() - t0
        for observe in engine.start_observers:
            observe(seconds)
        live.settled.set()
        return
    live.start_error = error
    with anyio.CancelScope(shield=True):
        async with live.lock:
            if live.record.state in LIVE_STATES:
                await stop_locked(engine, live, f"start failed: {error.message}", unexpected=True)
    live.settled.set()


def _first_unfinished_phase(live: LiveSandbox) -> str:
    for name in (PHASE_IMAGE_PULL, PHASE_DOCKER_RUN):
        phase = live.record.phases.get(name)
        if phase is None or phase.status in (PhaseStatus.WAITING, PhaseStatus.RUNNING):
            return name
    return PHASE_DOCKER_RUN


async def bring_up(engine: SandboxManager, live: LiveSandbox, reuse: bool) -> None:
    """Create (unless ``reuse``) and start the sandbox's unit, wait for its rocklet, make it running."""
    sandbox_id = live.record.sandbox_id
    spec = live.record.spec
    runtime = engine.runtime

    def on_phase(name: str, phase: Phase) -> None:
        engine._set_phase(sandbox_id, name, phase.status, phase.message)

    if reuse and live.handle is not None:
        pulled = live.record.phases.get(PHASE_IMAGE_PULL)
        if pulled is None or pulled.status is not PhaseStatus.SUCCESS:  # a restore set it already
            engine._set_phase(
                sandbox_id,
                PHASE_IMAGE_PULL,
                PhaseStatus.SUCCESS,
                "restart: reuse the existing container",
            )
        handle = live.handle
    else:
        engine._set_phase(sandbox_id, PHASE_IMAGE_PULL, PhaseStatus.RUNNING, "")
        try:
            handle = await runtime.create(
                with_defaults(engine, spec),
                labels=engine._labels(sandbox_id),
                rocklet_token=_token_of(engine, live),
                on_phase=on_phase,
            )
        except ImagePullFailed as exc:
            engine._set_phase(sandbox_id, PHASE_IMAGE_PULL, PhaseStatus.FAILED, exc.message)
            raise
        except RockError as exc:
            engine._set_phase(sandbox_id, PHASE_DOCKER_RUN, PhaseStatus.FAILED, exc.message)
            raise
        if (
            live.record.phases[PHASE_IMAGE_PULL].status is PhaseStatus.RUNNING
        ):  # the runtime said nothing
            engine._set_phase(sandbox_id, PHASE_IMAGE_PULL, PhaseStatus.SUCCESS, "image ready")
        live.handle = handle
        note_unit(engine, live, handle)
    engine._set_phase(sandbox_id, PHASE_DOCKER_RUN, PhaseStatus.RUNNING, "starting the container")
    try:
        # A runtime that places the unit on another host may pull the image only now.
        status = await runtime.start(handle, on_phase=on_phase) or await runtime.inspect(handle)
    except ImagePullFailed as exc:
        engine._set_phase(sandbox_id, PHASE_IMAGE_PULL, PhaseStatus.FAILED, exc.message)
        engine._set_phase(
            sandbox_id, PHASE_DOCKER_RUN, PhaseStatus.FAILED, "the image could not be had"
        )
        raise
    except RockError as exc:
        engine._set_phase(sandbox_id, PHASE_DOCKER_RUN, PhaseStatus.FAILED, exc.message)
        raise
    if live.record.phases[PHASE_IMAGE_PULL].status is not PhaseStatus.SUCCESS:
        engine._set_phase(sandbox_id, PHASE_IMAGE_PULL, PhaseStatus.SUCCESS, "image ready")
    if status.rocklet_address is None:
        message = (
            describe_exit(status)
            if status.state is not UnitState.RUNNING
            else "the runtime reported no rocklet address"
        )
        engine._set_phase(sandbox_id, PHASE_DOCKER_RUN, PhaseStatus.FAILED, message)
        raise InternalServerRockError(
            f"Failed to start sandbox because docker_run: {message}",
            sandbox_id=sandbox_id,
            attempted="start",
        )
    client = RockletClient(
        engine.http, *status.rocklet_address, sandbox_id, token=live.record.rocklet_token
    )
    await _wait_for_rocklet(engine, live, handle, client)
    await became_ready(engine, live, client, status, "docker run success")


def _token_of(engine: SandboxManager, live: LiveSandbox) -> str:
    """The sandbox's rocklet secret (made now for a record that predates secrets)."""
    if live.record.rocklet_token is None:
        engine._save(attrs.evolve(live.record, rocklet_token=new_rocklet_token()))
    assert live.record.rocklet_token is not None
    return live.record.rocklet_token


def note_unit(engine: SandboxManager, live: LiveSandbox, handle: UnitHandle) -> None:
    """Record what the runtime said of a new unit: its id, notes, and the hardening it applied."""
    notes = tuple(dict.fromkeys((*live.record.notes, *handle.notes)))
    security = dict(handle.security) or dict(live.record.security)
    if (
        notes != live.record.notes
        or security != live.record.security
        or handle.unit_id != live.record.unit_id
    ):
        engine._save(
            attrs.evolve(live.record, notes=notes, security=security, unit_id=handle.unit_id)
        )


async def open_ports(
    engine: SandboxManager, live: LiveSandbox, client: RockletClient, status: RuntimeStatus
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
        if port != ROCKLET_PORT or engine.config.forward_rocklet_port
    )
    if forwarded:
        try:
            mapping.update(
                await engine.forwards.open(
                    live.record.sandbox_id, client, forwarded, preferred=live.record.port_mapping
                )
            )
        except OSError as exc:  # out of file descriptors, say: the sandbox still works
            note = f"ports {', '.join(map(str, forwarded))} not forwarded to the host: {exc}"
            log.warning("sandbox %s: %s", live.record.sandbox_id, note)
            engine._save(attrs.evolve(live.record, notes=(*live.record.notes, note)))
    port = status.rocklet_address[1]
    return mapping or ({Port(ROCKLET_PORT): Port(port)} if port else {})  # no port: a unix socket


async def became_ready(
    engine: SandboxManager,
    live: LiveSandbox,
    client: RockletClient,
    status: RuntimeStatus,
    message: str,
) -> None:
    """A started sandbox's rocklet answered: record its ports and make it running (unless it
    was stopped meanwhile)."""
    mapping = await open_ports(engine, live, client, status)
    placed = {"host_name": status.node_name, "host_ip": status.node_address}
    engine._save(
        attrs.evolve(live.record, port_mapping=mapping, **{k: v for k, v in placed.items() if v})
    )
    live.client = client
    live.activity = time.time()
    async with live.lock:
        if live.record.state is not State.PENDING:
            engine.forwards.close(live.record.sandbox_id)
            return  # stopped meanwhile
        engine._set_phase(live.record.sandbox_id, PHASE_DOCKER_RUN, PhaseStatus.SUCCESS, message)
        engine._apply(
            live.record,
            Event.ALIVE,
            start_time=now(),
            auto_transition_state=None,
            auto_transition_time=None,
            reason=None,
        )


# Readiness polling: the first pause, and the longest. A rocklet on a unix socket is watched
# closely: until its socket file exists a look is one stat (microseconds), so the engine sees it
# listen within a few milliseconds; one reached over TCP is probed with a backoff up to 50 ms.
_FIRST_POLL = 0.002
_LAST_POLL_UNIX = 0.004
_LAST_POLL_TCP = 0.05


async def _wait_for_rocklet(
    engine: SandboxManager, live: LiveSandbox, handle: UnitHandle, client: RockletClient
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
            status = await engine.runtime.inspect(handle)
            if status.state is not UnitState.RUNNING:
                message = describe_exit(status)
                try:
                    tail = (await engine.runtime.logs(handle, tail=5)).strip()
                except RockError:
                    tail = ""
                if tail and tail not in message:
                    message += f"; output: {tail}"
                engine._set_phase(
                    live.record.sandbox_id, PHASE_DOCKER_RUN, PhaseStatus.FAILED, message
                )
                raise InternalServerRockError(
                    f"Failed to start sandbox because docker_run: {message}",
                    sandbox_id=live.record.sandbox_id,
                    attempted="start",
                )
        await anyio.sleep(delay)
        delay = min(delay * 1.5, longest)


async def wait_until_running(
    engine: SandboxManager, sandbox_id: str, timeout: float | None = None
) -> SandboxStatus:
    """:meth:`SandboxManager.wait_until_running <rock_core.engine.manager.SandboxManager.wait_until_running>`:
    wait for the current start of ``sandbox_id`` to finish; its running status, or why it is not running."""
    live = engine._live.get(sandbox_id)
    if live is None:
        raise not_running_error(engine.get_record(sandbox_id), "wait_until_running")
    with anyio.move_on_after(timeout) as scope:
        await live.settled.wait()
    if scope.cancelled_caught:
        raise StartupTimeout(
            f"Failed to start sandbox within {timeout:g}s", sandbox_id=sandbox_id, attempted="start"
        )
    record = engine.get_record(sandbox_id)
    if record.state is State.RUNNING:
        return engine.status_of(record)
    error = live.start_error
    if error is not None:
        failed = [
            (n, p)
            for n, p in record.phases.items()
            if p.status in (PhaseStatus.FAILED, PhaseStatus.TIMEOUT)
        ]
        if failed:
            name, phase = failed[0]
            message = f"Failed to start sandbox because {name}: {phase.message}"
        else:
            message = error.message
        raise (
            type(error)(message, sandbox_id=sandbox_id, attempted="start")
            if isinstance(error, InternalServerRockError)
            else error
        )
    raise not_running_error(record, "wait_until_running")


async def restart(
    engine: SandboxManager, sandbox_id: str, quota: Quota | None = None
) -> SandboxRecord:
    """:meth:`SandboxManager.restart <rock_core.engine.manager.SandboxManager.restart>`: start a
    stopped sandbox again in its own unit (files kept, sessions gone), or restore an archived
    one from its archive (:mod:`rock_core.engine.archiving`); within its tenant's ``quota``."""
    live = archiving.live_or_load(engine, sandbox_id)
    record = live.record if live is not None else engine.get_record(sandbox_id)
    if live is not None and record.state is State.ARCHIVED:
        await archiving.restore(engine, live, quota)
        return live.record
    runtime = engine.runtime
    if record.state is State.STOPPED and not runtime.keeps_files_across_stop:
        raise BadRequestRockError(
            f"Sandbox {sandbox_id} cannot be restarted: "
            + runtime.capabilities.missing("keeps_files_across_stop", runtime.name),
            sandbox_id=sandbox_id,
            attempted="restart",
        )
    if live is None or record.state is not State.STOPPED or live.handle is None:
        why = f"current state is {record.state.value}"
        if record.state in (State.STOPPED, State.DELETED) and record.spec.auto_delete_seconds in (
            None,
            0,
        ):
            why += (
                " and its container is removed at stop (auto_delete_seconds=0, the default); "
                "start it with auto_delete_seconds > 0 to keep it restartable"
            )
        raise BadRequestRockError(
            f"Sandbox {sandbox_id} cannot be restarted: {why}",
            sandbox_id=sandbox_id,
            attempted="restart",
        )
    async with live.lock:
        check_quota(engine, live.record.spec, quota, attempted="restart")
        engine._apply(
            live.record,
            Event.RESTART,
            start_time=None,
            stop_time=None,
            reason=None,
            auto_transition_state=None,
            auto_transition_time=None,
            phases=waiting_phases(),
        )
        live.begin_start()
    assert engine._tg is not None
    engine._tg.start_soon(run_start, engine, sandbox_id, time.monotonic(), True)
    return live.record
