"""Archiving and restoring: a stopped sandbox's unit stored away, then brought back by ``restart``.

:func:`archive` (a stopped sandbox with its unit) fires ``archive`` at once and hands the work to
a task, :func:`run_archive`: the runtime's snapshot of the unit (part ``rootfs``, phase
``image_archive``) and its output (part ``logs``, phase ``log_archive``) stream into the
engine's :class:`~rock_core.archive.ArchiveStore` side by side, under ``archive_timeout``. Only
once both parts are stored is the unit removed and ``archive_done`` fired (``archived``). A
failure, a timeout or a cancellation deletes what was written and fires ``archive_failed``:
``stopped`` again with the reason, its unit as it was.

:func:`restore` (``restart`` of an ``archived`` sandbox) fires ``restore`` (``pending``) and
runs :func:`run_restore` under ``restore_timeout``: the runtime builds a new unit from the
``rootfs`` part (:meth:`~rock_core.runtime.Runtime.restore`), starts it and waits for its rocklet
like any start. Once the sandbox runs, its archive is deleted: the unit holds the sandbox again.
A failure, a timeout, or a stop while restoring removes the new unit and fires
``restore_failed``: ``archived`` again with the reason, its archive untouched. Nothing moves a
restoring sandbox to ``stopped``.

A ``delete`` of an archived sandbox deletes its archive; a ``delete`` while archiving cancels the
archive first (its partial objects are deleted), then deletes the sandbox and its unit.
Archived sandboxes have no unit: no owner's death reaps them, and a process other than the one
that archived them may restore them when it shares the engine's record store (``store_path``).
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import anyio
import attrs

from rock_core.engine.admission import check_quota, with_defaults
from rock_core.engine.bringup import bring_up
from rock_core.engine.core import EngineCore
from rock_core.engine.lazy_event import LazyEvent
from rock_core.engine.live import LiveSandbox, new_rocklet_token, now
from rock_core.engine.removals import remove_quietly
from rock_core.errors import (
    BadRequestRockError,
    InternalServerRockError,
    NotSupported,
    RockError,
    SandboxNotFound,
)
from rock_core.models import (
    PHASE_DOCKER_RUN,
    PHASE_IMAGE_ARCHIVE,
    PHASE_IMAGE_PULL,
    PHASE_LOG_ARCHIVE,
    Phase,
    PhaseStatus,
    SandboxRecord,
)
from rock_core.states import Event, State
from rock_core.tenancy import Quota, archive_key

if TYPE_CHECKING:
    from rock_core.archive import ArchiveStore

__all__ = [
    "PART_LOGS",
    "PART_ROOTFS",
    "archive",
    "archive_due",
    "cancel_archive",
    "delete_archive",
    "recover_archiving",
    "recover_restoring",
    "restore",
    "is_restoring",
]

log = logging.getLogger("rock.engine")

#: The archive part that holds the runtime's snapshot of the unit's filesystem.
PART_ROOTFS = "rootfs"
#: The archive part that holds the unit's output.
PART_LOGS = "logs"
# Seconds the clean-up of a failed archive (deleting its objects) may take.
_CLEANUP_TIMEOUT = 60.0


def _store(core: EngineCore, sandbox_id: str, attempted: str) -> ArchiveStore:
    """The engine's archive store, and a runtime that can snapshot; else why archiving is off."""
    runtime = core.runtime
    if core.archive_store is None:
        raise NotSupported(
            f"Sandbox {sandbox_id} cannot be {attempted}d: no archive store is configured "
            "(set the engine's archive_store, e.g. 's3' with pip install rock-archive-s3, "
            "or 'fs' for a local folder)",
            sandbox_id=sandbox_id,
            attempted=attempted,
        )
    if not runtime.can_snapshot:
        raise NotSupported(
            f"Sandbox {sandbox_id} cannot be {attempted}d: "
            + runtime.capabilities.missing("snapshot", runtime.name),
            sandbox_id=sandbox_id,
            attempted=attempted,
        )
    return core.archive_store


