"""rock-postgres: the engine's sandbox records in PostgreSQL (asyncpg).

Select it with ``[engine] store = "postgresql://user@host:port/database"`` (or
``ROCK_ENGINE_STORE``); its settings are ``[plugins.postgres]``
(:class:`~rock_postgres.options.PostgresOptions`). :class:`PostgresRecordStore` implements rock-core's
record store seam (:class:`rock_core.records.RecordStore`) and passes its conformance suite;
:mod:`rock_postgres.testing` gives tests a fresh database on a real server.
"""

from rock_postgres.options import PostgresOptions
from rock_postgres.store import PostgresRecordStore

__all__ = ["PostgresOptions", "PostgresRecordStore", "__version__"]

__version__ = "0.1.0"
