"""Starting sandboxes: from a start request (or a restart) to a settled start.

:func:`start_async` checks the request (:mod:`~rock_core.engine.admission`: the engine's
maximums, the allowed capabilities, the runtime's network modes, the tenant's quota) and the
runtime's sandbox-id rule, writes the record ``pending`` with a fresh rocklet secret and hands
the rest to a task, :func:`run_start`: a claim from a warm pool
(:mod:`~rock_core.engine.claims`), else a slot in the fair start queue and
:func:`~rock_core.engine.bringup.bring_up` (``runtime.create`` -> ``start`` -> ``inspect`` ->
poll the rocklet), each under the sandbox's startup budget. A failed start stops the sandbox
with the reason, which :func:`wait_until_running` reports. The task's cancel scope is made with
the record, so a stop called before the task has run cancels it too (and waits for it): the
task then takes no claim, no queue slot and no unit. :func:`restart` (of a stopped
sandbox, by its caller) runs the same pipeline again on the sandbox's own unit, or restores an
archived one (:mod:`~rock_core.engine.archiving`); the restart of a crashed sandbox by its
restart policy is :mod:`~rock_core.engine.crash_restarts`'.

A start may carry an idempotency key (the admin's ``Idempotency-Key`` header): a second start
with the same key by the same tenant answers the first one's sandbox instead of starting another
(:func:`_keyed_start`), so a client may send a start again after a connection error.
"""

from __future__ import annotations

import hashlib
import logging
import socket
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel

from rock_core._evolve import evolve
from rock_core.actions import SandboxStartRequest
from rock_core.converters import spec_from_start_request
from rock_core.engine import archiving, claims
from rock_core.engine.admission import check_quota, startup_timeout, validate, waiting_phases
from rock_core.engine.bringup import bring_up
from rock_core.engine.core import EngineCore
from rock_core.engine.live import LiveSandbox, new_rocklet_token, not_running_error, now
from rock_core.engine.settle_waits import SettleWatch
from rock_core.engine.stopping import stop_locked
from rock_core.errors import (
    BadRequestRockError,
    InternalServerRockError,
    InvalidParameter,
    RockError,
    SandboxAlreadyExists,
    StartupTimeout,
)
from rock_core.models import (
    PHASE_DOCKER_RUN,
    PHASE_IMAGE_PULL,
    NonBlankStr,
    PhaseStatus,
    SandboxRecord,
    SandboxSpec,
    SandboxStatus,
)
from rock_core.states import LIVE_STATES, Event, State
from rock_core.tenancy import Quota

__all__ = [
    "IDEMPOTENCY_METADATA_KEY",
    "idempotency_digest",
    "idempotency_key_problem",
    "restart",
    "run_start",
    "start_async",
    "wait_any",
    "wait_until_running",
]

log = logging.getLogger("rock.engine")

IDEMPOTENCY_METADATA_KEY = "rock.idempotency_key"
"""The metadata key of a keyed start's record: :func:`idempotency_digest` of its tenant and key."""

MAX_IDEMPOTENCY_KEY = 200


def idempotency_key_problem(key: str) -> str | None:
    """Why ``key`` is no idempotency key (blank, longer than 200 characters, or holding a
    character that is not printable ASCII), or ``None``."""
    if not key.strip():
        return "a blank key"
    if len(key) > MAX_IDEMPOTENCY_KEY:
        return f"at most {MAX_IDEMPOTENCY_KEY} characters, got {len(key)}"
    if not (key.isascii() and key.isprintable()):  # each character in " ".."~"
        return "printable ASCII characters only"
    return None


def idempotency_digest(tenant: str, key: str) -> str:
    """The id of the sandbox a start keyed ``key`` by ``tenant`` makes (when it names none):
    32 hex characters of a SHA-256, so two tenants' equal keys never meet."""
    return hashlib.sha256(f"{tenant}\0{key}".encode()).hexdigest()[:32]