def is_restoring(live: LiveSandbox) -> bool:
    """Whether the sandbox's current start is a restore from its archive."""
    history = live.record.state_history
    return (
        live.record.state is State.PENDING and bool(history) and history[-1].event is Event.RESTORE
    )


# -- archive ----------------------------------------------------------------------------------


async def archive(core: EngineCore, sandbox_id: str) -> None:
    """:meth:`SandboxManager.archive <rock_core.engine.manager.SandboxManager.archive>`: start
    archiving a stopped sandbox; return at once."""
    live = core.live_or_load(sandbox_id)
    record = (
        live.record if live is not None else core.get_record(sandbox_id)
    )  # unknown: SandboxNotFound
    if live is None and record.state is State.STOPPED:
        raise BadRequestRockError(
            f"Sandbox {sandbox_id} cannot be archived here: it is stopped in the care of another rock process "
            f"({record.owner}), which holds its container",
            sandbox_id=sandbox_id,
            attempted="archive",
        )
    if live is None or record.state is not State.STOPPED:
        hint = {
            State.PENDING: "stop it first",
            State.RUNNING: "stop it first",
            State.ARCHIVING: "it is being archived already",
            State.ARCHIVED: "it is archived already",
            State.DELETED: "it is deleted",
        }.get(record.state, "")
        raise BadRequestRockError(
            f"Sandbox {sandbox_id} cannot be archived: current state is {record.state.value}; "
            f"only a stopped sandbox can be archived ({hint})",
            sandbox_id=sandbox_id,
            attempted="archive",
        )
    store = _store(core, sandbox_id, "archive")
    async with live.lock:
        if live.record.state is not State.STOPPED:
            raise BadRequestRockError(
                f"Sandbox {sandbox_id} cannot be archived: current state is {live.record.state.value}",
                sandbox_id=sandbox_id,
                attempted="archive",
            )
        if live.handle is None or live.removing:
            raise BadRequestRockError(
                f"Sandbox {sandbox_id} cannot be archived: its container is removed already "
                "(a sandbox is kept after its stop only with auto_delete_seconds > 0 or auto_archive_seconds)",
                sandbox_id=sandbox_id,
                attempted="archive",
            )
        phases = dict(live.record.phases)
        at = now()
        for name in (PHASE_IMAGE_ARCHIVE, PHASE_LOG_ARCHIVE):
            phases[name] = Phase(status=PhaseStatus.RUNNING, message="", started_at=at)
        before = (live.record.auto_transition_state, live.record.auto_transition_time)
        core.apply(
            live.record,
            Event.ARCHIVE,
            phases=phases,
            reason=None,
            auto_transition_state=None,
            auto_transition_time=None,
        )
        live.archive_done = LazyEvent()
    core.task_group().start_soon(run_archive, core, live, store, before)


async def run_archive(
    core: EngineCore, live: LiveSandbox, store: ArchiveStore, before: tuple[Any, Any]
) -> None:
    """The task behind :func:`archive`: both parts stored, then the unit removed and ``archive_done``;
    else the objects deleted and ``archive_failed`` with the reason."""
    sandbox_id = live.record.sandbox_id
    handle = live.handle
    assert handle is not None
    timeout = core.config.archive_timeout
    runtime = core.runtime
    failure: str | None = None
    t0 = time.monotonic()

    async def put(part: str, phase: str, open_stream: Any) -> None:
        try:
            stream = await open_stream(handle)
            await store.put(archive_key(live.record), part, stream)
        except RockError as exc:
            core.set_phase(sandbox_id, phase, PhaseStatus.FAILED, exc.message)
            raise
        except Exception as exc:
            core.set_phase(sandbox_id, phase, PhaseStatus.FAILED, repr(exc))
            raise
        core.set_phase(sandbox_id, phase, PhaseStatus.SUCCESS, f"{part} archived")

    with anyio.CancelScope() as scope:
        live.archive_scope = scope
        try:
            with anyio.fail_after(timeout):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(put, PART_ROOTFS, PHASE_IMAGE_ARCHIVE, runtime.snapshot)
                    tg.start_soon(put, PART_LOGS, PHASE_LOG_ARCHIVE, runtime.snapshot_logs)
        except TimeoutError:
            failure = f"archive did not finish within {timeout:g}s (archive_timeout)"
            for name in (PHASE_IMAGE_ARCHIVE, PHASE_LOG_ARCHIVE):
                if live.record.phases[name].status is PhaseStatus.RUNNING:
                    core.set_phase(
                        sandbox_id, name, PhaseStatus.TIMEOUT, f"did not finish within {timeout:g}s"
                    )
        except Exception as exc:  # a group may wrap both parts' errors: report the first
            first = _first_error(exc)
            failure = (
                first.message if isinstance(first, RockError) else f"unexpected error: {first!r}"
            )
            if not isinstance(first, RockError):
                log.error("archive of sandbox %s failed", sandbox_id, exc_info=first)
    live.archive_scope = None
    if scope.cancelled_caught:
        failure = failure or "archive cancelled"
    with anyio.CancelScope(shield=True):
        try:
            if failure is None:
                await _archived(core, live)
                log.info("sandbox %s archived in %.1fs", sandbox_id, time.monotonic() - t0)
            else:
                await _archive_failed(core, live, store, failure, before)
        finally:
            live.archive_done.set()


