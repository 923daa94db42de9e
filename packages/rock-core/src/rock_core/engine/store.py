"""rock-core's own record store (:class:`~rock_core.records.RecordStore`): SQLite, in memory or
in a file (WAL), the engine's default (``store_path``; ``store`` unset).

Every change to a record is written through at once, so a process killed with SIGKILL loses
nothing it had acknowledged. An admin may group commits instead (:attr:`group_commits`, kept by
:class:`rock_core.record_grouping.GroupedPuts`): a put made on an event loop is written and
committed with the others of the loop's turn, at its end (a record put several times in the turn
written once, as last put), and the admin commits (:meth:`commit`) before it answers any
request, so nothing acknowledged is lost still; a commit costs more than the write itself (50 to
100 us). A start puts its record four times: ``pending`` and ``running`` are written, the two
steps between are puts of progress (:meth:`put_progress`), kept in memory until the next write.
A read sees every put (a listing commits what is pending first). A file's log is checkpointed by
a thread of its own, never inside a commit (:mod:`rock_core.engine.wal_checkpoints`). Rows are never deleted by the lifecycle: a
deleted sandbox keeps its row (state ``deleted``) for its history, as ROCK does;
:meth:`SqliteRecordStore.purge_deleted` drops old ones.

The file records its schema version in SQLite's ``PRAGMA user_version`` (a file of a rock from
before the version was kept reads 0 and is version 1); a newer version is refused.

Queries used on the hot path (by id; by state, and owner) are indexed columns (one index, state
and owner, serves both); the full record is a JSON
blob (:func:`~rock_core.engine.record_documents.record_document`: what rock-core's ``store``
converter writes, made faster), read by
that converter, which skips unknown keys so an older rock reads a newer rock's file.
"""

from __future__ import annotations

import builtins
import os
import sqlite3
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path

from rock_core.engine.record_documents import read_document, record_document
from rock_core.engine.wal_checkpoints import Checkpointer
from rock_core.models import SandboxRecord
from rock_core.private_paths import private_file
from rock_core.record_grouping import GroupedPuts
from rock_core.records import RecordStore, check_filters, newer_schema
from rock_core.states import State

