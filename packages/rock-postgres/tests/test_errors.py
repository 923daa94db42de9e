"""What a ``store`` URL that cannot be used says: a malformed one and a bad option before
anything connects; a server that refuses or never answers, naming ``store``, the server and the
reason within ``connect_timeout``; tables of a newer schema refused with both versions. The
password never appears. And a store whose connections the server ended (as a restart does)
carries on with new ones."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from rock_core.errors import InvalidParameter
from rock_core.records import StoreUnavailable
from rock_core.testing import sample_record
from rock_postgres.store import PostgresRecordStore
from rock_postgres.testing import postgres_store, postgres_url, run_sql  # noqa: F401


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("postgresql://rock:hunter2@127.0.0.1:port/rock", "is not a valid URL"),
        ("postgresql://rock:hunter2@127.0.0.1:5432/", "names no database"),
        ("postgresql://rock:hunter2@127.0.0.1:5432/rock?port=x", "port that is not a number"),
        ("postgresql://rock:hunter2@/rock?host=/tmp&port=abc", "port that is not a number"),
        ("mysql://rock:hunter2@127.0.0.1/rock", "is not a PostgreSQL URL"),
    ],
)
def test_a_malformed_url_is_named_without_its_password(url: str, said: str) -> None:
    with pytest.raises(InvalidParameter) as info:
        PostgresRecordStore(url)
    assert info.value.field == "store"
    assert said in str(info.value)
    assert str(info.value).startswith(
        "store: 'postgresql://rock:***@"
    ) or "mysql://rock:***@" in str(info.value)
    assert "hunter2" not in str(info.value) and "hunter2" not in str(info.value.value)


def test_a_bad_option_is_named_with_its_table() -> None:
    with pytest.raises(InvalidParameter, match=r"plugins\.postgres\.pool_size"):
        PostgresRecordStore("postgresql://rock@127.0.0.1/rock", pool_size=0)


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])  # closed again when the block ends


def test_a_closed_port_is_named_with_the_server_and_the_reason() -> None:
    port = _closed_port()
    store = PostgresRecordStore(f"postgresql://rock:hunter2@127.0.0.1:{port}/rock")
    with pytest.raises(StoreUnavailable) as info:
        store.open()
    message = str(info.value)
    assert message.startswith(f"store: PostgreSQL at 127.0.0.1:{port} ")
    assert "Connection refused" in message
    assert "hunter2" not in message and "rock:***@" in message
    store.close()  # nothing left to close: harmless


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A port on 127.0.0.1 that accepts connections and never says a word."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield int(listener.getsockname()[1])


def test_a_server_that_never_answers_is_given_up_after_connect_timeout(silent_server: int) -> None:
    store = PostgresRecordStore(
        f"postgresql://rock@127.0.0.1:{silent_server}/rock", connect_timeout=0.5
    )
    with pytest.raises(StoreUnavailable) as info:
        store.open()
    assert str(info.value).startswith(f"store: PostgreSQL at 127.0.0.1:{silent_server} ")
    assert "no answer within 0.5 s (connect_timeout)" in str(info.value)


def test_a_missing_socket_is_named() -> None:
    store = PostgresRecordStore("postgresql://rock@/rock?host=/nonexistent-folder&port=5999")
    with pytest.raises(StoreUnavailable) as info:
        store.open()
    assert str(info.value).startswith(
        "store: PostgreSQL at socket /nonexistent-folder/.s.PGSQL.5999 "
    )
    assert "No such file or directory" in str(info.value)


def test_a_missing_database_is_named(postgres_url: str) -> None:
    url = postgres_url.replace("/rock_test_", "/rock_missing_", 1)
    with pytest.raises(StoreUnavailable, match=r"store: PostgreSQL at .* does not exist"):
        PostgresRecordStore(url).open()


def test_tables_of_a_newer_schema_are_refused(postgres_url: str) -> None:
    store = PostgresRecordStore(postgres_url)
    store.open()
    store.close()
    [[version]] = run_sql(
        postgres_url, "SELECT version FROM rock_schema WHERE component = 'records'"
    )
    assert version == 1
    run_sql(postgres_url, "UPDATE rock_schema SET version = 9 WHERE component = 'records'")
    try:
        with pytest.raises(InvalidParameter) as info:
            PostgresRecordStore(postgres_url).open()
        assert info.value.field == "store"
        assert str(info.value) == (
            f"store: the records at {postgres_url} have schema version 9, and this rock knows "
            "versions up to 1: a newer rock wrote them; upgrade rock to use them"
        )
    finally:
        run_sql(postgres_url, "UPDATE rock_schema SET version = 1 WHERE component = 'records'")
    again = PostgresRecordStore(postgres_url)
    again.open()
    again.close()


def test_two_stores_opening_a_new_database_at_once_make_its_tables_once(postgres_url: str) -> None:
    import threading

    run_sql(postgres_url, "DROP TABLE IF EXISTS rock_sandbox, rock_schema")
    stores = [PostgresRecordStore(postgres_url) for _ in range(4)]
    failures: list[BaseException] = []

    def open_one(store: PostgresRecordStore) -> None:
        try:
            store.open()
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=open_one, args=(s,)) for s in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for store in stores:
        store.close()
    assert failures == []
    assert run_sql(postgres_url, "SELECT component, version FROM rock_schema") == [("records", 1)]


def test_the_store_carries_on_after_the_server_ended_its_connections(
    postgres_store: PostgresRecordStore, postgres_url: str
) -> None:
    record = sample_record()
    postgres_store.put(record)
    [[ended]] = run_sql(
        postgres_url,
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid()",
    )
    assert ended >= 1  # the store's connection, as a restart of the server ends it
    assert postgres_store.get(record.sandbox_id) == record
    postgres_store.put(record)
