"""The grouping of a record store's puts by event-loop turn (:attr:`RecordStore.group_commits
<rock_core.records.RecordStore.group_commits>`): :class:`GroupedPuts`, which a store that can
group hands its write to (SQLite's and PostgreSQL's do).

A store keeps one, and calls it from each of its calls:

- :meth:`~GroupedPuts.put` with every put: made on an event loop while the store groups, the put
  is kept pending (the last put of each record), and one write of all pending puts is scheduled
  at the end of the loop's turn; else it is written at once (an older pending put of the same
  record dropped first, so it never lands after it);
- :meth:`~GroupedPuts.pending` first in ``get``: a pending put is the answer;
- :meth:`~GroupedPuts.commit` in the store's ``commit``;
- :meth:`~GroupedPuts.flush` in its ``close``, and before any listing or count, so these see
  every put, progress too.

A put of progress (:meth:`~GroupedPuts.put` with ``progress``, the store's ``put_progress``: a
step of a start within ``pending`` that a restart finds again without it) is kept pending and
schedules no write: a commit leaves it pending, and it is written by the write of a later put of
its record (which replaces it), or by a flush. A put of progress over a record's pending put that
is not progress replaces it as one that is not (the earlier one must still be written).

A store that gives its write in two halves, ``rows(records)`` (the rows' values, made on the
event loop) and ``write_rows(rows)`` (the database's work), may have a writer thread make the
second (:meth:`GroupedPuts.write_in_background`, which the admin asks of a SQLite file): a turn's
end then makes the rows of its puts and hands them to the writer, and whoever must not answer
before its puts are durable awaits :meth:`GroupedPuts.committed`. The database's own work
(SQLite's statements and commit, which release the GIL) is made beside the event loop instead of
in its time. The writer writes the groups in the order they were handed over, and of each put
its record's pending put at that moment: a newer one when the record was put again since (its
waiters were told of the older one), none when it was written since (by a commit, or a put from
another thread), so an older version never lands after a newer one.

The store's ``write(records)`` writes the records durably, in one transaction (one SQLite commit;
one PostgreSQL round trip), or raises and writes none. Writes are made one at a time. A pending
put stays pending until its write has returned (so a read made meanwhile, which may not see an
unfinished write, still finds it), and after a failed write: the next commit tries again. A put
made during a write (from another thread's loop) is pending for the next one.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any

from rock_core.models import SandboxRecord

__all__ = ["GroupedPuts"]

log = logging.getLogger(__name__)


class GroupedPuts:
    """The pending puts of a store that groups its commits, and the writes that empty them.

    :param write: the store's write of some records (see the module), called from any thread,
        never two at once.
    :param store: the store, named in the warning of a write at a turn's end that failed.
    """

    __slots__ = (
        "_handed",
        "_lock",
        "_made",
        "_pending",
        "_progress",
        "_queue",
        "_rows",
        "_scheduled",
        "_store",
        "_thread",
        "_waiters",
        "_write",
        "_write_rows",
        "_writing",
    )

    def __init__(self, write: Callable[[list[SandboxRecord]], None], store: object) -> None:
        self._write = write
        self._store = store
        self._lock = threading.Lock()  # guards _pending and _scheduled
        # One write at a time: a put made off the loop waits for a group being written, so an
        # older version of its record never lands after it.
        self._writing = threading.Lock()
        #: The group's puts not written yet, by id (the last put of each).
        self._pending: dict[str, SandboxRecord] = {}
        #: The puts of progress not written yet, by id (written by a flush, or replaced by
        #: their record's next put that is not): an id is in one of the two at most.
        self._progress: dict[str, SandboxRecord] = {}
        # A write is scheduled at the end of a loop's turn: one at a time, so that a commit made
        # before an answer does not make the next puts schedule one each (the turn-end writes of
        # many tasks interleaved with their steps: one write per put, not one per turn).
        self._scheduled = False
        # The writer thread's (write_in_background): the two halves of the store's write, the
        # groups handed over and not written yet, the pending puts they hold, the puts made so
        # far (what a waiter of committed() waits for) and those waiters.
        self._rows: Callable[[list[SandboxRecord]], list[Any]] | None = None
        self._write_rows: Callable[[list[Any]], None] | None = None
        self._thread: threading.Thread | None = None
        self._queue: queue.SimpleQueue[_Group | None] = queue.SimpleQueue()
        self._handed: dict[str, SandboxRecord] = {}
        self._made = 0
        self._waiters: list[tuple[int, asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    def __len__(self) -> int:
        """How many records are pending."""
        return len(self._pending) + len(self._progress)

    def put(self, record: SandboxRecord, *, group: bool, progress: bool = False) -> None:
        """Keep ``record`` for the write at the end of the running loop's turn when ``group``
        (the store's :attr:`~rock_core.records.RecordStore.group_commits`) and a loop runs in
        this thread; else write it now. ``progress``: kept pending without a write of its own
        (see the module), when grouped."""
        loop = _running_loop() if group else None
        if loop is not None:
            sandbox_id = record.sandbox_id
            with self._lock:
                if progress and sandbox_id not in self._pending:
                    self._progress[sandbox_id] = record
                    return
                self._pending[sandbox_id] = record
                self._made += 1
                if self._progress:
                    self._progress.pop(sandbox_id, None)
                if self._scheduled:
                    return
                self._scheduled = True
            loop.call_soon(self._commit_at_turn_end)
            return
        with self._writing:
            if self._pending or self._progress:
                with self._lock:  # an older put of it, pending, must not win
                    self._pending.pop(record.sandbox_id, None)
                    self._progress.pop(record.sandbox_id, None)
            self._write([record])

    def pending(self, sandbox_id: str) -> SandboxRecord | None:
        """The pending put of ``sandbox_id``, or ``None``."""
        found = self._pending.get(sandbox_id)
        return self._progress.get(sandbox_id) if found is None and self._progress else found

    def commit(self) -> None:
        """Write the pending puts but those of progress in one write (nothing when none is
        pending).

        :raises Exception: what the store's write raised; the puts stay pending.
        """
        if self._pending:
            self._commit(everything=False)

    def flush(self) -> None:
        """Write every pending put, those of progress too, in one write.

        :raises Exception: what the store's write raised; the puts stay pending.
        """
        if self._pending or self._progress:
            self._commit(everything=True)

    def _commit(self, *, everything: bool) -> None:
        with self._writing:
            with self._lock:  # kept there until written: what reads find
                pending = dict(self._pending)
                if everything:
                    pending.update(self._progress)  # no id is in both
            if not pending:
                return
            self._write(list(pending.values()))
            with self._lock:
                for sandbox_id, record in pending.items():
                    # Not put again meanwhile (a put of progress over one pending is kept there).
                    if self._pending.get(sandbox_id) is record:
                        del self._pending[sandbox_id]
                    elif self._progress.get(sandbox_id) is record:
                        del self._progress[sandbox_id]

    # -- the writer thread --------------------------------------------------------------------

    def write_in_background(
        self,
        rows: Callable[[list[SandboxRecord]], list[Any]],
        write_rows: Callable[[list[Any]], None],
    ) -> None:
        """Have a thread of this group's write the loop's puts (see the module): ``rows`` makes
        the rows of some records (on the loop), ``write_rows`` writes and commits them in one
        transaction or raises (in the writer thread). Once only."""
        if self._thread is not None:
            raise RuntimeError("this group writes in the background already")
        self._rows, self._write_rows = rows, write_rows
        self._thread = threading.Thread(target=self._writer, name="rock-record-writer", daemon=True)
        self._thread.start()

    @property
    def in_background(self) -> bool:
        """Whether a writer thread writes the loop's puts (:meth:`write_in_background`)."""
        return self._thread is not None

    async def committed(self) -> None:
        """Return once every put made so far, but those of progress, is durable: written by the
        writer thread (this loop runs meanwhile), or now (:meth:`commit`) without one.

        :raises Exception: what the store's write raised; the puts stay pending.
        """
        if self._thread is None:
            self.commit()
            return
        loop = asyncio.get_running_loop()
        with self._lock:
            if not self._pending:
                return
            future: asyncio.Future[None] = loop.create_future()
            self._waiters.append((self._made, loop, future))
        self._hand_over()  # this turn's puts too, without waiting for its end
        await future

    def stop(self) -> None:
        """End the writer thread once it has written what was handed to it, write what is
        pending still (:meth:`flush`), and answer whoever waits. Idempotent.

        :raises Exception: what the store's last write raised (the waiters get it too).
        """
        thread = self._thread
        if thread is None or not thread.is_alive():
            return
        self._queue.put(None)
        thread.join()
        error: Exception | None = None
        try:
            self.flush()
        except Exception as exc:
            error = exc
        with self._lock:
            waiters, self._waiters = self._waiters, []
        _answer(waiters, error)
        if error is not None:
            raise error

    def _hand_over(self) -> None:
        """Hand the pending puts not handed over yet to the writer, as one group with its rows."""
        assert self._rows is not None
        with self._lock:
            handed = self._handed
            group = [(i, r) for i, r in self._pending.items() if handed.get(i) is not r]
            handed.update(group)
            made = self._made
        if group:
            self._queue.put(_Group(group, self._rows([record for _, record in group]), made))
        elif self._waiters:
            self._queue.put(_Group([], [], made))  # answers those who wait (all written)

    def _writer(self) -> None:
        """The writer thread: write each group handed over, in order, then answer the waiters
        whose puts it held."""
        assert self._write_rows is not None
        while (group := self._queue.get()) is not None:
            error: Exception | None = None
            with self._writing:
                writes = self._current(group)
                try:
                    if writes:
                        self._write_rows([row for _, _, row in writes])
                except Exception as exc:  # kept pending: handed over again next time
                    error = exc
                    log.warning("%r: writing %d records failed: %s", self._store, len(writes), exc)
                with self._lock:
                    for sandbox_id, record, _ in writes:
                        if error is None and self._pending.get(sandbox_id) is record:
                            del self._pending[sandbox_id]
                    for sandbox_id, record in group.puts:
                        if self._handed.get(sandbox_id) is record:
                            del self._handed[sandbox_id]
                    # A failed group fails every waiter: a later group may lack its puts.
                    made = group.made if error is None else self._made
                    answered = [w for w in self._waiters if w[0] <= made]
                    self._waiters = [w for w in self._waiters if w[0] > made]
            _answer(answered, error)

    def _current(self, group: _Group) -> list[tuple[str, SandboxRecord, Any]]:
        """What the writer writes of ``group``: each record's pending put now, with its row (made
        here when the record was put again since the group was handed over: its waiters were
        told of the older put, which must not be lost); none for a record no longer pending
        (written since)."""
        assert self._rows is not None
        writes: list[tuple[str, SandboxRecord, Any]] = []
        newer: list[tuple[str, SandboxRecord]] = []
        with self._lock:
            for (sandbox_id, record), row in zip(group.puts, group.rows, strict=True):
                now = self._pending.get(sandbox_id)
                if now is record:
                    writes.append((sandbox_id, record, row))
                elif now is not None:
                    newer.append((sandbox_id, now))
        if newer:
            rows = self._rows([record for _, record in newer])
            writes += [(i, r, row) for (i, r), row in zip(newer, rows, strict=True)]
        return writes

    def _commit_at_turn_end(self) -> None:
        with self._lock:
            self._scheduled = False
        if self._thread is not None:
            self._hand_over()
            return
        try:
            self.commit()
        except Exception as exc:  # kept pending: the next commit (before an answer) tries again
            log.warning("%r: writing %d records failed: %s", self._store, len(self._pending), exc)


class _Group:
    """A group of pending puts handed to the writer thread: the puts, their rows, and how many
    puts were made when it was handed over."""

    __slots__ = ("made", "puts", "rows")

    def __init__(self, puts: Sequence[tuple[str, SandboxRecord]], rows: list[Any], made: int):
        self.puts, self.rows, self.made = puts, rows, made


def _answer(
    waiters: list[tuple[int, asyncio.AbstractEventLoop, asyncio.Future[None]]],
    error: Exception | None,
) -> None:
    """Settle the futures of ``waiters`` on their loops (one call a loop), with ``error`` if any."""
    by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}
    for _, loop, future in waiters:
        by_loop.setdefault(loop, []).append(future)
    for loop, futures in by_loop.items():
        try:
            loop.call_soon_threadsafe(_settle, futures, error)
        except RuntimeError:  # that loop is closed: nobody waits any more
            pass


def _settle(futures: list[asyncio.Future[None]], error: Exception | None) -> None:
    for future in futures:
        if not future.done():  # a waiter cancelled meanwhile
            if error is None:
                future.set_result(None)
            else:
                future.set_exception(error)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    """The loop running in this thread, or ``None``."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