def _first_error(exc: BaseException) -> BaseException:
    while getattr(exc, "exceptions", None):  # an exception group
        exc = exc.exceptions[0]  # type: ignore[attr-defined]
    return exc


async def _archived(core: EngineCore, live: LiveSandbox) -> None:
    handle, live.handle = live.handle, None
    if handle is not None:
        # Both parts are stored: the unit can go. A removal that fails leaves a stopped unit the
        # owner's reaper removes later; the archive is whole either way.
        await remove_quietly(core.runtime, handle)
    async with live.lock:
        if live.record.state is State.ARCHIVING:
            core.apply(
                live.record,
                Event.ARCHIVE_DONE,
                archive_time=now(),
                reason=None,
                auto_transition_state=None,
                auto_transition_time=None,
                port_mapping={},
                unit_id=None,
            )


async def _archive_failed(
    core: EngineCore,
    live: LiveSandbox,
    store: ArchiveStore,
    reason: str,
    before: tuple[Any, Any],
) -> None:
    log.warning("archive of sandbox %s failed: %s", live.record.sandbox_id, reason)
    with anyio.move_on_after(_CLEANUP_TIMEOUT):
        try:
            await store.delete(archive_key(live.record))
        except RockError as exc:
            reason += f" (its partial archive could not be deleted: {exc.message})"
    target, when = before
    if target is State.ARCHIVED:
        # A failed auto-archive is not retried: the sandbox is kept stopped for the longest
        # time a stopped sandbox may be kept, then deleted.
        cap = core.config.max_auto_delete_seconds
        target, when = (
            (State.DELETED, now() + timedelta(seconds=cap)) if cap is not None else (None, None)
        )
    async with live.lock:
        if live.record.state is State.ARCHIVING:
            core.apply(
                live.record,
                Event.ARCHIVE_FAILED,
                reason=f"archive failed: {reason}",
                auto_transition_state=target,
                auto_transition_time=when,
            )


async def cancel_archive(live: LiveSandbox) -> None:
    """Cancel an archive under way and wait until it has cleaned up (``stopped`` again)."""
    scope = live.archive_scope
    if scope is not None:
        scope.cancel()
    if live.record.state is State.ARCHIVING:
        with anyio.CancelScope(shield=True):
            await live.archive_done.wait()


async def delete_archive(core: EngineCore, record: SandboxRecord) -> None:
    """Delete the sandbox's archive (kept under its tenant's :func:`~rock_core.tenancy.archive_key`) from the store.

    :raises NotSupported: no store is configured (the archive cannot be reached).
    :raises InternalServerRockError: the store failed (the archive may still be there).
    """
    sandbox_id = record.sandbox_id
    if core.archive_store is None:
        raise NotSupported(
            f"Sandbox {sandbox_id} is archived but no archive store is configured to delete its archive from "
            "(set the engine's archive_store as when it was archived)",
            sandbox_id=sandbox_id,
            attempted="delete",
        )
    await core.archive_store.delete(archive_key(record))


