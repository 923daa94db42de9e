"""The SQLite store's writer thread (``background_writes``, which the admin sets on its file):
a loop's puts are written beside the loop and ``committed()`` returns once they are durable, as
a second connection (another process's, after a SIGKILL) would read them; a record put again
while its older put waits to be written is not lost; a failed write fails its waiters and keeps
the puts for the next; reads never wait for a write; ``close`` writes what is pending."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from rock_core import record_grouping
from rock_core.engine.store import SqliteRecordStore
from rock_core.models import SandboxRecord
from rock_core.states import State
from rock_core.testing import sample_record

HANG = 3  # a guard against a hang: it fails the test; nothing waits for it


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "rock.db"


@pytest.fixture
def store(path: Path) -> Iterator[SqliteRecordStore]:
    store = SqliteRecordStore(path)
    store.open()
    store.group_commits = True
    store.background_writes = True
    yield store
    store.close()


def _stored(path: Path, sandbox_id: str) -> SandboxRecord | None:
    """The record as a second store (another connection, as after a restart) reads it."""
    other = SqliteRecordStore(path)
    try:
        return other.get(sandbox_id)
    finally:
        other.close()


def test_committed_returns_once_the_loops_puts_are_durable(
    store: SqliteRecordStore, path: Path
) -> None:
    records = [sample_record(state=State.PENDING) for _ in range(200)]

    async def turns() -> None:
        for record in records:
            store.put(record)
            store.put(attrs.evolve(record, state=State.RUNNING))
        assert store.get(records[0].sandbox_id) == attrs.evolve(records[0], state=State.RUNNING)
        await asyncio.wait_for(store.committed(), HANG)

    asyncio.run(turns())
    for record in records:
        assert _stored(path, record.sandbox_id) == attrs.evolve(record, state=State.RUNNING)


def test_a_record_put_again_while_its_group_waits_is_not_lost(
    store: SqliteRecordStore, path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A waiter told of an older put must find the record durable even when the record was put
    again before the writer took that older put's group (the writer writes the newer one).
    Checked in the writer thread, at the moment it tells its waiters."""
    record = sample_record(state=State.PENDING)
    newer = attrs.evolve(record, state=State.RUNNING)
    puts = store._puts
    told: list[SandboxRecord | None] = []  # what was durable each time waiters were told

    def answer(waiters: list[Any], error: Exception | None) -> None:
        if waiters and error is None:
            told.append(_stored(path, record.sandbox_id))
        real_answer(waiters, error)

    real_answer = record_grouping._answer
    monkeypatch.setattr(record_grouping, "_answer", answer)

    async def turns() -> None:
        with puts._writing:  # the writer cannot start a group yet
            store.put(record)
            waiter = asyncio.ensure_future(store.committed())  # hands the group over
            await asyncio.sleep(0)
            store.put(newer)  # the older put is no longer the record's pending one
        await asyncio.wait_for(waiter, HANG)
        await asyncio.wait_for(store.committed(), HANG)

    asyncio.run(turns())
    assert told and told[0] is not None  # the first waiter was told of a durable record
    assert _stored(path, record.sandbox_id) == newer


def test_a_failed_write_fails_its_waiters_and_keeps_the_puts(
    store: SqliteRecordStore, path: Path
) -> None:
    record = sample_record()

    async def turns() -> None:
        with store._lock:
            store._db.execute("PRAGMA query_only=1")  # every write fails now
        store.put(record)
        with pytest.raises(sqlite3.OperationalError):
            await asyncio.wait_for(store.committed(), HANG)
        assert store.get(record.sandbox_id) == record  # still pending, read at once
        assert _stored(path, record.sandbox_id) is None
        with store._lock:
            store._db.execute("PRAGMA query_only=0")
        await asyncio.wait_for(store.committed(), HANG)  # written by the next group

    asyncio.run(turns())
    assert _stored(path, record.sandbox_id) == record


def test_a_read_does_not_wait_for_a_write(store: SqliteRecordStore) -> None:
    written = sample_record()
    store.put(written)  # off a loop: written at once
    found: list[SandboxRecord | None] = []
    with store._lock:  # the writer's connection is busy for as long as this holds
        reader = threading.Thread(target=lambda: found.append(store.get(written.sandbox_id)))
        reader.start()
        reader.join(HANG)
        assert found == [written]


def test_close_writes_what_is_pending(store: SqliteRecordStore, path: Path) -> None:
    records = [sample_record() for _ in range(50)]

    async def turn() -> None:
        for record in records:
            store.put(record)  # the turn's end hands them over; nobody waits

    asyncio.run(turn())
    store.close()
    for record in records:
        assert _stored(path, record.sandbox_id) == record


def test_background_writes_are_refused_in_memory_and_set_once(store: SqliteRecordStore) -> None:
    memory = SqliteRecordStore()
    try:
        assert not memory.can_write_in_background
        with pytest.raises(ValueError, match="background_writes"):
            memory.background_writes = True
    finally:
        memory.close()
    with pytest.raises(ValueError, match="background_writes"):
        store.background_writes = False
    store.background_writes = True  # already: nothing changes
    assert store.background_writes
