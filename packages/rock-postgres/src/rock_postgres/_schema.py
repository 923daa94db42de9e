"""The tables of the records in PostgreSQL, and the schema version kept beside them.

``rock_sandbox`` holds one row per sandbox: the record as rock-core's ``store`` converter writes
it (JSON text in a ``json`` column, kept exactly as written: ``jsonb`` refuses the escaped NUL a
sandbox can put in a reason or a note), plus the columns listings filter and sort on, indexed as
SQLite's are. ``rock_schema`` keeps each component's schema version (``records``); the next
component (a leader's lease, issue #24) adds its own row and tables.

The tables are made, and the version read and checked, under a transaction-scoped advisory lock:
two admins starting at once on a new database neither race on ``CREATE TABLE`` nor both write
the version.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # asyncpg is imported when a store opens, not with the plugin
    import asyncpg


from rock_core.records import newer_schema

__all__ = ["COMPONENT", "SCHEMA_VERSION", "prepare_schema"]

#: This component's name in ``rock_schema``, and the version of its tables this code knows.
COMPONENT = "records"
SCHEMA_VERSION = 1

#: The advisory lock held while the tables are made or checked (any fixed 64-bit number).
_LOCK = 0x726F636B5F736368  # "rock_sch"

_VERSIONS = """
CREATE TABLE IF NOT EXISTS rock_schema (
    component TEXT PRIMARY KEY,
    version   INTEGER NOT NULL
)
"""

_TABLES = """
CREATE TABLE IF NOT EXISTS rock_sandbox (
    sandbox_id    TEXT PRIMARY KEY,
    state         TEXT NOT NULL,
    owner         TEXT,
    user_id       TEXT,
    experiment_id TEXT,
    namespace     TEXT,
    cluster       TEXT,
    image         TEXT NOT NULL,
    create_time   TIMESTAMPTZ NOT NULL,
    delete_time   TIMESTAMPTZ,
    record        JSON NOT NULL
);
CREATE INDEX IF NOT EXISTS rock_sandbox_state ON rock_sandbox (state);
CREATE INDEX IF NOT EXISTS rock_sandbox_owner_state ON rock_sandbox (owner, state);
CREATE INDEX IF NOT EXISTS rock_sandbox_created ON rock_sandbox (create_time, sandbox_id COLLATE "C");
"""


async def prepare_schema(connection: asyncpg.Connection, where: str) -> None:
    """Make the tables of a new database, or check the version of the ones there.

    :param where: the store as the user named it (password masked), for the refusal.
    :raises InvalidParameter: naming ``store``: the tables are of a newer version than
        :data:`SCHEMA_VERSION` (:func:`rock_core.records.newer_schema`).
    """
    async with connection.transaction():
        await connection.execute("SELECT pg_advisory_xact_lock($1)", _LOCK)
        await connection.execute(_VERSIONS)
        found = await connection.fetchval(
            "SELECT version FROM rock_schema WHERE component = $1", COMPONENT
        )
        if found is not None and found > SCHEMA_VERSION:
            raise newer_schema("store", where, found, SCHEMA_VERSION)
        await connection.execute(_TABLES)
        if found is None:
            await connection.execute(
                "INSERT INTO rock_schema (component, version) VALUES ($1, $2)",
                COMPONENT,
                SCHEMA_VERSION,
            )
