"""rock-core's SQLite record store against the record store conformance suite, in memory and in a
file, and its schema version."""

from __future__ import annotations

import asyncio
import gc
import json
import math
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import orjson
import pytest

from rock_core.converters import structure_store, unstructure_store
from rock_core.engine.record_documents import record_document
from rock_core.engine.store import SqliteRecordStore
from rock_core.errors import InvalidParameter
from rock_core.models import SandboxRecord
from rock_core.records import RecordStore
from rock_core.states import State
from rock_core.testing import RecordStoreConformance, sample_record


def _add_unknown_key(store: RecordStore, sandbox_id: str, path: Sequence[str], value: Any) -> None:
    assert isinstance(store, SqliteRecordStore)
    with store._lock, store._db:
        store._db.execute(
            "UPDATE sandbox SET record = json_set(record, ?, json(?)) WHERE sandbox_id = ?",
            ("$." + ".".join(path), json.dumps(value), sandbox_id),
        )


class TestSqliteInMemory(RecordStoreConformance):
    @pytest.fixture
    def store(self) -> Iterator[RecordStore]:
        store = SqliteRecordStore()
        store.open()
        yield store
        store.close()

    def reopen(self, store: RecordStore) -> RecordStore | None:
        return None

    def add_unknown_key(
        self, store: RecordStore, sandbox_id: str, path: Sequence[str], value: Any
    ) -> None:
        _add_unknown_key(store, sandbox_id, path, value)


class TestSqliteInAFile(RecordStoreConformance):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[RecordStore]:
        store = SqliteRecordStore(tmp_path / "rock.db")
        store.open()
        yield store
        store.close()

    def reopen(self, store: RecordStore) -> RecordStore | None:
        assert isinstance(store, SqliteRecordStore)
        second = SqliteRecordStore(store.path)
        second.open()
        return second

    def add_unknown_key(
        self, store: RecordStore, sandbox_id: str, path: Sequence[str], value: Any
    ) -> None:
        _add_unknown_key(store, sandbox_id, path, value)


def _user_version(path: Path) -> int:
    db = sqlite3.connect(path)
    try:
        return int(db.execute("PRAGMA user_version").fetchone()[0])
    finally:
        db.close()


def test_a_new_file_records_its_schema_version(tmp_path: Path) -> None:
    SqliteRecordStore(tmp_path / "rock.db").close()
    assert _user_version(tmp_path / "rock.db") == SqliteRecordStore.schema_version == 1


def test_a_file_of_a_rock_that_kept_no_version_is_read_and_marked(tmp_path: Path) -> None:
    path = tmp_path / "rock.db"
    store = SqliteRecordStore(path)
    record = sample_record()
    store.put(record)
    store.close()
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version = 0")  # as rock wrote it before the version was kept
    db.commit()
    db.close()
    again = SqliteRecordStore(path)
    assert again.get(record.sandbox_id) == record
    again.close()
    assert _user_version(path) == 1


def test_a_file_of_a_newer_schema_is_refused_naming_both_versions(tmp_path: Path) -> None:
    path = tmp_path / "rock.db"
    record = sample_record()
    store = SqliteRecordStore(path)
    store.put(record)
    store.close()
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version = 7")
    db.commit()
    db.close()
    with pytest.raises(InvalidParameter) as info:
        SqliteRecordStore(path)
    assert info.value.field == "store_path"
    message = str(info.value)
    assert message.startswith(f"store_path: the records at {path} have schema version 7")
    assert "knows versions up to 1" in message and "upgrade rock" in message
    assert _user_version(path) == 7  # left as it was


@pytest.mark.anyio
async def test_grouped_puts_are_committed_together_at_the_end_of_the_loops_turn(
    tmp_path: Path,
) -> None:
    store = SqliteRecordStore(tmp_path / "rock.db")
    store.group_commits = True  # as the admin sets it
    other = SqliteRecordStore(tmp_path / "rock.db")
    try:
        for n in range(3):
            store.put(sample_record(f"sb-{n}"))
        assert store.get("sb-2") is not None  # this store reads its own writes at once
        assert other.count() == 0  # not yet committed: the turn goes on
        await asyncio.sleep(0)  # the turn ends: one commit for the three
        assert other.count() == 3
        store.put(sample_record("sb-3"))
        store.commit()  # what the admin does before it answers
        assert other.get("sb-3") is not None
    finally:
        other.close()
        store.close()


@pytest.mark.anyio
async def test_a_record_saved_several_times_in_one_turn_is_written_once_as_last_saved(
    tmp_path: Path,
) -> None:
    store = SqliteRecordStore(tmp_path / "rock.db")
    store.group_commits = True
    other = SqliteRecordStore(tmp_path / "rock.db")
    try:
        record = sample_record("sb-1")
        written = store._db.total_changes
        for n in range(3):  # as a start's phases are saved one after the other
            store.put(attrs.evolve(record, notes=(f"phase {n}",)))
        store.put(sample_record("sb-2"))
        await asyncio.sleep(0)  # the turn ends
        assert store._db.total_changes - written == 2  # one row write per record
        got = other.get("sb-1")
        assert got is not None and got.notes == ("phase 2",)
        assert other.get("sb-2") is not None
    finally:
        other.close()
        store.close()