async def start_async(
    core: EngineCore,
    request: SandboxStartRequest,
    *,
    tenant: str | None = None,
    quota: Quota | None = None,
    idempotency_key: str | None = None,
    **identity: str | None,
) -> SandboxRecord:
    """:meth:`SandboxManager.start_async <rock_core.engine.manager.SandboxManager.start_async>`:
    record the start ``pending``, hand it to :func:`run_start`, and return at once.

    ``tenant``: the sandbox's namespace (default: the engine's owner); ``quota``: what that
    tenant may hold at once (:func:`check_quota`). ``identity``: ROCK's identity headers
    (``user_id``, ``experiment_id``, ``namespace``, ``cluster``). ``idempotency_key``: see
    :func:`_keyed_start`.
    """
    core.task_group()  # raises unless the engine is open, before anything is recorded
    spec = spec_from_start_request(request, **identity)
    tenant = tenant or core.owner  # the spec gets it with the rest, below
    if IDEMPOTENCY_METADATA_KEY in spec.metadata:
        raise InvalidParameter(
            f"metadata: {IDEMPOTENCY_METADATA_KEY!r} is reserved for the engine",
            field="metadata",
            value=IDEMPOTENCY_METADATA_KEY,
            attempted="start",
        )
    validate(core, spec)
    digest = None
    # The store's records of the ids looked at, each read once (no await until the record is
    # live, so none changes meanwhile): a keyed start naming its id asks about it twice.
    looked: dict[str, SandboxRecord | None] = {}

    def stored(sandbox_id: str) -> SandboxRecord | None:
        if sandbox_id not in looked:
            looked[sandbox_id] = core.store.get(sandbox_id)
        return looked[sandbox_id]

    if idempotency_key is not None:
        # No await from here until the record is live: a second start with this key finds it.
        digest = idempotency_digest(tenant, idempotency_key)
        earlier = _keyed_start(core, spec, tenant, idempotency_key, digest, stored)
        if earlier is not None:
            return earlier
    sandbox_id = NonBlankStr(spec.sandbox_id or digest or uuid.uuid4().hex)
    why = core.runtime.sandbox_id_problem(sandbox_id)
    if why is not None:
        raise InvalidParameter(
            f"sandbox_id: {sandbox_id!r} is not a valid id ({why})",
            field="sandbox_id",
            value=sandbox_id,
            attempted="start",
        )
    if sandbox_id in core.live or (
        # An id made here (a new uuid4) is in no record: the store is not asked.
        (spec.sandbox_id or digest)
        and (old := stored(sandbox_id)) is not None
        and old.state is not State.DELETED
    ):
        raise SandboxAlreadyExists(
            f"Sandbox {sandbox_id} already exists", sandbox_id=sandbox_id, attempted="start"
        )
    # The spec the record keeps, made once (each change of a spec runs its every check again).
    final: dict[str, Any] = {"sandbox_id": sandbox_id, "tenant": tenant}
    if digest is not None:
        final["metadata"] = {**spec.metadata, IDEMPOTENCY_METADATA_KEY: digest}
    if spec.auto_clear_seconds is None:
        final["auto_clear_seconds"] = core.config.default_auto_clear_seconds
    spec = evolve(spec, **final)
    # No await from here until the record is live: the quota sees every start before this one.
    check_quota(core, spec, quota, attempted="start")
    record = SandboxRecord(
        sandbox_id=sandbox_id,
        spec=spec,
        create_time=now(),
        state=State.PENDING,
        phases=waiting_phases(),
        host_name=socket.gethostname(),
        host_ip="127.0.0.1",
        owner=core.owner,
        runtime=core.runtime.name,
        rocklet_token=new_rocklet_token(),
    )
    live = core.live[sandbox_id] = LiveSandbox(record=record)
    core.save(record)
    _hand_to_task(core, live, reuse=False)
    return record


