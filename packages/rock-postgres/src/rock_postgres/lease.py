"""A lease in PostgreSQL with a fencing epoch: which one of several admins is the leader
(issue #24 point 2): rock-core's :class:`~rock_core.leadership.Leadership`, which the record
store offers (:meth:`PostgresRecordStore.leadership
<rock_postgres.store.PostgresRecordStore.leadership>`) to engines with ``[engine] cluster``.

One row per lease in ``rock_lease``: its holder, its epoch and when it expires, by the server's
clock (``now()``), so the admins' clocks do not matter. Taking a free or expired lease bumps
its epoch; renewing keeps it. A holder that paused past its expiry (``SIGSTOP``) and woke up
finds its epoch gone: :meth:`Lease.renew` answers false, and :meth:`Lease.holds` (or the SQL of
:data:`HOLDS`, inside a write's own statement) refuses work under a stale epoch: the fencing
that keeps an old leader from acting.

Every call goes through the record store's connections (:meth:`PostgresRecordStore.call
<rock_postgres.store.PostgresRecordStore.call>`); the table and its schema version
(``rock_schema``'s row ``lease``) are made by :meth:`Lease.prepare`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # asyncpg is imported when a store opens, not with the plugin
    import asyncpg

from collections.abc import Collection, Mapping
from datetime import datetime

import attrs

from rock_core.leadership import Leadership
from rock_core.models import SandboxRecord
from rock_core.records import newer_schema
from rock_postgres.store import PUT, PostgresRecordStore, record_row

__all__ = ["HOLDS", "Lease", "LeaseState"]

COMPONENT = "lease"
#: 1: the lease; 2: its holder's ``address``, and ``rock_activity``.
SCHEMA_VERSION = 2
_LOCK = 0x726F636B5F6C6561  # "rock_lea"

_TABLE = """
CREATE TABLE IF NOT EXISTS rock_lease (
    name       TEXT PRIMARY KEY,
    holder     TEXT NOT NULL,
    epoch      BIGINT NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL,
    address    TEXT
)
"""

# Version 1 had no address.
_MIGRATE = "ALTER TABLE rock_lease ADD COLUMN IF NOT EXISTS address TEXT"

# The last call into each sandbox that any admin served (the leader's idle timers read it).
_ACTIVITY_TABLE = """
CREATE TABLE IF NOT EXISTS rock_activity (
    sandbox_id TEXT PRIMARY KEY,
    at         DOUBLE PRECISION NOT NULL
)
"""

_REPORT = """
INSERT INTO rock_activity AS a (sandbox_id, at) SELECT * FROM unnest($1::text[], $2::float8[])
ON CONFLICT (sandbox_id) DO UPDATE SET at = GREATEST(a.at, EXCLUDED.at)
"""

#: A condition true only while ``holder`` ($2) holds lease ``name`` ($1) under ``epoch`` ($3),
#: unexpired: put it in a write's WHERE clause and the write is fenced in the same statement.
HOLDS = (
    "EXISTS (SELECT 1 FROM rock_lease WHERE name = $1 AND holder = $2 AND epoch = $3 "
    "AND expires_at > now())"
)

# Take the lease when it is free, expired or already ours; a new holder gets the next epoch.
_ACQUIRE = """
INSERT INTO rock_lease AS l (name, holder, epoch, expires_at, address)
VALUES ($1, $2, 1, now() + make_interval(secs => $3), $4)
ON CONFLICT (name) DO UPDATE SET
    holder = EXCLUDED.holder,
    address = EXCLUDED.address,
    epoch = CASE WHEN l.holder = EXCLUDED.holder AND l.expires_at > now() THEN l.epoch
                 ELSE l.epoch + 1 END,
    expires_at = EXCLUDED.expires_at
