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
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable

from rock_core.models import SandboxRecord

__all__ = ["GroupedPuts"]

log = logging.getLogger(__name__)


class GroupedPuts:
    """The pending puts of a store that groups its commits, and the writes that empty them.

    :param write: the store's write of some records (see the module), called from any thread,
        never two at once.
    :param store: the store, named in the warning of a write at a turn's end that failed.
    """

    __slots__ = ("_lock", "_pending", "_progress", "_scheduled", "_store", "_write", "_writing")

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

    def _commit_at_turn_end(self) -> None:
        with self._lock:
            self._scheduled = False
        try:
            self.commit()
        except Exception as exc:  # kept pending: the next commit (before an answer) tries again
            log.warning("%r: writing %d records failed: %s", self._store, len(self._pending), exc)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    """The loop running in this thread, or ``None``."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