def _keyed_start(
    core: EngineCore,
    spec: SandboxSpec,
    tenant: str,
    key: str,
    digest: str,
    stored: Callable[[str], SandboxRecord | None],
) -> SandboxRecord | None:
    """The record of the sandbox an earlier start with this idempotency key made, whatever its
    state (the start is not made again), or ``None``: this start is the first.

    The sandbox's id is the one the request names, else ``digest`` (the tenant's and the key's).
    An earlier start is a sandbox of that id, of the same tenant, recorded with the same
    ``digest``; a sandbox of that id that is not is refused further on as before
    (:class:`SandboxAlreadyExists`). ``stored``: the store's record of an id (``None``: none).

    :raises InvalidParameter: the key (``idempotency_key_problem``), or a request naming a
        sandbox_id while the key already made the sandbox ``digest``.
    """
    why = idempotency_key_problem(key)
    if why is not None:
        raise InvalidParameter(
            f"idempotency_key: {why} ({key!r})",
            field="idempotency_key",
            value=key,
            attempted="start",
        )

    def made_by_key(sandbox_id: str) -> SandboxRecord | None:
        live = core.live.get(sandbox_id)
        record = live.record if live is not None else stored(sandbox_id)
        if (
            record is not None
            and record.spec.tenant == tenant
            and record.spec.metadata.get(IDEMPOTENCY_METADATA_KEY) == digest
        ):
            return record
        return None

    earlier = made_by_key(spec.sandbox_id or digest)
    if earlier is not None or spec.sandbox_id is None or spec.sandbox_id == digest:
        return earlier
    if made_by_key(digest) is not None:
        raise InvalidParameter(
            f"sandbox_id: {spec.sandbox_id!r} differs from sandbox {digest}, which an earlier "
            f"start with the same idempotency key {key!r} made without naming an id",
            field="sandbox_id",
            value=spec.sandbox_id,
            attempted="start",
        )
    return None


def resume(core: EngineCore, live: LiveSandbox) -> None:
    """Start a recovered ``pending`` sandbox whose start was cut short before its unit was made
    (a cluster's leader that ended): from the queue, as if just accepted."""
    live.begin_start()
    _hand_to_task(core, live, reuse=False)


def _hand_to_task(
    core: EngineCore, live: LiveSandbox, reuse: bool, *, while_closing: bool = False
) -> None:
    """Run :func:`run_start` in a task of the engine's (:meth:`EngineCore.start_soon`), its
    cancel scope made now: a stop arriving before the task's first step finds the scope,
    cancels it and waits for the task (which then takes nothing), instead of stopping a record
    the task would then bring up."""
    live.start_scope = anyio.CancelScope()
    core.start_soon(
        run_start,
        core,
        live.record.sandbox_id,
        time.monotonic(),
        reuse,
        while_closing=while_closing,
    )


async def run_start(core: EngineCore, sandbox_id: str, t0: float, reuse: bool) -> None:
    """The task behind a start: a warm-pool claim or a queue slot and :func:`bring_up`, within
    the startup budget; on failure the sandbox is stopped with the reason. ``reuse``: a restart,
    on the sandbox's own unit."""
    live = core.live.get(sandbox_id)
    if live is None:
        return
    spec = live.record.spec
    budget = startup_timeout(core, spec)
    key = spec.experiment_id or spec.user_id or "default"
    error: RockError | None = None
    # The scope a stop cancels: made when the start was recorded (a crash restart, which runs
    # this in its own task, makes it here).
    scope = live.start_scope or anyio.CancelScope()
    live.start_scope = scope
    try:
        with scope:
            # Stopped before this task ran: leave now, before a claim or a queue slot is taken.
            await anyio.lowlevel.checkpoint_if_cancelled()
            try:
                claimed = False
                if not reuse and core.pools:  # no pool: no claim to bound
                    with anyio.fail_after(budget):
                        claimed = await claims.claim_warm(core, live)
                if not claimed:
                    # The startup budget starts when the start leaves the queue: a burst waits,
                    # it does not time out for want of a slot.
                    async with core.queue.slot(key, sandbox_id, spec.priority) as release:
                        # anyio.fail_after(budget) without its two generator context managers
                        # (7.9 -> 5.3 us a start, uvloop): the same scope, the same test after it.
                        timer = anyio.CancelScope(deadline=anyio.current_time() + budget)
                        with timer:
                            # The slot bounds the runtime's work (create, start); the rocklet's
                            # boot, in the unit's own CPU share, is waited for outside it.
                            await bring_up(core, live, reuse, on_started=release)
                        if timer.cancelled_caught and anyio.current_time() >= timer.deadline:
                            raise TimeoutError
            except TimeoutError:
                error = StartupTimeout(
                    f"Failed to start sandbox within {budget:g}s",
                    sandbox_id=sandbox_id,
                    attempted="start",
                )
                phase = _first_unfinished_phase(live)
                core.set_phase(
                    sandbox_id, phase, PhaseStatus.TIMEOUT, f"did not finish within {budget:g}s"
                )
            except RockError as exc:
                error = exc
            except Exception as exc:  # a runtime bug must not leave the sandbox pending forever
                log.exception("start of sandbox %s failed", sandbox_id)
                error = InternalServerRockError(
                    f"start failed: {exc!r}", sandbox_id=sandbox_id, attempted="start"
                )
    finally:  # also when the engine's close cancels the task: a stop waits for this
        live.start_scope = None
        live.start_done.set()
    if scope.cancelled_caught:
        live.settled.set()
        core.changes.note(sandbox_id)
        return
    if error is None:
        seconds = time.monotonic() - t0
        for observe in core.start_observers:
            observe(seconds)
        live.settled.set()
        core.changes.note(sandbox_id)
        return
    live.start_error = error
    with anyio.CancelScope(shield=True):
        async with live.lock:
            if live.record.state in LIVE_STATES:
                await stop_locked(core, live, f"start failed: {error.message}", unexpected=True)
    live.settled.set()
    core.changes.note(sandbox_id)


