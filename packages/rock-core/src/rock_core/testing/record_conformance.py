"""The record store conformance suite: every record semantic the engine relies on, checked for real.

Subclass :class:`RecordStoreConformance` in a test module and provide a ``store`` fixture (an
open, empty :class:`~rock_core.records.RecordStore` per test, closed after it), and the two
backend hooks the suite cannot do through the store's own methods::

    import pytest
    from rock_core.testing import RecordStoreConformance

    class TestMyStore(RecordStoreConformance):
        @pytest.fixture
        def store(self, tmp_path):
            store = MyStore(...)
            store.open()
            yield store
            store.close()

        def reopen(self, store):
            # a second store on the same place, opened; None for a store in memory
            ...

        def add_unknown_key(self, store, sandbox_id, path, value):
            # write `value` at `path` (keys from the record's top) into the stored record, as a
            # newer rock would
            ...

What it checks (the contract on :class:`~rock_core.records.RecordStore`): a record read back
whole, secrets included, and text a tenant chose (a NUL, backslashes, quotes) kept and filtered
on exactly; a put replaces; write-through (a second store reads a write at once,
for a persistent store); listing in creation order with limit and offset; each filter field and
states, alone and together; an unknown filter refused; counts that match listings; counts by
state; ``known`` records taken instead of stored ones; purging of deleted rows only, before the
given time; unknown keys of a stored record skipped; concurrent writers and readers from threads
losing nothing; ``close`` twice; for a store that can group its commits
(``can_group_commits``): a turn's puts read at once, written at its end or at ``commit()``, the
last put of a record winning, a put from another thread never undone by an older pending one,
listings and counts seeing the turn's puts, ``close`` writing what is pending. The tests are
synchronous, as the seam is (a loop of their own where a test needs one).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest

from rock_core.models import NonBlankStr, Phase, PhaseStatus, Port, SandboxRecord, SandboxSpec
from rock_core.records import FILTER_FIELDS, RecordStore
from rock_core.states import Event, State, StateChange
from rock_core.testing.fixtures import unique_sandbox_id

__all__ = ["RecordStoreConformance", "sample_record"]

T0 = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def sample_record(
    sandbox_id: str | None = None,
    *,
    state: State = State.RUNNING,
    create_time: datetime = T0,
    owner: str | None = "engine-a",
    **spec_fields: Any,
) -> SandboxRecord:
    """A record with every kind of field set (phases, ports, history, secret, security, notes)."""
    spec = SandboxSpec(
        image=spec_fields.pop("image", "python:3.11"),
        env={"A": "1"},
        metadata={"team": "rl"},
        runtime_options={"docker_args": ["--init"]},
        **spec_fields,
    )
    return SandboxRecord(
        sandbox_id=NonBlankStr(sandbox_id or unique_sandbox_id("rec")),
        spec=spec,
        create_time=create_time,
        state=state,
        phases={"image_pull": Phase(PhaseStatus.SUCCESS, "cached", T0, T0)},
        port_mapping={Port(22555): Port(32768), Port(8080): Port(32769)},
        host_name="worker-1",
        host_ip="127.0.0.1",
        owner=owner,
        runtime="docker",
        start_time=T0,
        delete_time=T0 + timedelta(hours=1) if state is State.DELETED else None,
        state_history=(
            StateChange(
                from_state=State.PENDING, to_state=State.RUNNING, event=Event.ALIVE, timestamp=T0
            ),
        ),
        reason="a reason with 'quotes' and ünïcode",
        notes=("disk limit not enforced",),
        security={"pids_limit": 4096, "cap_add": ["NET_RAW"]},
        rocklet_token="the-rocklet-secret",
        unit_id="c0ffee",
        restart_count=2,
    )


class RecordStoreConformance:
    """The suite; see the module docstring for the fixture and hooks a subclass provides."""

    #: Threads of the concurrency tests, and puts per thread.
    threads: int = 8
    puts_per_thread: int = 25

    def reopen(self, store: RecordStore) -> RecordStore | None:
        """A second store on the same place as ``store``, opened (the caller closes it), or
        ``None`` when ``store`` is not persistent."""
        raise NotImplementedError("a RecordStoreConformance subclass defines reopen()")

    def add_unknown_key(
        self, store: RecordStore, sandbox_id: str, path: Sequence[str], value: Any
    ) -> None:
        """Write ``value`` at ``path`` into the stored record of ``sandbox_id``."""
        raise NotImplementedError("a RecordStoreConformance subclass defines add_unknown_key()")

    # -- one record ------------------------------------------------------------------------

    def test_a_record_is_read_back_whole_with_its_secret(self, store: RecordStore) -> None:
        record = sample_record()
        store.put(record)
        found = store.get(record.sandbox_id)
        assert found == record
        assert found is not None and found.rocklet_token == "the-rocklet-secret"
        assert found.create_time.tzinfo is not None

    def test_an_unknown_id_is_none(self, store: RecordStore) -> None:
        assert store.get(unique_sandbox_id("missing")) is None

    def test_a_put_replaces_the_record(self, store: RecordStore) -> None:
        record = sample_record()
        store.put(record)
        stopped = attrs.evolve(record, state=State.STOPPED, reason="stopped", restart_count=3)
        store.put(stopped)
        assert store.get(record.sandbox_id) == stopped
        assert store.count() == 1
        assert store.count_by_state() == {State.STOPPED: 1}

    def test_a_write_is_read_at_once_by_a_second_store(self, store: RecordStore) -> None:
        assert isinstance(store.persistent, bool)
        record = sample_record()
        store.put(record)
        second = self.reopen(store)
        if second is None:
            assert store.persistent is False, "a persistent store must be reopened by the suite"
            return
        try:
            assert store.persistent is True
            assert second.get(record.sandbox_id) == record
            stopped = attrs.evolve(record, state=State.STOPPED)
            store.put(stopped)
            assert second.get(record.sandbox_id) == stopped
            second.put(attrs.evolve(stopped, reason="seen by the other"))
            found = store.get(record.sandbox_id)
            assert found is not None and found.reason == "seen by the other"
        finally:
            second.close()
            second.close()  # idempotent

    def test_unknown_keys_in_a_stored_record_are_skipped(self, store: RecordStore) -> None:
        record = sample_record()
        store.put(record)
        self.add_unknown_key(store, record.sandbox_id, ["from_a_newer_rock"], {"x": 1})
        self.add_unknown_key(store, record.sandbox_id, ["spec", "newer_spec_field"], 7)
        assert store.get(record.sandbox_id) == record
        assert store.list() == [record]

    def test_text_a_tenant_chose_is_kept_and_filtered_on_exactly(self, store: RecordStore) -> None:
        odd = sample_record(user_id="u\x00\\0", experiment_id="e\\", namespace="ns'; --")
        plain = sample_record(user_id="u\\0", create_time=T0 + timedelta(seconds=1))
        odd = attrs.evolve(odd, reason="a NUL \x00, a backslash \\ and \u2028")
        store.put(odd)
        store.put(plain)
        assert store.get(odd.sandbox_id) == odd
        assert store.list(filters={"user_id": "u\x00\\0"}) == [odd]
        assert store.list(filters={"user_id": "u\\0"}) == [plain]
        assert store.list(filters={"experiment_id": "e\\"}) == [odd]
        assert store.count(filters={"namespace": "ns'; --"}) == 1

    # -- listings ----------------------------------------------------------------------------

    def test_listing_is_in_creation_order_with_limit_and_offset(self, store: RecordStore) -> None:
        later = [sample_record(create_time=T0 + timedelta(seconds=i)) for i in (3, 1, 2)]
        same = [sample_record(f"tie-{c}", create_time=T0) for c in "ba"]
        for record in [*later, *same]:
            store.put(record)
        ordered = [same[1], same[0], later[1], later[2], later[0]]
        assert [r.sandbox_id for r in store.list()] == [r.sandbox_id for r in ordered]
        assert store.list(limit=2) == ordered[:2]
        assert store.list(limit=2, offset=2) == ordered[2:4]
        assert store.list(limit=10, offset=4) == ordered[4:]
        assert store.list(limit=0) == []

    def test_listing_filters_by_states_and_each_field(self, store: RecordStore) -> None:
        a = sample_record(
            state=State.RUNNING,
            owner="a",
            user_id="u1",
            experiment_id="e1",
            namespace="n1",
            cluster="c1",
            image="img:1",
        )
        b = sample_record(
            state=State.STOPPED,
            owner="b",
            user_id="u2",
            experiment_id="e2",
            namespace="n2",
            cluster="c2",
            image="img:2",
            create_time=T0 + timedelta(seconds=1),
        )
        c = sample_record(state=State.DELETED, owner="a", create_time=T0 + timedelta(seconds=2))
        for record in (a, b, c):
            store.put(record)
        assert store.list(states=[State.RUNNING, State.STOPPED]) == [a, b]
        assert store.list(states=[State.DELETED]) == [c]
        assert store.list(states=[]) == []
        assert store.count(states=[]) == 0
        for field in FILTER_FIELDS:
            value = "stopped" if field == "state" else _field_value(b, field)
            assert store.list(filters={field: value}) == [b], field
            assert store.count(filters={field: value}) == 1, field
        assert store.list(filters={"owner": "a"}) == [a, c]
        assert store.list(states=[State.RUNNING], filters={"owner": "a"}) == [a]
        assert store.list(filters={"owner": "a", "user_id": "u1"}) == [a]
        assert store.list(filters={"owner": "nobody"}) == []
        assert store.count(states=[State.RUNNING, State.DELETED], filters={"owner": "a"}) == 2

    def test_an_unknown_filter_is_refused(self, store: RecordStore) -> None:
        for call in (store.list, store.count):
            with pytest.raises(ValueError, match="cannot filter sandboxes on 'rocklet_token'"):
                call(filters={"rocklet_token": "x"})
        with pytest.raises(ValueError, match="cannot filter"):
            store.list(filters={"owner = owner OR 1=1 --": "x"})

    def test_counts_match_the_listings(self, store: RecordStore) -> None:
        states = [State.PENDING, State.RUNNING, State.RUNNING, State.STOPPED, State.DELETED]
        for i, state in enumerate(states):
            store.put(sample_record(state=state, create_time=T0 + timedelta(seconds=i)))
        assert store.count() == len(store.list()) == 5
        assert store.count(states=[State.RUNNING]) == 2
        assert store.count_by_state() == {
            State.PENDING: 1,
            State.RUNNING: 2,
            State.STOPPED: 1,
            State.DELETED: 1,
        }

    def test_known_records_are_taken_instead_of_the_stored_ones(self, store: RecordStore) -> None:
        first, second = sample_record(), sample_record(create_time=T0 + timedelta(seconds=1))
        store.put(first)
        store.put(second)
        mine = attrs.evolve(first, reason="the engine's own copy")
        asked: list[str] = []

        def known(sandbox_id: str) -> SandboxRecord | None:
            asked.append(sandbox_id)
            return mine if sandbox_id == first.sandbox_id else None

        assert store.list(known=known) == [mine, second]
        assert asked == [first.sandbox_id, second.sandbox_id]

    # -- purging -----------------------------------------------------------------------------

    def test_purge_drops_only_rows_deleted_before_the_time(self, store: RecordStore) -> None:
        old = attrs.evolve(sample_record(state=State.DELETED), delete_time=T0)
        recent = attrs.evolve(
            sample_record(state=State.DELETED), delete_time=T0 + timedelta(days=2)
        )
        running = sample_record(state=State.RUNNING)
        for record in (old, recent, running):
            store.put(record)
        assert store.purge_deleted(T0 + timedelta(days=1)) == 1
        assert store.get(old.sandbox_id) is None
        assert store.get(recent.sandbox_id) == recent
        assert store.get(running.sandbox_id) == running
        assert store.purge_deleted(T0 + timedelta(days=1)) == 0

    # -- threads -----------------------------------------------------------------------------

    def test_concurrent_writers_and_readers_from_threads_lose_nothing(
        self, store: RecordStore
    ) -> None:
        failures: list[BaseException] = []
        written: dict[str, SandboxRecord] = {}
        lock = threading.Lock()
        start = threading.Barrier(self.threads)

        def writer(n: int) -> None:
            try:
                start.wait()
                for i in range(self.puts_per_thread):
                    record = sample_record(
                        owner=f"thread-{n}", create_time=T0 + timedelta(microseconds=i)
                    )
                    store.put(record)
                    assert store.get(record.sandbox_id) == record
                    store.count(filters={"owner": f"thread-{n}"})
                    store.list(states=[State.RUNNING], limit=5)
                    with lock:
                        written[record.sandbox_id] = record
            except BaseException as exc:  # reported below, with the thread's number
                failures.append(exc)

        workers = [threading.Thread(target=writer, args=(n,)) for n in range(self.threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        assert failures == []
        assert store.count() == len(written) == self.threads * self.puts_per_thread
        for n in range(self.threads):
            assert store.count(filters={"owner": f"thread-{n}"}) == self.puts_per_thread
        assert {r.sandbox_id: r for r in store.list()} == written

    def test_concurrent_updates_of_one_record_leave_one_whole_version(
        self, store: RecordStore
    ) -> None:
        record = sample_record()
        store.put(record)
        versions = [
            attrs.evolve(record, restart_count=n, reason=f"version {n}")
            for n in range(self.threads)
        ]
        failures: list[BaseException] = []

        def update(version: SandboxRecord) -> None:
            try:
                for _ in range(self.puts_per_thread):
                    store.put(version)
            except BaseException as exc:
                failures.append(exc)

        workers = [threading.Thread(target=update, args=(v,)) for v in versions]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        assert failures == []
        assert store.get(record.sandbox_id) in versions
        assert store.count() == 1

    # -- grouped commits (a store that can_group_commits) -------------------------------------

    def _grouping(self, store: RecordStore) -> RecordStore | None:
        """``store`` grouping its commits, and a second store on the same place (or ``None``)."""
        if not store.can_group_commits:
            pytest.skip(f"{type(store).__name__} does not group commits (can_group_commits)")
        store.group_commits = True
        return self.reopen(store)

    def test_grouped_puts_are_read_at_once_and_written_together_at_the_turns_end(
        self, store: RecordStore
    ) -> None:
        second = self._grouping(store)
        records = [sample_record() for _ in range(3)]

        async def turns() -> None:
            for record in records:  # the phases of a start, saved one after the other
                store.put(attrs.evolve(record, notes=("phase 1",)))
                store.put(record)
            assert [store.get(r.sandbox_id) for r in records] == records  # its own, at once
            if second is not None:
                assert second.get(records[0].sandbox_id) is None  # the turn goes on
            await asyncio.sleep(0)  # the turn ends: the group is written
            if second is not None:
                assert [second.get(r.sandbox_id) for r in records] == records
            later = attrs.evolve(records[0], state=State.STOPPED)
            store.put(later)
            store.commit()  # what the admin does before it answers
            if second is not None:
                assert second.get(later.sandbox_id) == later
            assert store.count() == 3
            assert store.count_by_state() == {State.RUNNING: 2, State.STOPPED: 1}

        try:
            asyncio.run(turns())
        finally:
            if second is not None:
                second.close()

    def test_a_listing_sees_the_puts_of_the_turn_so_far(self, store: RecordStore) -> None:
        self._close(self._grouping(store))
        record = sample_record()

        async def turn() -> None:
            store.put(record)
            assert store.list() == [record]
            assert store.count(states=[State.RUNNING]) == 1

        asyncio.run(turn())

    def test_a_grouped_put_from_another_thread_is_not_undone_by_the_loops_earlier_one(
        self, store: RecordStore
    ) -> None:
        second = self._grouping(store)
        record = sample_record()

        async def turns() -> None:
            store.put(attrs.evolve(record, reason="on the loop"))  # pending: the turn goes on
            await asyncio.to_thread(store.put, attrs.evolve(record, reason="from a thread"))
            await asyncio.sleep(0)
            store.commit()

        try:
            asyncio.run(turns())
            for reader in (store, second):
                found = reader.get(record.sandbox_id) if reader is not None else None
                assert reader is None or (found is not None and found.reason == "from a thread")
        finally:
            self._close(second)

    def test_closing_writes_what_a_group_has_pending(self, store: RecordStore) -> None:
        second = self._grouping(store)
        if second is None:
            return  # nothing outlives an in-memory store
        record = sample_record()

        async def put_and_close() -> None:
            store.put(record)
            store.close()  # before the turn's end

        try:
            asyncio.run(put_and_close())
            assert second.get(record.sandbox_id) == record
        finally:
            second.close()

    def test_progress_is_read_at_once_and_written_with_the_records_next_put(
        self, store: RecordStore
    ) -> None:
        second = self._grouping(store)
        record = sample_record()
        pending = attrs.evolve(record, state=State.PENDING, unit_id=None)
        progress = attrs.evolve(pending, unit_id="unit-1")

        async def turns() -> None:
            store.put(pending)
            store.commit()  # the start is answered: its pending record is written
            await asyncio.sleep(0)
            store.put_progress(progress)  # the unit made: kept in memory only
            await asyncio.sleep(0)
            store.commit()  # an answer: progress still not written
            assert store.get(record.sandbox_id) == progress
            if second is not None:
                assert second.get(record.sandbox_id) == pending  # what a crash would leave
            store.put(record)  # running: written, the progress with it
            store.commit()
            if second is not None:
                assert second.get(record.sandbox_id) == record

        try:
            asyncio.run(turns())
        finally:
            self._close(second)

    def test_progress_is_written_by_a_listing_a_count_and_the_close(
        self, store: RecordStore
    ) -> None:
        second = self._grouping(store)
        records = [attrs.evolve(sample_record(), state=State.PENDING) for _ in range(3)]

        async def turns() -> None:
            for record in records:
                store.put_progress(record)
            listed = store.list()  # in creation order: equal times, then by id
            assert listed == sorted(records, key=lambda r: r.sandbox_id)
            store.put_progress(attrs.evolve(records[1], unit_id="unit-2"))
            assert store.count(states=[State.PENDING]) == 3
            if second is not None:
                assert second.get(records[1].sandbox_id) == attrs.evolve(
                    records[1], unit_id="unit-2"
                )
            store.put_progress(attrs.evolve(records[2], unit_id="unit-3"))
            store.close()  # before the turn's end

        try:
            asyncio.run(turns())
            if second is not None:
                assert second.get(records[2].sandbox_id) == attrs.evolve(
                    records[2], unit_id="unit-3"
                )
        finally:
            self._close(second)

    @staticmethod
    def _close(store: RecordStore | None) -> None:
        if store is not None:
            store.close()


def _field_value(record: SandboxRecord, field: str) -> str:
    value = getattr(record, field) if field in ("owner", "state") else getattr(record.spec, field)
    return str(value)
