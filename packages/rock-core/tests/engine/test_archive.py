"""Archive and restore in the engine, on a scripted in-memory runtime and the filesystem store.

Every end state of issue #10's engine rules is driven here: the phases, archive and restore
failures and timeouts, a delete or a stop in the middle, automatic archives, recovery after a
restart, and a restore by another process sharing the record store. The same flow runs on
Docker with S3 in rock-sdk's tests (``test_sdk_archive.py``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import attrs
import pytest

from rock_core.actions import SandboxStartRequest
from rock_core.engine.archiving import PART_LOGS, PART_ROOTFS
from rock_core.engine.config import EngineConfig
from rock_core.engine.manager import SandboxManager
from rock_core.engine.store import SqliteRecordStore
from rock_core.errors import BadRequestRockError, InvalidParameter, NotSupported, RockError
from rock_core.models import PhaseStatus
from rock_core.responses import status_response
from rock_core.states import Event, State
from rock_core.tenancy import scoped_name
from rock_core.testing import ScriptedRuntime, eventually_async

pytestmark = pytest.mark.anyio

HANG = 30  # fails a test whose awaited event never comes; nothing waits for it


@pytest.fixture
def archives(tmp_path: Path) -> Path:
    return tmp_path / "archives"


def _config(archives: Path | None, **fields: object) -> EngineConfig:
    store = (
        {"archive_store": "fs", "plugin_options": {"archive-fs": {"root": str(archives)}}}
        if archives
        else {}
    )
    return EngineConfig(**{"timer_interval": 3600, "reconcile_interval": 3600, **store, **fields})  # type: ignore[arg-type]


@contextlib.asynccontextmanager
async def _engine(
    runtime: ScriptedRuntime, archives: Path | None, owner: str = "test-owner", **fields: object
) -> AsyncIterator[SandboxManager]:
    async with SandboxManager(_config(archives, **fields), runtime=runtime, owner=owner) as engine:
        try:
            yield engine
        finally:
            runtime.open_gates()


KEPT = SandboxStartRequest(image="scripted:1", auto_delete_seconds=3600)


async def _stopped(engine: SandboxManager) -> str:
    status = await engine.start(KEPT)
    await engine.stop(status.sandbox_id)
    return status.sandbox_id


async def _settled(engine: SandboxManager, sandbox_id: str, *states: State) -> None:
    await eventually_async(
        lambda: engine.get_record(sandbox_id),
        until=lambda record: record.state in states,
        what=f"sandbox {sandbox_id} {' or '.join(state.value for state in states)}",
        timeout=HANG,
        interval=0.01,
    )


def _folder(archives: Path, sandbox_id: str, tenant: str = "test-owner") -> Path:
    """Where the fs store keeps the archive of ``sandbox_id``, a sandbox of ``tenant`` (its
    engine's owner): under a key of its tenant (rock_core.tenancy.archive_key)."""
    return archives / f"{scoped_name(tenant, '', length=16)}-{sandbox_id}"


def _parts(archives: Path, sandbox_id: str) -> list[str]:
    folder = _folder(archives, sandbox_id)
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


async def test_archive_then_restart_restores_the_sandbox(
    runtime: ScriptedRuntime, archives: Path
) -> None:
    async with _engine(runtime, archives) as engine:
        sandbox_id = await _stopped(engine)
        snapshot = runtime.hold("snapshot")
        await engine.archive(sandbox_id)  # returns at once
        await snapshot.arrivals(1)
        record = engine.get_record(sandbox_id)
        assert record.state is State.ARCHIVING
        assert record.phases["image_archive"].status is PhaseStatus.RUNNING
        snapshot.open()
        await _settled(engine, sandbox_id, State.ARCHIVED)
        record = engine.get_record(sandbox_id)
        assert record.phases["image_archive"].status is PhaseStatus.SUCCESS
        assert record.phases["log_archive"].status is PhaseStatus.SUCCESS
        assert record.archive_time is not None
        assert [
            u.sandbox_id for u in runtime.units.values()
        ] == []  # the unit went after both parts were stored
        assert _parts(archives, sandbox_id) == [PART_LOGS, PART_ROOTFS]
        status = await engine.get_status(sandbox_id, include_all_states=True)
        assert (
            status.state is State.ARCHIVED
            and status.phases["image_archive"].status is PhaseStatus.SUCCESS
        )

        await engine.restart(sandbox_id)
        assert engine.get_record(sandbox_id).state is State.PENDING
        status = await engine.wait_until_running(sandbox_id, timeout=HANG)
        assert status.state is State.RUNNING
        assert runtime.running() == [sandbox_id]
        assert _parts(archives, sandbox_id) == []  # the unit holds the sandbox again
        events = [c.event for c in engine.get_record(sandbox_id).state_history]
        assert events[-4:] == [Event.ARCHIVE, Event.ARCHIVE_DONE, Event.RESTORE, Event.ALIVE]


async def test_archive_is_refused_unless_stopped_with_its_unit(
    runtime: ScriptedRuntime, archives: Path
) -> None:
    async with _engine(runtime, archives) as engine:
        running = await engine.start(KEPT)
        with pytest.raises(BadRequestRockError, match="current state is running.*stop it first"):
            await engine.archive(running.sandbox_id)
        assert engine.get_record(running.sandbox_id).state is State.RUNNING
        removed = await engine.start(SandboxStartRequest(image="scripted:1"))
        await engine.stop(removed.sandbox_id)  # the default: removed at stop
        with pytest.raises(BadRequestRockError):
            await engine.archive(removed.sandbox_id)
        with pytest.raises(RockError, match="not found"):
            await engine.archive("no-such-sandbox")


async def test_archive_without_a_store_names_the_setting_and_the_plugin(
    runtime: ScriptedRuntime,
) -> None:
    async with _engine(runtime, None) as engine:
        sandbox_id = await _stopped(engine)
        with pytest.raises(
            NotSupported, match="no archive store is configured.*archive_store.*rock-archive-s3"
        ):
            await engine.archive(sandbox_id)
        assert engine.get_record(sandbox_id).state is State.STOPPED
        with pytest.raises(InvalidParameter, match="auto_archive_seconds.*no archive store"):
            await engine.start_async(
                SandboxStartRequest(image="scripted:1", auto_archive_seconds=5)
            )


async def test_a_failed_archive_leaves_the_sandbox_stopped_with_its_unit_and_no_objects(
    runtime: ScriptedRuntime, archives: Path
) -> None:
    async with _engine(runtime, archives) as engine:
        sandbox_id = await _stopped(engine)
        runtime.snapshot_failure = OSError("disk full")
        await engine.archive(sandbox_id)
        await _settled(engine, sandbox_id, State.STOPPED)
        record = engine.get_record(sandbox_id)
        assert "archive failed" in (record.reason or "") and "disk full" in (record.reason or "")
        assert record.phases["image_archive"].status is PhaseStatus.FAILED
        assert _parts(archives, sandbox_id) == []
        assert [u.sandbox_id for u in runtime.units.values()] == [sandbox_id]
        assert record.auto_transition_state is State.DELETED  # its keep-until deadline is as before

        runtime.snapshot_failure = None  # a retry succeeds
        await engine.archive(sandbox_id)
        await _settled(engine, sandbox_id, State.ARCHIVED)
        assert _parts(archives, sandbox_id) == [PART_LOGS, PART_ROOTFS]


async def test_an_archive_past_its_timeout_is_stopped_again(
    runtime: ScriptedRuntime, archives: Path
) -> None:
    async with _engine(runtime, archives, archive_timeout=0.2) as engine:
        sandbox_id = await _stopped(engine)
        runtime.hold("snapshot")  # never let through: the archive cannot finish
        await engine.archive(sandbox_id)
        await _settled(engine, sandbox_id, State.STOPPED)
        record = engine.get_record(sandbox_id)
        assert "archive_timeout" in (record.reason or "")
        assert record.phases["image_archive"].status is PhaseStatus.TIMEOUT
        assert _parts(archives, sandbox_id) == []
        assert [u.sandbox_id for u in runtime.units.values()] == [sandbox_id]


@pytest.mark.parametrize("damage", ["missing", "corrupt"])
async def test_a_restore_from_a_missing_or_corrupt_archive_leaves_it_archived(
    runtime: ScriptedRuntime, archives: Path, damage: str
) -> None:
    async with _engine(runtime, archives) as engine:
        sandbox_id = await _stopped(engine)
        await engine.archive(sandbox_id)
        await _settled(engine, sandbox_id, State.ARCHIVED)
        rootfs = _folder(archives, sandbox_id) / PART_ROOTFS
        if damage == "missing":
            rootfs.unlink()
        else:
            rootfs.write_bytes(rootfs.read_bytes()[:100_000])
        await engine.restart(sandbox_id)
        with pytest.raises(RockError, match="image_pull") as caught:
            await engine.wait_until_running(sandbox_id, timeout=HANG)
        record = engine.get_record(sandbox_id)
        assert record.state is State.ARCHIVED
        assert (record.reason or "").startswith("restore failed")
        assert ("missing" if damage == "missing" else "corrupt") in caught.value.message
        assert runtime.units == {}  # nothing half made is left
        assert record.state_history[-1].event is Event.RESTORE_FAILED


async def test_a_restore_past_its_timeout_and_a_stop_while_restoring_leave_it_archived(
    runtime: ScriptedRuntime, archives: Path
) -> None:
    async with _engine(runtime, archives, restore_timeout=0.2) as engine:
        sandbox_id = await _stopped(engine)
        await engine.archive(sandbox_id)
        await _settled(engine, sandbox_id, State.ARCHIVED)
        restore = runtime.hold("restore")
        await engine.restart(sandbox_id)
        with pytest.raises(RockError, match="restore did not finish within 0.2s"):
            await engine.wait_until_running(sandbox_id, timeout=HANG)
        assert engine.get_record(sandbox_id).state is State.ARCHIVED

    async with _engine(runtime, archives) as engine:
        sandbox_id = await _stopped(engine)
        await engine.archive(sandbox_id)
        await _settled(engine, sandbox_id, State.ARCHIVED)
        restore = runtime.hold("restore")
        await engine.restart(sandbox_id)
        await restore.arrivals(1)
        await engine.stop(sandbox_id)
        record = engine.get_record(sandbox_id)
        assert record.state is State.ARCHIVED, record
        assert _parts(archives, sandbox_id) == [PART_LOGS, PART_ROOTFS]


async def test_delete_while_archiving_cancels_the_archive_then_deletes(
    runtime: ScriptedRuntime, archives: Path
) -> None:
    async with _engine(runtime, archives) as engine:
        sandbox_id = await _stopped(engine)
        snapshot = runtime.hold("snapshot")
        await engine.archive(sandbox_id)
        await snapshot.arrivals(1)
        await engine.delete(sandbox_id)
        assert engine.get_record(sandbox_id).state is State.DELETED
        assert _parts(archives, sandbox_id) == []
        assert runtime.units == {}


async def test_delete_of_an_archived_sandbox_deletes_its_archive(
    runtime: ScriptedRuntime, archives: Path
) -> None:
    async with _engine(runtime, archives) as engine:
        sandbox_id = await _stopped(engine)
        await engine.archive(sandbox_id)
        await _settled(engine, sandbox_id, State.ARCHIVED)
        with pytest.raises(BadRequestRockError, match="it is archived already"):
            await engine.archive(sandbox_id)
        await engine.delete(sandbox_id)
        assert engine.get_record(sandbox_id).state is State.DELETED
        assert not _folder(archives, sandbox_id).exists()


async def test_auto_archive_seconds_archives_at_its_time(
    runtime: ScriptedRuntime, archives: Path
) -> None:
    async with _engine(runtime, archives) as engine:
        status = await engine.start(SandboxStartRequest(image="scripted:1", auto_archive_seconds=0))
        await engine.stop(status.sandbox_id)
        record = engine.get_record(status.sandbox_id)
        assert record.state is State.STOPPED and record.auto_transition_state is State.ARCHIVED
        assert [u.sandbox_id for u in runtime.units.values()] == [
            status.sandbox_id
        ]  # kept for the archive
        shown = status_response(await engine.get_status(status.sandbox_id, include_all_states=True))
        assert shown.auto_archive_time is not None  # ROCK's field, from the record's deadline
        await engine.run_timers()
        await _settled(engine, status.sandbox_id, State.ARCHIVED)


async def test_recovery_resolves_an_interrupted_archive_with_the_store(
    runtime: ScriptedRuntime, archives: Path, tmp_path: Path
) -> None:
    store_path = tmp_path / "records.db"
    fields = {"store_path": str(store_path), "remove_on_close": False, "reap_orphans": False}
    async with _engine(runtime, archives, **fields) as engine:
        whole = await _stopped(engine)
        await engine.archive(whole)
        await _settled(engine, whole, State.ARCHIVED)
        cut = await _stopped(engine)
    # Rewind both to the middle of an archive, as a kill -9 would have left them: ``whole``
    # with both parts stored and its unit still there, ``cut`` with one part half written.
    records = SqliteRecordStore(store_path)
    for sandbox_id in (whole, cut):
        record = records.get(sandbox_id)
        assert record is not None
        records.put(attrs.evolve(record, state=State.ARCHIVING))
    records.close()
    runtime.units["unit-left"] = type(next(iter(runtime.units.values())))(
        whole, {"rock.owner": "test-owner", "rock.sandbox_id": whole}
    )
    _folder(archives, cut).mkdir(parents=True)
    (_folder(archives, cut) / PART_ROOTFS).write_bytes(b"half")

    async with _engine(runtime, archives, **fields) as engine:
        assert engine.get_record(whole).state is State.ARCHIVED
        assert "unit-left" not in runtime.units
        record = engine.get_record(cut)
        assert record.state is State.STOPPED and "interrupted" in (record.reason or "")
        assert _parts(archives, cut) == []
        await engine.archive(cut)  # its unit is still there: a retry works
        await _settled(engine, cut, State.ARCHIVED)


async def test_another_process_sharing_the_record_store_restores_an_archived_sandbox(
    runtime: ScriptedRuntime, archives: Path, tmp_path: Path
) -> None:
    store_path = str(tmp_path / "records.db")
    async with _engine(runtime, archives, store_path=store_path, owner="first") as engine:
        sandbox_id = await _stopped(engine)
        await engine.archive(sandbox_id)
        await _settled(engine, sandbox_id, State.ARCHIVED)
    # Closing removed the first process's units but kept the archived sandbox: no unit, a record on disk.
    assert runtime.units == {}
    async with _engine(runtime, archives, store_path=store_path, owner="second") as engine:
        await engine.restart(sandbox_id)
        status = await engine.wait_until_running(sandbox_id, timeout=HANG)
        assert status.state is State.RUNNING
        assert engine.get_record(sandbox_id).owner == "second"
