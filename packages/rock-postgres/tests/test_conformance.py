"""rock-postgres's record store against rock-core's record store conformance suite, on a real
PostgreSQL server (a fresh database for the module)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from rock_core.records import RecordStore
from rock_core.testing import RecordStoreConformance
from rock_postgres.store import PostgresRecordStore
from rock_postgres.testing import postgres_store, postgres_url, run_sql  # noqa: F401


class TestPostgres(RecordStoreConformance):
    @pytest.fixture
    def store(self, postgres_store: PostgresRecordStore) -> Iterator[RecordStore]:
        yield postgres_store

    def reopen(self, store: RecordStore) -> RecordStore | None:
        assert isinstance(store, PostgresRecordStore)
        second = PostgresRecordStore(store.target.url)
        second.open()
        return second

    def add_unknown_key(
        self, store: RecordStore, sandbox_id: str, path: Sequence[str], value: Any
    ) -> None:
        assert isinstance(store, PostgresRecordStore)
        url = store.target.url
        [[text]] = run_sql(url, "SELECT record FROM rock_sandbox WHERE sandbox_id = $1", sandbox_id)
        data = json.loads(text)
        *parents, last = path
        inner = data
        for key in parents:
            inner = inner[key]
        inner[last] = value
        run_sql(
            url,
            "UPDATE rock_sandbox SET record = $1 WHERE sandbox_id = $2",
            json.dumps(data),
            sandbox_id,
        )