__all__ = ["SqliteRecordStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sandbox (
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
-- One index serves the queries by state and by state and owner (the engine's by owner always
-- name states): each index is one more B-tree a put changes when a state changes. The two that
-- an older rock made (by state; by owner and state) are dropped, and made again by such a rock.
DROP INDEX IF EXISTS sandbox_state;
DROP INDEX IF EXISTS sandbox_owner_state;
CREATE INDEX IF NOT EXISTS sandbox_state_owner ON sandbox (state, owner);
"""


# An upsert, not INSERT OR REPLACE: a record's row is changed in place (REPLACE deletes it and
# inserts it again, in the table and each index), about a tenth less of SQLite's time a put.
_PUT = (
    "INSERT INTO sandbox VALUES (?,?,?,?,?,?,?,?,?,?) ON CONFLICT (sandbox_id) DO UPDATE SET "
    "state = excluded.state, owner = excluded.owner, user_id = excluded.user_id, "
    "experiment_id = excluded.experiment_id, namespace = excluded.namespace, "
    "cluster = excluded.cluster, image = excluded.image, create_time = excluded.create_time, "
    "record = excluded.record"
)


def _row(record: SandboxRecord) -> tuple[str | None, ...]:
    """The values of ``record``'s row, in the order of the columns of ``_PUT``."""
    spec = record.spec
    return (
        record.sandbox_id,
        record.state.value,
        record.owner,
        spec.user_id,
        spec.experiment_id,
        spec.namespace,
        spec.cluster,
        spec.image,
        record.create_time.isoformat(),
        record_document(record),
    )


class SqliteRecordStore(RecordStore):
    """Sandbox records in SQLite.

    :param path: a database file (created with its folder; WAL journal), or ``None`` for a
        private in-memory database (embedded mode, where nothing must outlive the process).
        It holds every sandbox's rocklet secret: the file (and its ``-wal`` and ``-shm``) is
        made mode 0600, or narrowed to it, and a missing folder is made 0700.

    Calls are short and synchronous; a lock makes the store safe to share between threads.

    :raises InvalidParameter: naming ``store_path``: the file is a link or another user's, or
        its schema version is newer than this rock knows.
    """

    can_group_commits = True

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = None if path is None else Path(path)
        if self.path is not None:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            # SQLite makes the journal files with the database's mode: 0600 from here on.
            private_file(self.path, setting="store_path")
            for journal in ("-wal", "-shm"):
                if os.path.lexists(f"{self.path}{journal}"):
                    private_file(f"{self.path}{journal}", setting="store_path")
        self._lock = threading.Lock()  # guards the connection
        #: Commit a put made on an event loop at the end of the loop's turn, with the others
        #: (the admin sets it, and calls :meth:`commit` before each answer); else at once.
        self.group_commits = False
        self._puts = GroupedPuts(self._write, self)
        self._closed = False
        self._db = sqlite3.connect(
            ":memory:" if self.path is None else str(self.path), check_same_thread=False
        )
        self._checkpoints: Checkpointer | None = None
        if self.path is not None:
            self._db.execute("PRAGMA journal_mode=WAL")
            # NORMAL in WAL mode survives a process crash (not a power cut) without an fsync per commit.
            self._db.execute("PRAGMA synchronous=NORMAL")
        self._check_schema()
        if self.path is not None:
            # The log's checkpoints (and their sync to disk) in a thread, not in a commit on
            # the engine's loop (rock_core.engine.wal_checkpoints).
            self._db.execute("PRAGMA wal_autocheckpoint=0")
            self._checkpoints = Checkpointer(self.path)

    def _check_schema(self) -> None:
        """Make the table (a new database) or check the version of the one there."""
        found = int(self._db.execute("PRAGMA user_version").fetchone()[0])
        if found > self.schema_version:
            self._db.close()
            raise newer_schema("store_path", str(self.path), found, self.schema_version)
        self._db.executescript(_SCHEMA)
        if found < self.schema_version:
            self._db.execute(f"PRAGMA user_version = {int(self.schema_version)}")

    @property
    def persistent(self) -> bool:
        """Whether the records outlive this process (a database file, not memory)."""
        return self.path is not None

    def close(self) -> None:
        """Close the database (committing what a group has pending). Idempotent."""
        if self._closed:
            return
        try:
            self._puts.flush()
        finally:
            if self._checkpoints is not None:
                self._checkpoints.stop()
            with self._lock:
                if not self._closed:
                    self._closed = True
                    self._db.close()  # the last connection: SQLite checkpoints the whole log

    def commit(self) -> None:
        """Commit the puts of a group made so far (nothing when none is pending)."""
        self._puts.commit()

    def _write(self, records: builtins.list[SandboxRecord]) -> None:
        """Write and commit ``records`` in one transaction, or none of them (the writer of
        :class:`~rock_core.record_grouping.GroupedPuts`)."""
        rows = [_row(record) for record in records]
        with self._lock:
            try:
                self._db.executemany(_PUT, rows)
                self._db.commit()
            except BaseException:
                self._db.rollback()
                raise

    def put(self, record: SandboxRecord) -> None:
        """Insert or replace ``record`` (in a group: at the commit, see the module)."""
        self._puts.put(record, group=self.group_commits)

    def put_progress(self, record: SandboxRecord) -> None:
        """:meth:`put` of progress (:meth:`RecordStore.put_progress`): in a group, written
        with the record's next put, a listing or count, or the close."""
        self._puts.put(record, group=self.group_commits, progress=True)

    def get(self, sandbox_id: str) -> SandboxRecord | None:
        """The record of ``sandbox_id``, or ``None``. A put of it still pending in the group is
        the answer; the group is not written for one read (a start reads twice, for its
        idempotency key, and each written group's rows would cost a JSON document each)."""
        pending = self._puts.pending(sandbox_id)
        if pending is not None:
            return pending
        with self._lock:
            row = self._db.execute(
                "SELECT record FROM sandbox WHERE sandbox_id = ?", (sandbox_id,)
            ).fetchone()
        return None if row is None else read_document(row[0])

    def list(
        self,
        *,
        states: Iterable[State] | None = None,
        filters: Mapping[str, str] | None = None,
        limit: int | None = None,
        offset: int = 0,
        known: Callable[[str], SandboxRecord | None] | None = None,
    ) -> list[SandboxRecord]:
        """Records in creation order, restricted to ``states`` and exact-match ``filters``.

        :param known: the caller's own copy of a record by id, or ``None``: taken instead of
            reading the row's JSON (reading it is most of a listing's cost; the engine holds
            every live sandbox's current record in memory).
        :raises ValueError: a filter names a field not in :data:`~rock_core.records.FILTER_FIELDS`.
        """
        where, args = self._where(states, filters)
        sql = f"SELECT sandbox_id, record FROM sandbox{where} ORDER BY create_time, sandbox_id"
        if limit is not None:
            sql += " LIMIT ? OFFSET ?"
            args += [limit, offset]
        self._puts.flush()
        with self._lock:
            rows = self._db.execute(sql, args).fetchall()
        records = []
        for sandbox_id, data in rows:
            record = known(sandbox_id) if known is not None else None
            records.append(record if record is not None else read_document(data))
        return records

    def count(
        self, *, states: Iterable[State] | None = None, filters: Mapping[str, str] | None = None
    ) -> int:
        """How many records :meth:`list` would return without a limit."""
        where, args = self._where(states, filters)
        self._puts.flush()
        with self._lock:
            return int(self._db.execute(f"SELECT COUNT(*) FROM sandbox{where}", args).fetchone()[0])

    def count_by_state(self) -> dict[State, int]:
        """Number of records in each state (states with none are left out)."""
        self._puts.flush()
        with self._lock:
            rows = self._db.execute("SELECT state, COUNT(*) FROM sandbox GROUP BY state").fetchall()
        return {State(s): n for s, n in rows}

    def purge_deleted(self, before: datetime) -> int:
        """Drop rows of sandboxes deleted before ``before``; return how many."""
        dropped = 0
        for record in self.list(states=[State.DELETED]):
            if record.delete_time is not None and record.delete_time < before:
                with self._lock, self._db:
                    self._db.execute(
                        "DELETE FROM sandbox WHERE sandbox_id = ?", (record.sandbox_id,)
                    )
                dropped += 1
        return dropped

    @staticmethod
    def _where(
        states: Iterable[State] | None, filters: Mapping[str, str] | None
    ) -> tuple[str, builtins.list[object]]:
        # ``list`` here is SqliteRecordStore.list: the builtin is named in full.
        clauses: builtins.list[str] = []
        args: builtins.list[object] = []
        if states is not None:
            values: Sequence[str] = [State(s).value for s in states]
            clauses.append(f"state IN ({','.join('?' * len(values)) or 'NULL'})")
            args.extend(values)
        check_filters(filters)
        for field, value in (filters or {}).items():
            clauses.append(f"{field} = ?")
            args.append(value)
        return (" WHERE " + " AND ".join(clauses) if clauses else ""), args