def _first_unfinished_phase(live: LiveSandbox) -> str:
    for name in (PHASE_IMAGE_PULL, PHASE_DOCKER_RUN):
        phase = live.record.phases.get(name)
        if phase is None or phase.status in (PhaseStatus.WAITING, PhaseStatus.RUNNING):
            return name
    return PHASE_DOCKER_RUN


async def wait_until_running(
    core: EngineCore, sandbox_id: str, timeout: float | None = None
) -> SandboxStatus:
    """:meth:`SandboxManager.wait_until_running <rock_core.engine.manager.SandboxManager.wait_until_running>`:
    wait for the current start of ``sandbox_id`` to finish; its running status, or why it is not running."""
    live = core.live.get(sandbox_id)
    if live is None:
        raise not_running_error(core.get_record(sandbox_id), "wait_until_running")
    with anyio.move_on_after(timeout) as scope:
        await live.settled.wait()
    if scope.cancelled_caught:
        raise StartupTimeout(
            f"Failed to start sandbox within {timeout:g}s", sandbox_id=sandbox_id, attempted="start"
        )
    record = core.get_record(sandbox_id)
    if record.state is State.RUNNING:
        return core.status_of(record)
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


async def wait_any(
    core: EngineCore,
    sandbox_ids: Sequence[str],
    timeout: float,
    *,
    watch: SettleWatch | None = None,
) -> list[str]:
    """:meth:`SandboxManager.wait_any <rock_core.engine.manager.SandboxManager.wait_any>`: the
    ids among ``sandbox_ids`` whose current start has settled (running, failed, stopped, or not
    held by this engine), as soon as there is one, or ``[]`` once ``timeout`` seconds passed.

    One wait serves many sandboxes: it wakes at each change of the engine and looks at the ids
    that changed, not at every id (:class:`~rock_core.engine.settle_waits.SettleWatch`).
    ``watch``: the ids are added to it, the wait is for any of its ids, and those answered leave
    it (a waiter's ids kept between its calls: each is sent once)."""
    if watch is None:
        watch = SettleWatch()
    watch.add(sandbox_ids)
    return await watch.wait(core.live, core.changes, timeout)


async def restart(core: EngineCore, sandbox_id: str, quota: Quota | None = None) -> SandboxRecord:
    """:meth:`SandboxManager.restart <rock_core.engine.manager.SandboxManager.restart>`: start a
    stopped sandbox again in its own unit (files kept, sessions gone), or restore an archived
    one from its archive (:mod:`rock_core.engine.archiving`); within its tenant's ``quota``."""
    live = core.live_or_load(sandbox_id)
    record = live.record if live is not None else core.get_record(sandbox_id)
    if live is not None and record.state is State.ARCHIVED:
        await archiving.restore(core, live, quota)
        return live.record
    runtime = core.runtime
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
        check_quota(core, live.record.spec, quota, attempted="restart")
        core.apply(
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
        _hand_to_task(core, live, reuse=True, while_closing=True)
    return live.record