@pytest.mark.anyio
async def test_a_grouped_put_from_another_thread_is_not_undone_by_the_loops_earlier_one(
    tmp_path: Path,
) -> None:
    store = SqliteRecordStore(tmp_path / "rock.db")
    store.group_commits = True
    try:
        record = sample_record("sb-1")
        store.put(attrs.evolve(record, notes=("on the loop",)))  # pending until the turn's end
        await asyncio.to_thread(store.put, attrs.evolve(record, notes=("from a thread",)))
        await asyncio.sleep(0)
        store.commit()
        got = store.get("sb-1")
        assert got is not None and got.notes == ("from a thread",)
    finally:
        store.close()


def test_closing_commits_what_a_group_has_pending(tmp_path: Path) -> None:
    store = SqliteRecordStore(tmp_path / "rock.db")
    store.group_commits = True

    async def put_and_stop() -> None:
        store.put(sample_record("sb-1"))
        store.close()  # before the turn's end

    asyncio.run(put_and_stop())
    again = SqliteRecordStore(tmp_path / "rock.db")
    try:
        assert again.get("sb-1") is not None
    finally:
        again.close()


@pytest.mark.parametrize(
    "record",
    [
        sample_record("sb-running"),
        sample_record("sb-deleted", state=State.DELETED, owner=None),
        attrs.evolve(
            sample_record("sb-bare"),
            phases={},
            port_mapping={},
            host_name=None,
            security={},
            notes=(),
            rocklet_address=("198.51.100.2", 22555),
            paused_time=sample_record().create_time,
            auto_transition_state=State.DELETED,
        ),
    ],
    ids=["running", "deleted", "sparse"],
)
def test_a_stored_record_is_the_document_the_store_converter_writes(
    record: SandboxRecord,
) -> None:
    stopped = attrs.evolve(record, state=State.STOPPED, reason="saved again", restart_count=0)
    # the same spec, and fields of the last write taken again: each write reads back whole
    for version in (record, stopped, record, stopped, attrs.evolve(stopped, notes=("n",))):
        assert json.loads(record_document(version)) == unstructure_store(version)


def test_a_state_folder_written_by_the_previous_rock_loads(tmp_path: Path) -> None:
    # The previous rock wrote each row's document with json.dumps(unstructure_store(record)).
    path = tmp_path / "rock.db"
    records = [sample_record(f"sb-{n}", state=state) for n, state in enumerate(State)]
    db = sqlite3.connect(path)
    db.executescript(_OLD_SCHEMA)
    db.executemany(
        "INSERT INTO sandbox VALUES (?,?,?,?,?,?,?,?,?,?)",
        [
            (
                r.sandbox_id,
                r.state.value,
                r.owner,
                r.spec.user_id,
                r.spec.experiment_id,
                r.spec.namespace,
                r.spec.cluster,
                r.spec.image,
                r.create_time.isoformat(),
                json.dumps(unstructure_store(r), separators=(",", ":")),
            )
            for r in records
        ],
    )
    db.execute("PRAGMA user_version = 1")
    db.commit()
    db.close()
    store = SqliteRecordStore(path)
    try:
        assert store.list() == sorted(records, key=lambda r: r.sandbox_id)
        changed = attrs.evolve(records[0], reason="written by this rock")
        store.put(changed)
    finally:
        store.close()
    db = sqlite3.connect(path)
    [[text]] = db.execute("SELECT record FROM sandbox WHERE sandbox_id = 'sb-0'").fetchall()
    db.close()
    assert structure_store(json.loads(text), SandboxRecord) == changed


_OLD_SCHEMA = """
CREATE TABLE sandbox (
    sandbox_id    TEXT PRIMARY KEY,
    state         TEXT NOT NULL,
    owner         TEXT,
    user_id       TEXT,
    experiment_id TEXT,
    namespace     TEXT,
    cluster       TEXT,
    image         TEXT NOT NULL,
    create_time   TEXT NOT NULL,
    record        TEXT NOT NULL
);
CREATE INDEX sandbox_state ON sandbox (state);
CREATE INDEX sandbox_owner_state ON sandbox (owner, state);
"""


def test_the_text_kept_for_a_records_next_write_goes_with_its_spec() -> None:
    from rock_core.engine import record_documents

    record = sample_record()
    record_document(record)
    key = id(record.spec)
    assert record_documents._spec_jsons[key].ref() is record.spec
    del record
    gc.collect()
    assert key not in record_documents._spec_jsons  # nothing kept for a sandbox the engine let go


