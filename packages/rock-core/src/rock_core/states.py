"""The sandbox lifecycle as one table, with no I/O (work in progress: see the table below)."""

from __future__ import annotations

import enum

__all__ = ["State", "Event"]


class State(str, enum.Enum):
    """ROCK's six lifecycle states of a sandbox."""

    PENDING = "pending"
    RUNNING = "running"
    STOPPED = "stopped"
    ARCHIVING = "archiving"
    ARCHIVED = "archived"
    DELETED = "deleted"


class Event(str, enum.Enum):
    """What can happen to a sandbox."""

    ALIVE = "alive"
    STOP = "stop"
    RESTART = "restart"
    ARCHIVE = "archive"
    ARCHIVE_DONE = "archive_done"
    ARCHIVE_FAILED = "archive_failed"
    RESTORE = "restore"
    RESTORE_FAILED = "restore_failed"
    DELETE = "delete"
