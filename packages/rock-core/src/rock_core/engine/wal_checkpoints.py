"""Checkpoints of a SQLite store's write-ahead log in a thread of their own
(:class:`Checkpointer`), instead of in the commit that crosses SQLite's threshold.

In WAL mode a commit appends the pages it changed to the log; a checkpoint copies the log's
pages back into the database file and syncs that file to disk. SQLite's default makes the
checkpoint inside the commit that brings the log past 1,000 pages, on the committing thread:
the engine's event loop, which then waited for the disk. In a burst of 16,000 starts at once a
checkpoint came several times a second, about 17 us a start waited for the file's sync on top of
4 us of copying (a start's two writes cost 53 us with them, 32 without).

The store turns SQLite's own checkpoints off (``wal_autocheckpoint=0``) and a :class:`Checkpointer`
makes a passive one (which never waits for readers or writers) every :data:`INTERVAL` seconds on
a connection of its own; SQLite releases the GIL while it copies and syncs, so the loop runs
meanwhile. The log grows by what a second of writes adds between two checkpoints, and SQLite
starts it over once one has copied it all. Nothing changes for a crash: a commit is in the log
before it returns either way.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from pathlib import Path

__all__ = ["INTERVAL", "Checkpointer"]

log = logging.getLogger(__name__)

#: Seconds between two checkpoints.
INTERVAL = 1.0


class Checkpointer:
    """Passive checkpoints of the SQLite database at ``path`` every ``interval`` seconds, in a
    daemon thread, until :meth:`stop`."""

    def __init__(self, path: Path, interval: float = INTERVAL) -> None:
        self.path = path
        self.interval = interval
        #: Checkpoints made so far (for tests and figures).
        self.made = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"rock-wal-checkpoints {path.name}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """End the thread (after the checkpoint under way, if any). Idempotent."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        try:
            db = sqlite3.connect(str(self.path), check_same_thread=False)
        except sqlite3.Error as exc:  # the store's own connection reports such a file
            log.warning("%s: no checkpoints of its log: %s", self.path, exc)
            return
        try:
            while not self._stop.wait(self.interval):
                self.checkpoint(db)
        finally:
            db.close()

    def checkpoint(self, db: sqlite3.Connection) -> None:
        """One passive checkpoint on ``db`` (a failure is logged: the next one tries again)."""
        try:
            db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except sqlite3.Error as exc:
            log.warning("%s: a checkpoint of its log failed: %s", self.path, exc)
            return
        self.made += 1
