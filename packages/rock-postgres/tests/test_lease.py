"""The leader's lease (rock_postgres.lease), on its own: one holder at a time, a new epoch for
each new holder, and a holder whose lease expired (paused past it) fenced out: its renewal and
its epoch's checks fail, and a write fenced by HOLDS does nothing. Expiry is made by moving the
lease's end into the past on the server, not by waiting."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from rock_postgres.lease import HOLDS, Lease
from rock_postgres.store import PostgresRecordStore
from rock_postgres.testing import postgres_url, run_sql  # noqa: F401


@pytest.fixture
def store(postgres_url: str) -> Iterator[PostgresRecordStore]:
    store = PostgresRecordStore(postgres_url)
    store.open()
    Lease(store, "setup").prepare()
    run_sql(postgres_url, "TRUNCATE rock_lease")
    yield store
    store.close()


def _expire(url: str) -> None:
    run_sql(url, "UPDATE rock_lease SET expires_at = now() - interval '1 second'")


def test_one_holder_at_a_time_and_a_new_epoch_for_each_new_holder(
    store: PostgresRecordStore, postgres_url: str
) -> None:
    a, b = Lease(store, "admin-a", ttl=60), Lease(store, "admin-b", ttl=60)
    assert a.current() is None
    assert a.acquire() == 1
    assert b.acquire() is None  # a's is unexpired
    assert a.acquire() == 1  # taking it again while holding it keeps the epoch
    assert a.renew(1) and a.holds(1)
    state = a.current()
    assert state is not None and (state.holder, state.epoch) == ("admin-a", 1)
    _expire(postgres_url)
    assert not a.holds(1)
    assert b.acquire() == 2
    assert not a.renew(1)  # a woke up after its lease ended: fenced
    assert not a.holds(1) and b.holds(2)
    assert a.acquire() is None
    b.release(2)
    assert a.acquire() == 3  # released: taken at once, under a new epoch


def test_a_holder_whose_lease_expired_gets_a_new_epoch_even_if_nobody_took_it(
    store: PostgresRecordStore, postgres_url: str
) -> None:
    a = Lease(store, "admin-a", ttl=60)
    assert a.acquire() == 1
    _expire(postgres_url)
    assert not a.renew(1)
    assert a.acquire() == 2  # work begun under epoch 1 stays fenced


def test_a_write_fenced_by_holds_does_nothing_under_a_stale_epoch(
    store: PostgresRecordStore, postgres_url: str
) -> None:
    run_sql(postgres_url, "CREATE TABLE IF NOT EXISTS fenced (n INTEGER)")
    a, b = Lease(store, "admin-a", ttl=60), Lease(store, "admin-b", ttl=60)
    insert = f"INSERT INTO fenced (n) SELECT $4::int WHERE {HOLDS}"
    assert a.acquire() == 1
    run_sql(postgres_url, insert, "leader", "admin-a", 1, 1)
    _expire(postgres_url)
    assert b.acquire() == 2
    run_sql(postgres_url, insert, "leader", "admin-a", 1, 2)  # the old leader, awake again
    run_sql(postgres_url, insert, "leader", "admin-b", 2, 3)
    assert [row[0] for row in run_sql(postgres_url, "SELECT n FROM fenced ORDER BY n")] == [1, 3]


def test_holders_racing_for_a_free_lease_leave_exactly_one_winner(
    store: PostgresRecordStore,
) -> None:
    won: list[tuple[str, int | None]] = []
    start = threading.Barrier(8)

    def race(n: int) -> None:
        start.wait()
        won.append((f"admin-{n}", Lease(store, f"admin-{n}", ttl=60).acquire()))

    threads = [threading.Thread(target=race, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [(holder, epoch) for holder, epoch in won if epoch is not None]
    assert len(won) == 8 and len(winners) == 1 and winners[0][1] == 1
    state = Lease(store, "anyone").current()
    assert state is not None and state.holder == winners[0][0]


def test_a_newer_lease_schema_is_refused(store: PostgresRecordStore, postgres_url: str) -> None:
    from rock_core.errors import InvalidParameter

    run_sql(postgres_url, "UPDATE rock_schema SET version = 5 WHERE component = 'lease'")
    try:
        with pytest.raises(
            InvalidParameter, match="schema version 5, and this rock knows versions up to 2"
        ):
            Lease(store, "admin-a").prepare()
    finally:
        run_sql(postgres_url, "UPDATE rock_schema SET version = 2 WHERE component = 'lease'")


def test_a_lease_table_of_version_1_is_upgraded_and_names_its_holders_address(
    store: PostgresRecordStore, postgres_url: str
) -> None:
    Lease(store, "admin-a").prepare()
    # As version 1 left it: no address column.
    run_sql(postgres_url, "ALTER TABLE rock_lease DROP COLUMN address")
    run_sql(postgres_url, "UPDATE rock_schema SET version = 1 WHERE component = 'lease'")
    lease = Lease(store, "admin-up", name="upgraded", address="http://admin-up.example:8080")
    lease.prepare()
    assert run_sql(postgres_url, "SELECT version FROM rock_schema WHERE component = 'lease'") == [
        (2,)
    ]
    assert lease.leader() is None  # nobody took it yet
    assert lease.acquire() is not None
    assert lease.leader() == "http://admin-up.example:8080"
    lease.release(lease.acquire() or 0)
    assert lease.leader() is None  # released: nobody leads
