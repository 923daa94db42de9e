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

The store's ``write(records)`` writes the records durably, in one transaction (one SQLite commit;
one PostgreSQL round trip), or raises and writes none. Writes are made one at a time. A pending
put stays pending until its write has returned (so a read made meanwhile, which may not see an
unfinished write, still finds it), and after a failed write: the next commit tries again. A put
made during a write (from another thread's loop) is pending for the next one.

A store may also hand over ``write_soon(records)``: the same write, made in a thread of the
store's own after every write handed over before it, its future done once written (SQLite's:
its C code runs without the GIL, on another core than the event loop's). Then a group's writes
go through it, in the order handed over, one under way at a time: a turn's end hands its group
over and does not wait, or, while a write is under way, leaves it for the turn after that write
(the puts of the turns meanwhile join it: writes never queue up);
:meth:`~GroupedPuts.commit_async` (the admin's, before each answer) awaits the write under way
and then one carrying its puts; :meth:`~GroupedPuts.commit` and :meth:`~GroupedPuts.flush`
block until theirs is written. A put that is not grouped (write-through: the admin's store
while its engine opens and recovers) is written at once on its own thread with ``write``,
after every write handed over. A put being written stays pending (reads find it) and is not
handed over again; a failed write leaves its puts pending for the next commit, and a commit
that waited for it raises its error.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable

from rock_core.models import SandboxRecord

__all__ = ["GroupedPuts", "WriteSoon"]

log = logging.getLogger(__name__)


class GroupedPuts:
    """The pending puts of a store that groups its commits, and the writes that empty them.

    :param write: the store's write of some records (see the module), called from any thread,
        never two at once.
    :param store: the store, named in the warning of a write at a turn's end that failed.
    :param write_soon: the store's write made in its own thread (see the module), or ``None``.
    """

    __slots__ = (
        "_error",
        "_failures",
        "_groups",
        "_last",
        "_lock",
        "_pending",
        "_progress",
        "_scheduled",
        "_store",
        "_write",
        "_write_soon",
        "_writing",
        "_written",
    )

    def __init__(
        self,
        write: Callable[[list[SandboxRecord]], None],
        store: object,
        *,
        write_soon: WriteSoon | None = None,
    ) -> None:
        self._write = write
        self._write_soon = write_soon
        #: With ``write_soon``: the last write handed over (done: every one before it is), the
        #: puts handed over and not yet written (by id), the writes that failed and the error of
        #: the last one.
        self._last: concurrent.futures.Future[None] | None = None
        self._written: dict[str, SandboxRecord] = {}
        self._failures = 0
        self._error: BaseException | None = None
        #: Groups handed over so far (each: every pending put not being written then).
        self._groups = 0
        self._store = store
        # Guards _pending, _progress, _scheduled and, with write_soon, what it hands over
        # (reentrant: a write that ended at once settles in the thread that handed it over).
        self._lock = threading.RLock()
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
                if self._progress:
                    self._progress.pop(sandbox_id, None)
                if self._scheduled:
                    return
                self._scheduled = True
            loop.call_soon(self._commit_at_turn_end)
            return
        if self._write_soon is not None:
            # Written at once on the caller's thread (a thread round trip per put would slow
            # a write-through store, as the admin's is while it recovers), after every write
            # handed over; an older put of it, pending, must not win.
            with self._writing:
                with self._lock:
                    self._pending.pop(record.sandbox_id, None)
                    self._progress.pop(record.sandbox_id, None)
                    last = self._last
                if last is not None:
                    concurrent.futures.wait([last])
                self._write([record])
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
        if self._write_soon is not None:
            self._wait(*self._hand_over_pending(everything=False))
        elif self._pending:
            self._commit(everything=False)

    async def commit_async(self) -> None:
        """:meth:`commit`, awaited on the event loop instead of blocking it when the store
        writes in a thread of its own (``write_soon``): the pending puts are handed over, and
        every write handed over so far is awaited.

        :raises Exception: what a write awaited raised; its puts stay pending.
        """
        if self._write_soon is None:
            self.commit()
            return
        with self._lock:
            failures = self._failures
            mark = self._groups
        while True:
            # One write under way at a time (see _commit_at_turn_end): wait for it; a group
            # handed over since this call began carries its puts (all that were unwritten),
            # else hand over what is unwritten now and wait for that.
            with self._lock:
                last = self._last
                if last is None or last.done():
                    if not self._hand_over_unwritten(everything=False):
                        break
                    last = self._last
                covers = self._groups > mark
            assert last is not None
            # Its failure (settled first, in the store's thread) is counted, and raised below.
            waited = asyncio.wrap_future(last)
            waited.add_done_callback(_retrieved)
            await asyncio.wait([waited])
            if covers:
                break
        self._check(failures)

    def flush(self) -> None:
        """Write every pending put, those of progress too, in one write.

        :raises Exception: what the store's write raised; the puts stay pending.
        """
        if self._write_soon is not None:
            self._wait(*self._hand_over_pending(everything=True))
        elif self._pending or self._progress:
            self._commit(everything=True)

    # -- with write_soon: writes handed over to the store's thread -------------------------------

    def _hand_over_pending(
        self, *, everything: bool
    ) -> tuple[concurrent.futures.Future[None] | None, int]:
        """Hand the pending puts (but those of progress unless ``everything``) not already
        being written over; the last write handed over (``None``: none ever was) and the count
        of failed writes before it (a later count: one of them failed)."""
        with self._lock:
            failures = self._failures
            self._hand_over_unwritten(everything=everything)
            return self._last, failures

    def _hand_over_unwritten(self, *, everything: bool) -> bool:
        """Hand over, as one group, every pending put (those of progress too when
        ``everything``) not being written; whether there was any (``self._lock`` held)."""
        group = self._unwritten(everything=everything)
        if group:
            self._groups += 1
            self._hand_over(group)
        return bool(group)

    def _unwritten(self, *, everything: bool) -> list[SandboxRecord]:
        """The pending puts (those of progress too when ``everything``) not being written."""
        written = self._written
        group = [r for i, r in self._pending.items() if written.get(i) is not r]
        if everything:
            group.extend(r for i, r in self._progress.items() if written.get(i) is not r)
        return group

    def _hand_over(self, records: list[SandboxRecord]) -> concurrent.futures.Future[None]:
        """Hand ``records`` over to the store's thread (``self._lock`` held: the order handed
        over is the order written)."""
        assert self._write_soon is not None
        future = self._last = self._write_soon(records)
        for record in records:
            self._written[record.sandbox_id] = record
        future.add_done_callback(lambda done: self._settle(records, done))
        return future

    def _settle(
        self, records: list[SandboxRecord], future: concurrent.futures.Future[None]
    ) -> None:
        """A write handed over ended (in the store's thread): written puts leave the pending
        ones (unless put again meanwhile); a failed write's stay for the next commit."""
        error = future.exception()
        with self._lock:
            for record in records:
                sandbox_id = record.sandbox_id
                if self._written.get(sandbox_id) is record:
                    del self._written[sandbox_id]
                if error is None:
                    if self._pending.get(sandbox_id) is record:
                        del self._pending[sandbox_id]
                    elif self._progress.get(sandbox_id) is record:
                        del self._progress[sandbox_id]
            if error is not None:
                self._failures += 1
                self._error = error
        if error is not None:
            log.warning("%r: writing %d records failed: %s", self._store, len(records), error)

    def _wait(self, last: concurrent.futures.Future[None] | None, failures: int) -> None:
        """Block until ``last`` (and so every write before it) is written; raise when one
        handed over since ``failures`` was counted failed."""
        if last is not None:
            concurrent.futures.wait([last])
        self._check(failures)

    def _check(self, failures: int) -> None:
        if self._failures != failures:
            raise self._error or RuntimeError("the write failed")

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

    def _commit_at_turn_end(self) -> None:
        with self._lock:
            self._scheduled = False
        if self._write_soon is not None:  # a failure is logged as the write ends
            self._hand_over_when_idle()
            return
        try:
            self.commit()
        except Exception as exc:  # kept pending: the next commit (before an answer) tries again
            log.warning("%r: writing %d records failed: %s", self._store, len(self._pending), exc)

    def _hand_over_when_idle(self) -> None:
        """A turn's end with ``write_soon``: hand the pending puts over unless a write is under
        way; then once it has ended (one turn-end hand-over waits at a time, and the puts made
        meanwhile join it). Writes do not queue up behind each other: each carries what
        gathered while the last was made (a record put again meanwhile, once), and an answer
        waits for one write at most before its own."""
        with self._lock:
            last = self._last
            if last is None or last.done():
                self._hand_over_unwritten(everything=False)
                return
            if self._scheduled:
                return
            self._scheduled = True  # the puts meanwhile schedule nothing more
            loop = asyncio.get_running_loop()
        last.add_done_callback(lambda _done: self._again_at_turn_end(loop))

    def _again_at_turn_end(self, loop: asyncio.AbstractEventLoop) -> None:
        """(In the store's thread, as a write ends.) The turn-end hand-over that waited."""
        try:
            loop.call_soon_threadsafe(self._commit_at_turn_end)
        except RuntimeError:  # the loop is closed: the next put, commit or flush writes them
            with self._lock:
                self._scheduled = False


#: A store's write made in its own thread: the future is done once the records are written.
WriteSoon = Callable[[list[SandboxRecord]], concurrent.futures.Future[None]]


def _retrieved(future: asyncio.Future[None]) -> None:
    """Take a finished future's exception (raised by the commit that awaited it, not logged
    as one nobody retrieved)."""
    if not future.cancelled():
        future.exception()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    """The loop running in this thread, or ``None``."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
