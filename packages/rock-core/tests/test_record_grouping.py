"""GroupedPuts, the per-loop-turn grouping both grouping stores (SQLite, PostgreSQL) hand their
writes to: what the record-store conformance suite cannot see from outside a store (how many
writes, what each holds, a put made while a write is under way, a write that fails)."""

from __future__ import annotations

import asyncio
import logging
import threading

import attrs
import pytest

from rock_core.models import SandboxRecord
from rock_core.record_grouping import GroupedPuts
from rock_core.testing.record_conformance import sample_record


class _Writes:
    """A store's write that records what it was given; ``fail`` makes the next ones raise."""

    def __init__(self) -> None:
        self.made: list[list[SandboxRecord]] = []
        self.fail = 0

    def __call__(self, records: list[SandboxRecord]) -> None:
        if self.fail:
            self.fail -= 1
            raise OSError("the disk is full")
        self.made.append(records)


def test_the_puts_of_one_loop_turn_are_one_write_of_the_last_put_of_each_record() -> None:
    writes = _Writes()
    puts = GroupedPuts(writes, "store")
    records = [sample_record(f"sb-{n}") for n in range(10)]

    async def turn() -> None:
        for phase in range(5):  # each start saved five times in the turn
            for record in records:
                puts.put(attrs.evolve(record, notes=(f"phase {phase}",)), group=True)
        assert writes.made == []  # the turn goes on
        await asyncio.sleep(0)  # its end

    asyncio.run(turn())
    assert len(writes.made) == 1
    assert [(r.sandbox_id, r.notes) for r in writes.made[0]] == [
        (r.sandbox_id, ("phase 4",)) for r in records
    ]
    assert len(puts) == 0


def test_a_put_made_while_a_group_is_written_lands_in_the_next_write() -> None:
    writing, release = threading.Event(), threading.Event()
    made: list[list[str | None]] = []

    def write(records: list[SandboxRecord]) -> None:
        made.append([r.reason for r in records])
        if len(made) == 1:  # the first write takes its time (a round trip to a slow server)
            writing.set()
            assert release.wait(30)

    puts = GroupedPuts(write, "store")
    first = attrs.evolve(sample_record("sb-1"), reason="first")

    async def first_turn() -> None:  # on another thread's loop
        puts.put(first, group=True)
        await asyncio.sleep(0)  # its turn's end: the write that takes its time

    other = threading.Thread(target=asyncio.run, args=(first_turn(),))
    other.start()

    async def turn_during_the_write() -> None:
        assert await asyncio.to_thread(writing.wait, 30)
        assert puts.pending("sb-1") is first  # pending while it is written: reads find it
        puts.put(attrs.evolve(first, reason="again"), group=True)
        puts.put(attrs.evolve(sample_record("sb-2"), reason="new"), group=True)
        release.set()
        await asyncio.sleep(0)  # this turn's end: a write of its own, after the first

    try:
        asyncio.run(turn_during_the_write())
    finally:
        release.set()
        other.join()
    assert made == [["first"], ["again", "new"]]  # the first write did not drop "again"
    assert len(puts) == 0


def test_a_failed_write_keeps_the_puts_for_the_next_commit(
    caplog: pytest.LogCaptureFixture,
) -> None:
    writes = _Writes()
    puts = GroupedPuts(writes, "the store")
    record = sample_record("sb-1")

    async def turn() -> None:
        puts.put(record, group=True)
        writes.fail = 2
        await asyncio.sleep(0)  # the turn's end: its write fails, and says so
        with pytest.raises(OSError, match="the disk is full"):
            puts.commit()  # the admin's commit before an answer: the error reaches it
        assert puts.pending("sb-1") is record
        puts.commit()  # the next one writes it

    with caplog.at_level(logging.WARNING, logger="rock_core.record_grouping"):
        asyncio.run(turn())
    assert writes.made == [[record]]
    assert "'the store': writing 1 records failed: the disk is full" in caplog.text
    assert len(puts) == 0


def test_a_put_off_the_loop_is_written_at_once_without_the_older_pending_one() -> None:
    writes = _Writes()
    puts = GroupedPuts(writes, "store")
    record = attrs.evolve(sample_record("sb-1"), reason="on the loop")
    newer = attrs.evolve(record, reason="from a thread")

    async def turn() -> None:
        puts.put(record, group=True)
        puts.put(sample_record("sb-2"), group=True)
        thread = threading.Thread(target=puts.put, args=(newer,), kwargs={"group": True})
        thread.start()  # no loop runs in that thread
        thread.join()  # (within this turn)
        assert writes.made == [[newer]]
        await asyncio.sleep(0)

    asyncio.run(turn())
    assert [[r.sandbox_id for r in group] for group in writes.made] == [["sb-1"], ["sb-2"]]
    puts.put(record, group=False)  # not grouping: at once, on a loop or not
    assert writes.made[-1] == [record]


def test_a_put_of_progress_waits_for_its_records_next_put_and_is_read_meanwhile() -> None:
    writes = _Writes()
    puts = GroupedPuts(writes, "store")
    record = sample_record("sb-1")
    pending = attrs.evolve(record, reason="pending")
    progress = attrs.evolve(record, reason="unit made")

    async def turns() -> None:
        puts.put(pending, group=True)
        await asyncio.sleep(0)  # written at its turn's end
        puts.put(progress, group=True, progress=True)
        await asyncio.sleep(0)  # no write of its own
        puts.commit()  # an answer: not written either
        assert puts.pending("sb-1") is progress
        assert len(puts) == 1
        puts.put(record, group=True)  # the next put: written, replacing it
        await asyncio.sleep(0)

    asyncio.run(turns())
    assert [[r.reason for r in made] for made in writes.made] == [["pending"], [record.reason]]
    assert len(puts) == 0


def test_a_put_of_progress_over_a_pending_put_is_written_at_the_turns_end() -> None:
    writes = _Writes()
    puts = GroupedPuts(writes, "store")
    first, progress = sample_record("sb-1"), sample_record("sb-2")

    async def turn() -> None:
        puts.put(attrs.evolve(first, reason="pending"), group=True)
        puts.put(attrs.evolve(first, reason="unit made"), group=True, progress=True)
        puts.put(attrs.evolve(progress, reason="progress only"), group=True, progress=True)
        await asyncio.sleep(0)

    asyncio.run(turn())
    # The pending record must still be written: as its latest put. The other waits.
    assert [[r.reason for r in made] for made in writes.made] == [["unit made"]]
    assert puts.pending("sb-2") is not None
    puts.flush()  # a listing's, or the close's: everything
    assert [[r.reason for r in made] for made in writes.made][-1] == ["progress only"]
    assert len(puts) == 0


def test_a_put_of_progress_off_a_loop_or_ungrouped_is_written_at_once() -> None:
    writes = _Writes()
    puts = GroupedPuts(writes, "store")
    puts.put(sample_record("sb-1"), group=True, progress=True)  # no loop runs here

    async def turn() -> None:
        puts.put(sample_record("sb-2"), group=False, progress=True)

    asyncio.run(turn())
    assert [[r.sandbox_id for r in made] for made in writes.made] == [["sb-1"], ["sb-2"]]
    assert len(puts) == 0