def archive_due(core: EngineCore, live: LiveSandbox, at: Any) -> bool:
    """Whether ``live`` is stopped, kept for an automatic archive, and its time has come."""
    record = live.record
    return (
        record.state is State.STOPPED
        and not live.removing
        and live.handle is not None
        and record.auto_transition_state is State.ARCHIVED
        and record.auto_transition_time is not None
        and record.auto_transition_time <= at
    )


# -- restore ----------------------------------------------------------------------------------


async def restore(core: EngineCore, live: LiveSandbox, quota: Quota | None = None) -> None:
    """Fire ``restore`` on an archived sandbox and start :func:`run_restore` (``restart``),
    within its tenant's ``quota``."""
    sandbox_id = live.record.sandbox_id
    store = _store(core, sandbox_id, "restore")
    async with live.lock:
        if live.record.state is not State.ARCHIVED:
            raise BadRequestRockError(
                f"Sandbox {sandbox_id} cannot be restored: current state is {live.record.state.value}",
                sandbox_id=sandbox_id,
                attempted="restart",
            )
        check_quota(core, live.record.spec, quota, attempted="restart")
        core.apply(
            live.record,
            Event.RESTORE,
            start_time=None,
            stop_time=None,
            reason=None,
            owner=core.owner,
            auto_transition_state=None,
            auto_transition_time=None,
            phases={
                PHASE_IMAGE_PULL: Phase(
                    status=PhaseStatus.WAITING, message="restore from the archive"
                ),
                PHASE_DOCKER_RUN: Phase(status=PhaseStatus.WAITING),
            },
        )
        live.begin_start()
    core.task_group().start_soon(run_restore, core, live, store, core.config.restore_timeout)


async def run_restore(
    core: EngineCore, live: LiveSandbox, store: ArchiveStore, budget: float
) -> None:
    """The task behind :func:`restore`: a unit built from the archive, started, its rocklet
    answering (``running``, the archive deleted); else ``restore_failed``."""
    sandbox_id = live.record.sandbox_id
    error: RockError | None = None
    t0 = time.monotonic()
    with anyio.CancelScope() as scope:
        live.start_scope = scope
        try:
            with anyio.fail_after(budget):
                core.set_phase(
                    sandbox_id,
                    PHASE_IMAGE_PULL,
                    PhaseStatus.RUNNING,
                    "restoring the sandbox's files from its archive",
                )
                try:
                    snapshot = await store.get(archive_key(live.record), PART_ROOTFS)
                    live.handle = await core.runtime.restore(
                        with_defaults(core, live.record.spec),
                        snapshot,
                        labels=core.labels(sandbox_id),
                        rocklet_token=_token(core, live),
                    )
                except RockError as exc:
                    core.set_phase(
                        sandbox_id, PHASE_IMAGE_PULL, PhaseStatus.FAILED, _restore_message(exc)
                    )
                    raise
                core.save(attrs.evolve(live.record, unit_id=live.handle.unit_id))
                core.set_phase(
                    sandbox_id,
                    PHASE_IMAGE_PULL,
                    PhaseStatus.SUCCESS,
                    "files restored from the archive",
                )
                await bring_up(core, live, reuse=True)
        except TimeoutError:
            error = InternalServerRockError(
                f"restore did not finish within {budget:g}s (restore_timeout)",
                sandbox_id=sandbox_id,
                attempted="restart",
            )
            for name in (PHASE_IMAGE_PULL, PHASE_DOCKER_RUN):
                if live.record.phases[name].status in (PhaseStatus.WAITING, PhaseStatus.RUNNING):
                    core.set_phase(
                        sandbox_id,
                        name,
                        PhaseStatus.TIMEOUT,
                        f"restore did not finish within {budget:g}s",
                    )
                    break
        except RockError as exc:
            # Whatever the store or runtime said (a missing part is its SandboxNotFound), the
            # restart failed on the server's side, not for a bad request.
            error = (
                exc
                if isinstance(exc, InternalServerRockError)
                else InternalServerRockError(
                    _restore_message(exc), sandbox_id=sandbox_id, attempted="restart"
                )
            )
        except Exception as exc:  # a runtime or store bug must not leave the sandbox pending
            log.exception("restore of sandbox %s failed", sandbox_id)
            error = InternalServerRockError(
                f"restore failed: {exc!r}", sandbox_id=sandbox_id, attempted="restart"
            )
    live.start_scope = None
    if scope.cancelled_caught and error is None:
        error = InternalServerRockError(
            "restore cancelled", sandbox_id=sandbox_id, attempted="restart"
        )
    with anyio.CancelScope(shield=True):
        try:
            if error is None and live.record.state is State.RUNNING:
                log.info("sandbox %s restored in %.1fs", sandbox_id, time.monotonic() - t0)
                await _consume_archive(core, store, live)
            elif error is not None:
                live.start_error = error
                await _restore_failed(core, live, error.message)
        finally:
            live.start_done.set()
            live.settled.set()