@pytest.mark.anyio
async def test_a_commit_before_an_answer_does_not_split_the_next_turns_into_a_commit_per_start(
    tmp_path: Path,
) -> None:
    store = SqliteRecordStore(tmp_path / "rock.db")
    store.group_commits = True
    commits: list[str] = []
    store._db.set_trace_callback(lambda sql: commits.append(sql) if sql == "COMMIT" else None)

    async def start(n: int) -> None:  # as the admin serves start_async, then the start goes on
        record = sample_record(f"sb-{n}", state=State.PENDING)
        store.put(record)
        store.commit()  # before the answer
        for phase in range(3):
            await asyncio.sleep(0)
            store.put(attrs.evolve(record, notes=(f"phase {phase}",)))

    try:
        await asyncio.gather(*(start(n) for n in range(20)))
        await asyncio.sleep(0)
        assert len(commits) <= 20 + 3 + 1  # one per answer, then about one per turn
    finally:
        store.close()


def test_a_document_that_differs_from_the_converters_form_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The store's documents are checked against the ``store`` converter's form when the module
    loads, on a record with every field set: one that differs (a field added to Phase, a type
    orjson writes otherwise, a changed hook) is refused, not written differently."""
    from rock_core.engine import record_documents

    record_documents._check()  # as loaded: the same
    monkeypatch.setattr(record_documents, "_phases", lambda phases: {name: {} for name in phases})
    with pytest.raises(TypeError, match="differs from the store converter's form"):
        record_documents._check()


def test_a_value_orjson_refuses_is_written_the_converters_way() -> None:
    record = attrs.evolve(
        sample_record("sb-big"),
        security={"huge": 1 << 70, "set_like": ("a", "b")},  # beyond orjson's 64 bits
    )
    assert json.loads(record_document(record)) == unstructure_store(record)


def test_every_field_of_a_record_is_set_in_the_check_at_import() -> None:
    from rock_core.engine import record_documents

    record = record_documents._every_field_set()
    assert all(getattr(record, f.name) is not None for f in attrs.fields(type(record)))


def test_the_logs_checkpoints_are_made_by_the_checkpointer_not_by_a_commit(
    tmp_path: Path,
) -> None:
    """A commit never copies the write-ahead log into the database file (that waits for the
    disk, on the engine's loop): the store's checkpointer thread does, on a connection of its
    own (rock_core.engine.wal_checkpoints)."""
    from rock_core.engine.wal_checkpoints import Checkpointer
    from rock_core.testing.waiting import eventually

    path = tmp_path / "rock.db"
    store = SqliteRecordStore(path)
    try:
        assert store._checkpoints is not None
        store._checkpoints.stop()  # this test makes the checkpoints itself
        before = path.stat().st_size
        big = "x" * 4000
        for n in range(1500):  # about 6 MB of pages: past SQLite's own threshold (1,000)
            store.put(attrs.evolve(sample_record(f"sb-{n}"), reason=big))
        assert path.stat().st_size == before  # everything is still in the log
        checkpoints = Checkpointer(path, interval=0.01)
        try:
            eventually(lambda: checkpoints.made >= 1)
        finally:
            checkpoints.stop()
        assert path.stat().st_size > before + 1_000_000  # copied into the database file
        assert len(store.list()) == 1500
    finally:
        store.close()


def test_one_index_serves_the_queries_by_state_and_owner(tmp_path: Path) -> None:
    """A put changes one index (state, owner), not two: the indexes an older rock made are
    dropped when the file is opened, and the engine's queries still search by index."""
    path = tmp_path / "rock.db"
    with sqlite3.connect(path) as db:
        db.executescript(_OLD_SCHEMA)
    store = SqliteRecordStore(path)
    try:
        indexes = store._db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
        ).fetchall()
        assert indexes == [("sandbox_state_owner",)]
        plan = store._db.execute(
            "EXPLAIN QUERY PLAN SELECT sandbox_id FROM sandbox WHERE state IN (?, ?) AND owner = ?",
            ("running", "stopped", "engine-a"),
        ).fetchall()
        assert "USING INDEX sandbox_state_owner" in plan[0][3]
    finally:
        store.close()


def test_a_document_orjson_refuses_to_read_is_read_the_standard_librarys_way() -> None:
    from rock_core.engine.record_documents import read_document

    record = attrs.evolve(sample_record("sb-nan"), security={"weight": float("nan")})
    older = json.dumps(unstructure_store(record))  # an older rock's writer: NaN, not JSON
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(older)
    read = read_document(older)
    assert math.isnan(read.security["weight"])
    assert attrs.evolve(read, security={}) == attrs.evolve(record, security={})


def test_the_json_kept_for_a_spec_holds_only_its_text() -> None:
    """The spec's JSON kept for a record's next document costs about its length: orjson's own
    bytes kept the capacity of its buffer, 16 KB a spec (260 MB at 16,000 sandboxes)."""
    import tracemalloc

    records = [sample_record(f"sb-{n}") for n in range(50)]
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for record in records:
            record_document(record)
        gc.collect()
        kept = (tracemalloc.get_traced_memory()[0] - before) / len(records)
    finally:
        tracemalloc.stop()
    spec_length = len(json.dumps(unstructure_store(records[0].spec), separators=(",", ":")))
    assert kept < spec_length + 1024, (kept, spec_length)
