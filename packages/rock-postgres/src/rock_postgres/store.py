"""The engine's records in PostgreSQL: :class:`PostgresRecordStore`, selected by
``[engine] store = "postgresql://user@host:port/database"``.

The seam (:class:`rock_core.records.RecordStore`) is synchronous, since the engine writes each
change through on its event loop; asyncpg is async. The store runs asyncpg on an event loop of
its own, in a thread of its own (:class:`~rock_postgres._loop.LoopThread`), with a pool of
connections, and blocks each caller until its query has answered, at most ``call_timeout``.
"""

from __future__ import annotations

import builtins
import logging
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from rock_core.engine.record_documents import read_document, record_document
from rock_core.models import SandboxRecord
from rock_core.record_grouping import GroupedPuts
from rock_core.records import RecordStore, StoreUnavailable, check_filters
from rock_core.states import State
from rock_postgres import _schema
from rock_postgres._loop import LoopThread
from rock_postgres._target import Target, read_target
from rock_postgres.options import PostgresOptions

if TYPE_CHECKING:
    import asyncpg

    from rock_postgres.lease import Lease

__all__ = ["PUT", "PostgresRecordStore", "record_row"]

T = TypeVar("T")

log = logging.getLogger(__name__)

#: Insert or replace a record: its values $1 ... $11 (:func:`record_row`).
PUT = """
INSERT INTO rock_sandbox (sandbox_id, state, owner, user_id, experiment_id, namespace, cluster,
                          image, create_time, delete_time, record)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
ON CONFLICT (sandbox_id) DO UPDATE SET
    state = EXCLUDED.state, owner = EXCLUDED.owner, user_id = EXCLUDED.user_id,
    experiment_id = EXCLUDED.experiment_id, namespace = EXCLUDED.namespace,
    cluster = EXCLUDED.cluster, image = EXCLUDED.image, create_time = EXCLUDED.create_time,
    delete_time = EXCLUDED.delete_time, record = EXCLUDED.record
"""


def _lost() -> tuple[type[BaseException], ...]:
    """What a lost connection looks like: the pool replaces it, and the call is made once more
    (every call of the store can be repeated: a put replaces, the others read or purge).

    asyncpg is imported here, when a store is used, not when the plugin is loaded: every engine
    loads the plugins, and most never open a PostgreSQL store (asyncpg costs some 2.5 MB).
    """
    import asyncpg

    return (
        OSError,
        asyncpg.exceptions.ConnectionDoesNotExistError,
        asyncpg.exceptions.InterfaceError,
        asyncpg.exceptions.PostgresConnectionError,
        asyncpg.exceptions.AdminShutdownError,
        asyncpg.exceptions.CannotConnectNowError,
        # An idle connection the server ended can answer the next query with this (asyncpg
        # 0.32: "cannot switch to state 11; another operation (2) is in progress").
        asyncpg.exceptions.InternalClientError,
    )


def record_row(record: SandboxRecord) -> tuple[Any, ...]:
    """The values of ``record``'s row, in the order of the columns of ``PUT``."""
    spec = record.spec
    return (
        record.sandbox_id,
        record.state.value,
        _column(record.owner),
        _column(spec.user_id),
        _column(spec.experiment_id),
        _column(spec.namespace),
        _column(spec.cluster),
        _column(spec.image),
        record.create_time,
        record.delete_time,
        record_document(record),
    )


def _column(value: str | None) -> str | None:
    """A text column's value: PostgreSQL's text holds no NUL, which a tenant may put in a field;
    escaped one-to-one (backslash first), and filter values alike, so equality is kept."""
    if value is None or ("\x00" not in value and "\\" not in value):
        return value
    return value.replace("\\", "\\\\").replace("\x00", "\\0")