WHERE l.holder = EXCLUDED.holder OR l.expires_at <= now()
RETURNING epoch
"""

_RENEW = """
UPDATE rock_lease SET expires_at = now() + make_interval(secs => $4)
WHERE name = $1 AND holder = $2 AND epoch = $3 AND expires_at > now()
RETURNING epoch
"""


# PUT, its values moved to $4 ... $14, written only while HOLDS: the lease's row is locked
# (FOR SHARE) until the write commits, so a taking of the lease waits for it, then sees it.
_FENCED_PUT = (
    PUT.split("VALUES")[0]
    + "SELECT "
    + ", ".join(f"${i}" for i in range(4, 15))
    + " WHERE "
    + HOLDS.replace("now())", "now() FOR SHARE)")
    + "\nON CONFLICT"
    + PUT.split("ON CONFLICT")[1]
)


@attrs.frozen
class LeaseState:
    """A lease as the server has it."""

    holder: str
    epoch: int
    expires_at: datetime


class Lease(Leadership):
    """The lease ``name`` as seen by ``holder`` (an admin's own id), on the server of ``store``.

    :param ttl: seconds a taking or renewal lasts; a holder renews well before it ends.
    """

    def __init__(
        self,
        store: PostgresRecordStore,
        holder: str,
        *,
        name: str = "leader",
        ttl: float = 5.0,
        address: str | None = None,
    ) -> None:
        self.store = store
        self.holder = holder
        self.name = name
        self.ttl = ttl
        self.address = address

    def prepare(self) -> None:
        """Make the lease's table, or check its schema version (a newer one is refused)."""

        async def prepare(pool: asyncpg.Pool) -> None:
            async with pool.acquire() as connection, connection.transaction():
                await connection.execute("SELECT pg_advisory_xact_lock($1)", _LOCK)
                await connection.execute(_TABLE)
                await connection.execute(_MIGRATE)
                await connection.execute(_ACTIVITY_TABLE)
                found = await connection.fetchval(
                    "SELECT version FROM rock_schema WHERE component = $1", COMPONENT
                )
                if found is not None and found > SCHEMA_VERSION:
                    raise newer_schema("store", self.store.target.masked, found, SCHEMA_VERSION)
                if found is None or found < SCHEMA_VERSION:
                    await connection.execute(
                        "INSERT INTO rock_schema (component, version) VALUES ($1, $2) "
                        "ON CONFLICT (component) DO UPDATE SET version = EXCLUDED.version",
                        COMPONENT,
                        SCHEMA_VERSION,
                    )

        self.store.call(prepare)

    def acquire(self) -> int | None:
        """Take the lease (free, expired, or already this holder's): its epoch, or ``None``
        while another holder's is unexpired."""
        epoch = self.store.call(
            lambda pool: pool.fetchval(
                _ACQUIRE, self.name, self.holder, float(self.ttl), self.address
            )
        )
        return None if epoch is None else int(epoch)

    def renew(self, epoch: int) -> bool:
        """Extend the lease held under ``epoch``; false when it was lost (expired, taken)."""
        found = self.store.call(
            lambda pool: pool.fetchval(_RENEW, self.name, self.holder, epoch, float(self.ttl))
        )
        return found is not None

    def holds(self, epoch: int) -> bool:
        """Whether this holder still holds the lease under ``epoch`` (the server's clock)."""
        return bool(
            self.store.call(
                lambda pool: pool.fetchval(f"SELECT {HOLDS}", self.name, self.holder, epoch)
            )
        )

    def release(self, epoch: int) -> None:
        """Give the lease up at once if held under ``epoch`` (a clean stop: no wait for expiry)."""
        self.store.call(
            lambda pool: pool.execute(
                "UPDATE rock_lease SET expires_at = now() "
                "WHERE name = $1 AND holder = $2 AND epoch = $3",
                self.name,
                self.holder,
                epoch,
            )
        )

    def put_fenced(self, record: SandboxRecord, epoch: int) -> bool:
        """Write ``record`` as the store's ``put`` does, in one statement with :data:`HOLDS`:
        true when written, false (nothing written) when the lease is not held under ``epoch``."""
        row = record_row(record)
        done = self.store.call(
            lambda pool: pool.execute(_FENCED_PUT, self.name, self.holder, epoch, *row)
        )
        return bool(done != "INSERT 0 0")

    def leader(self) -> str | None:
        """The address of the unexpired lease's holder (``None``: none holds it, or it named
        no address)."""
        found = self.store.call(
            lambda pool: pool.fetchval(
                "SELECT address FROM rock_lease WHERE name = $1 AND expires_at > now()",
                self.name,
            )
        )
        return None if found is None else str(found)

    def report_activity(self, activity: Mapping[str, float]) -> None:
        """Record the last call into each sandbox this admin served (the later time wins)."""
        if not activity:
            return
        ids = list(activity)
        times = [float(activity[i]) for i in ids]
        self.store.call(lambda pool: pool.execute(_REPORT, ids, times))

    def activity(self, sandbox_ids: Collection[str]) -> dict[str, float]:
        """The latest reported activity of each of ``sandbox_ids`` that has any."""
        if not sandbox_ids:
            return {}
        rows = self.store.call(
            lambda pool: pool.fetch(
                "SELECT sandbox_id, at FROM rock_activity WHERE sandbox_id = ANY($1::text[])",
                list(sandbox_ids),
            )
        )
        return {str(row[0]): float(row[1]) for row in rows}

    def current(self) -> LeaseState | None:
        """The lease as the server has it, or ``None`` before anyone took it."""
        row = self.store.call(
            lambda pool: pool.fetchrow(
                "SELECT holder, epoch, expires_at FROM rock_lease WHERE name = $1", self.name
            )
        )
        return None if row is None else LeaseState(row[0], int(row[1]), row[2])