def _token(core: EngineCore, live: LiveSandbox) -> str:
    if live.record.rocklet_token is None:
        core.save(attrs.evolve(live.record, rocklet_token=new_rocklet_token()))
    assert live.record.rocklet_token is not None
    return live.record.rocklet_token


def _restore_message(exc: RockError) -> str:
    if isinstance(exc, SandboxNotFound):
        return f"its archive is missing from the store: {exc.message}"
    return exc.message


async def _consume_archive(core: EngineCore, store: ArchiveStore, live: LiveSandbox) -> None:
    """The sandbox runs in its unit again: its archive is no longer needed."""
    try:
        await store.delete(archive_key(live.record))
    except RockError as exc:
        log.warning(
            "sandbox %s restored, but its archive could not be deleted: %s",
            live.record.sandbox_id,
            exc,
        )
    core.save(attrs.evolve(live.record, archive_time=None))


async def _restore_failed(core: EngineCore, live: LiveSandbox, reason: str) -> None:
    log.warning("restore of sandbox %s failed: %s", live.record.sandbox_id, reason)
    core.forwards.close(live.record.sandbox_id)
    client, live.client = live.client, None
    if client is not None:
        await client.forget()
    handle, live.handle = live.handle, None
    if handle is not None:
        await remove_quietly(core.runtime, handle)
    async with live.lock:
        if live.record.state is State.PENDING:
            core.apply(
                live.record,
                Event.RESTORE_FAILED,
                reason=f"restore failed: {reason}",
                port_mapping={},
            )


# -- recovery ---------------------------------------------------------------------------------


async def recover_archiving(core: EngineCore, live: LiveSandbox) -> None:
    """Resolve an archive a restart of the process cut short: done when both parts are stored
    (then the unit goes), else failed (its objects deleted, ``stopped`` with its unit)."""
    store = core.archive_store
    sandbox_id = live.record.sandbox_id
    whole = False
    if store is not None:
        try:
            whole = all(
                [
                    await store.exists(archive_key(live.record), part)
                    for part in (PART_ROOTFS, PART_LOGS)
                ]
            )
        except RockError as exc:
            log.warning("could not look for the archive of sandbox %s: %s", sandbox_id, exc)
    live.archive_done = LazyEvent()
    if whole:
        await _archived(core, live)
    elif store is not None:
        await _archive_failed(
            core,
            live,
            store,
            "archive interrupted: rock was restarted while it ran",
            (None, None),
        )
    else:
        async with live.lock:
            core.apply(
                live.record,
                Event.ARCHIVE_FAILED,
                reason="archive interrupted: rock was restarted while it ran, "
                "and no archive store is configured now",
            )
    live.archive_done.set()
    if live.record.state is State.STOPPED and live.handle is None:
        reason = (live.record.reason or "") + "; its container is gone"
        core.save(attrs.evolve(live.record, reason=reason))


async def recover_restoring(core: EngineCore, live: LiveSandbox, reason: str) -> None:
    """A restore a restart of the process cut short, whose unit cannot be adopted: ``archived`` again."""
    live.start_done.set()
    await _restore_failed(core, live, f"{reason} (rock was restarted while it restored)")
    live.settled.set()