class PostgresRecordStore(RecordStore):
    """Sandbox records in PostgreSQL (rock_core.records.RecordStore's contract).

    :param url: the engine's ``store``: ``postgresql://user[:password]@host[:port]/database``,
        or ``postgresql://user@/database?host=/socket/folder`` for a unix socket.
    :param options: ``[plugins.postgres]``: ``connect_timeout``, ``call_timeout``, ``pool_size``
        (:class:`~rock_postgres.options.PostgresOptions`).

    Building reads the URL and options and does no I/O; :meth:`open` connects (a pool of
    ``pool_size`` connections), makes or checks the tables and their schema version, within
    ``connect_timeout``. Each call then costs one round trip to the server plus a hand-over to
    the store's thread and back: measured on a 2-core machine over a unix socket, a put's
    median was 0.70-0.86 ms and a get's 0.35-0.50 ms (0.04 ms of it the hand-over to the
    store's thread), against 0.04-0.13 ms for SQLite
    (``packages/rock-postgres/benchmarks/store_calls.py`` prints them). Every call is made
    once more on a new connection if its connection was lost (a server restart).

    :raises InvalidParameter: naming ``store`` (not a PostgreSQL URL, no database, a bad port)
        or ``plugins.postgres.<key>``, at construction; naming ``store`` from :meth:`open` when
        the tables are of a newer schema than this rock knows.
    :raises StoreUnavailable: naming ``store``, the server and the reason, from :meth:`open`
        and any call, when the server cannot be reached or does not answer in time.

    With :attr:`group_commits` (the admin sets it), the puts made in one turn of an event loop
    are written at its end in one round trip (``executemany``, one transaction), and before
    every answer (:meth:`commit`): a start saves its record about eight times, each a round
    trip of its own otherwise, on the event loop (:class:`rock_core.record_grouping.GroupedPuts`
    keeps them; a failed write keeps them pending for the next commit).
    """

    can_group_commits = True

    def __init__(self, url: str, **options: Any) -> None:
        self.target: Target = read_target(url)
        self.options = PostgresOptions.from_table(options)
        self._loop: LoopThread | None = None
        self._pool: asyncpg.Pool | None = None
        self.group_commits = False
        self._puts = GroupedPuts(self._write, self)

    @property
    def persistent(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"PostgresRecordStore({self.target.masked!r})"

    # -- opening and closing -----------------------------------------------------------------

    def open(self) -> None:
        """Connect, make or check the tables; see the class docstring."""
        import asyncpg

        if self._pool is not None:
            return
        loop = self._loop = LoopThread(f"rock-postgres {self.target.where}")
        timeout = self.options.connect_timeout
        try:
            self._pool = loop.run(self._connect(), timeout + 1)
        except TimeoutError:
            self.close()
            raise self._unavailable(f"no answer within {timeout:g} s (connect_timeout)") from None
        except (OSError, asyncpg.PostgresError, asyncpg.exceptions.InterfaceError) as exc:
            self.close()
            raise self._unavailable(_reason(exc)) from None
        except BaseException:
            self.close()
            raise

    async def _connect(self) -> asyncpg.Pool:
        import asyncpg

        timeout = self.options.connect_timeout
        pool: asyncpg.Pool = await asyncpg.create_pool(
            self.target.url,
            min_size=1,
            max_size=self.options.pool_size,
            timeout=timeout,
            command_timeout=self.options.call_timeout,
        )
        try:
            async with pool.acquire(timeout=timeout) as connection:
                await _schema.prepare_schema(connection, self.target.masked)
        except BaseException:
            pool.terminate()
            raise
        return pool

    def close(self) -> None:
        """Commit what a group has pending, close the connections and the store's thread.
        Idempotent."""
        if self._puts and self._pool is not None:
            try:
                self._puts.flush()  # progress too
            except Exception as exc:  # the server is gone: nothing more can be done
                log.warning("%r: %d pending records not written: %s", self, len(self._puts), exc)
        pool, self._pool = self._pool, None
        loop, self._loop = self._loop, None
        if loop is None:
            return
        if pool is not None:
            try:
                loop.run(pool.close(), self.options.call_timeout)
            except Exception:
                pool.terminate()
        loop.close()

    # -- calls -------------------------------------------------------------------------------

    def call(self, query: Callable[[asyncpg.Pool], Awaitable[T]]) -> T:
        """``query(pool)`` on the store's loop and connections, once more if its connection was
        lost, at most ``call_timeout``: how the records' calls are made, and how a component
        beside them reaches the same server (the leader's lease, :mod:`rock_postgres.lease`).
        ``query`` must be safe to repeat.

        :raises StoreUnavailable: the server cannot be reached or does not answer in time.
        """
        pool, loop = self._pool, self._loop
        if pool is None or loop is None:
            raise RuntimeError("the record store is not open (PostgresRecordStore.open)")

        async def attempt() -> T:
            try:
                return await query(pool)
            except _lost():
                # Every connection opened before may be as dead: new ones for the next calls.
                await pool.expire_connections()
                return await query(pool)

        try:
            return loop.run(attempt(), self.options.call_timeout)
        except TimeoutError:
            raise self._unavailable(
                f"no answer within {self.options.call_timeout:g} s (call_timeout)"
            ) from None
        except _lost() as exc:
            raise self._unavailable(_reason(exc)) from None

    def _unavailable(self, reason: str) -> StoreUnavailable:
        return StoreUnavailable(
            f"store: PostgreSQL at {self.target.where} ({self.target.masked}): {reason}"
        )

    def put(self, record: SandboxRecord) -> None:
        self._puts.put(record, group=self.group_commits)

    def put_progress(self, record: SandboxRecord) -> None:
        self._puts.put(record, group=self.group_commits, progress=True)

    def commit(self) -> None:
        """Write the group's pending puts in one round trip (nothing when none is pending).

        :raises StoreUnavailable: the server cannot be reached; the puts stay pending.
        """
        self._puts.commit()

    def _write(self, records: builtins.list[SandboxRecord]) -> None:
        """Write ``records``: one round trip, one transaction (the writer of
        :class:`~rock_core.record_grouping.GroupedPuts`)."""
        if len(records) == 1:
            row = record_row(records[0])
            self.call(lambda pool: pool.execute(PUT, *row))
            return
        rows = [record_row(record) for record in records]
        self.call(lambda pool: pool.executemany(PUT, rows))

    def leadership(self, name: str, holder: str, ttl: float, address: str | None = None) -> Lease:
        """The lease ``name`` in this database (:class:`rock_postgres.lease.Lease`), its table
        made or checked now."""
        from rock_postgres.lease import Lease

        lease = Lease(self, holder, name=name, ttl=ttl, address=address)
        lease.prepare()
        return lease

    def get(self, sandbox_id: str) -> SandboxRecord | None:
        pending = self._puts.pending(sandbox_id)
        if pending is not None:  # put in this turn, not written yet
            return pending
        data = self.call(
            lambda pool: pool.fetchval(
                "SELECT record FROM rock_sandbox WHERE sandbox_id = $1", sandbox_id
            )
        )
        return None if data is None else read_document(data)

    def list(
        self,
        *,
        states: Iterable[State] | None = None,
        filters: Mapping[str, str] | None = None,
        limit: int | None = None,
        offset: int = 0,
        known: Callable[[str], SandboxRecord | None] | None = None,
    ) -> builtins.list[SandboxRecord]:
        where, args = _where(states, filters)
        sql = (
            f"SELECT sandbox_id, record FROM rock_sandbox{where} "
            'ORDER BY create_time, sandbox_id COLLATE "C"'
        )
        if limit is not None:
            sql += f" LIMIT ${len(args) + 1} OFFSET ${len(args) + 2}"
            args += [limit, offset]
        elif offset:
            sql += f" OFFSET ${len(args) + 1}"
            args.append(offset)
        self._puts.flush()  # a read sees every put, progress too
        rows = self.call(lambda pool: pool.fetch(sql, *args))
        records = []
        for sandbox_id, data in rows:
            record = known(sandbox_id) if known is not None else None
            records.append(record if record is not None else read_document(data))
        return records

    def count(
        self, *, states: Iterable[State] | None = None, filters: Mapping[str, str] | None = None
    ) -> int:
        where, args = _where(states, filters)
        sql = f"SELECT count(*) FROM rock_sandbox{where}"
        self._puts.flush()
        return int(self.call(lambda pool: pool.fetchval(sql, *args)))

    def count_by_state(self) -> dict[State, int]:
        self._puts.flush()  # a read sees every put, progress too
        rows = self.call(
            lambda pool: pool.fetch("SELECT state, count(*) FROM rock_sandbox GROUP BY state")
        )
        return {State(state): int(n) for state, n in rows}

    def purge_deleted(self, before: datetime) -> int:
        self._puts.flush()  # a read sees every put, progress too
        rows = self.call(
            lambda pool: pool.fetch(
                "DELETE FROM rock_sandbox WHERE state = $1 AND delete_time < $2 "
                "RETURNING sandbox_id",
                State.DELETED.value,
                before,
            )
        )
        if rows:  # and the activity a cluster's admins reported of them (rock_postgres.lease)
            gone = [row[0] for row in rows]
            self.call(lambda pool: _forget_activity(pool, gone))
        return len(rows)


async def _forget_activity(pool: asyncpg.Pool, sandbox_ids: builtins.list[str]) -> None:
    """Drop the reported activity of purged sandboxes, where a cluster made its table."""
    async with pool.acquire() as connection:
        if await connection.fetchval("SELECT to_regclass('rock_activity')") is not None:
            await connection.execute(
                "DELETE FROM rock_activity WHERE sandbox_id = ANY($1::text[])", sandbox_ids
            )


def _where(
    states: Iterable[State] | None, filters: Mapping[str, str] | None
) -> tuple[str, builtins.list[Any]]:
    """The WHERE clause of a listing and its arguments (column names only from FILTER_FIELDS)."""
    check_filters(filters)
    clauses: builtins.list[str] = []
    args: builtins.list[Any] = []
    if states is not None:
        args.append([State(s).value for s in states])
        clauses.append(f"state = ANY(${len(args)}::text[])")
    for field, value in (filters or {}).items():
        args.append(value if field == "state" else _column(value))
        clauses.append(f"{field} = ${len(args)}")
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), args


def _reason(exc: BaseException) -> str:
    """An error of the driver or the socket, in a few words."""
    if isinstance(exc, OSError) and exc.errno:
        return os.strerror(exc.errno)
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
