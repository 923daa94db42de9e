"""rock-postgres's plugin (entry point ``postgres`` in the group ``rock``): the record store for
``postgresql://`` (and ``postgres://``) URLs in the engine's ``store`` setting."""

from __future__ import annotations

from rock_core import hookimpl
from rock_core.hookspecs import Register
from rock_postgres.store import PostgresRecordStore

__all__ = ["rock_register_record_stores"]


@hookimpl
def rock_register_record_stores(register: Register) -> None:
    """Register :class:`~rock_postgres.store.PostgresRecordStore` under both schemes libpq reads."""
    register("postgresql", PostgresRecordStore)
    register("postgres", PostgresRecordStore)
