"""envd's directory watching (``WatchDir``, and ``CreateWatcher``/``GetWatcherEvents``/
``RemoveWatcher`` that E2B's sync SDK polls) on rock: the admin lists the directory in the
sandbox (``find``, through its rocklet) every :data:`INTERVAL` seconds and reports what changed
between two listings: ``create`` (a new path), ``remove`` (a path gone), ``write`` (size or
modification time changed), ``chmod`` (mode changed). Changes that undo each other within one
interval are not seen, and a rename shows as a remove and a create: rock's rocklet has no
inotify to report them one by one.

What one caller may make the admin do is bounded: at most :data:`MAX_WATCHERS` watchers and
``WatchDir`` streams at once per sandbox, :data:`MAX_PATHS` paths in a watched tree, and
:data:`MAX_UNREAD` events waiting for ``GetWatcherEvents`` (past it the watcher fails, saying so).
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator
from typing import Any

from connectrpc.code import Code
from connectrpc.errors import ConnectError

from rock_e2b.dataplane import Target
from rock_e2b.envd.filesystem import filesystem_pb as pb

__all__ = [
    "INTERVAL",
    "MAX_PATHS",
    "MAX_UNREAD",
    "MAX_WATCHERS",
    "Watcher",
    "create",
    "events",
    "remove",
    "stream",
]

#: Seconds between two listings of a watched directory.
INTERVAL = 0.25
#: Watchers and ``WatchDir`` streams of one sandbox at once (each is a listing every INTERVAL).
MAX_WATCHERS = 16
#: Paths of one watched tree (a listing is held by the admin between two intervals).
MAX_PATHS = 100_000
#: Events a watcher keeps for ``GetWatcherEvents``.
MAX_UNREAD = 10_000
#: A watcher nobody asked for events for this long is dropped (its sandbox is left alone).
_IDLE = 600.0
_FORMAT = "%y\\t%s\\t%m\\t%T@\\t%P\\0"
_KEEPALIVE = 30.0

Listing = dict[str, tuple[str, str, str, str]]


async def listing(where: Target, path: str, recursive: bool) -> Listing:
    """Every path under ``path``: its (type, size, mode, mtime)."""
    from rock_e2b.filesystem import run, stat_path

    entry = await stat_path(where, path)
    if entry.type != pb.FileType.DIRECTORY:
        raise ConnectError(Code.INVALID_ARGUMENT, f"path {path!r} is not a directory")
    depth = [] if recursive else ["-maxdepth", "1"]
    argv = ["find", path, "-mindepth", "1", *depth, "-printf", _FORMAT]
    code, out, err = await run(where, argv)
    if code != 0 and not out:  # a file removed while find walked is not a failure
        raise ConnectError(Code.INTERNAL, f"path {path!r}: {err.strip() or 'find failed'}")
    found: Listing = {}
    for line in out.split("\0"):
        if line:
            kind, size, mode, mtime, name = line.split("\t", 4)
            found[name] = (kind, size, mode, mtime)
    if len(found) > MAX_PATHS:
        raise ConnectError(
            Code.RESOURCE_EXHAUSTED,
            f"path {path!r}: {len(found)} paths to watch, rock watches at most {MAX_PATHS}",
        )
    return found


def changes(old: Listing, new: Listing) -> list[pb.FilesystemEvent]:
    """The events between two listings, in path order."""
    found = []
    for name in sorted(old.keys() | new.keys()):
        before, after = old.get(name), new.get(name)
        if before is None:
            kind = pb.EventType.CREATE
        elif after is None:
            kind = pb.EventType.REMOVE
        elif before[1] != after[1] or before[3] != after[3]:
            kind = pb.EventType.WRITE
        elif before[2] != after[2]:
            kind = pb.EventType.CHMOD
        else:
            continue
        found.append(pb.FilesystemEvent(name=name, type=kind))
    return found


class Watcher:
    """One ``CreateWatcher``'s directory, listed by a task of its own; its events wait for
    ``GetWatcherEvents``."""

    def __init__(self, where: Target, path: str, recursive: bool, first: Listing) -> None:
        self.id = secrets.token_hex(8)
        self.where = where
        self.path = path
        self.recursive = recursive
        self.pending: list[pb.FilesystemEvent] = []
        self.failure: str | None = None
        self.asked = time.monotonic()
        self.task = asyncio.get_running_loop().create_task(self._poll(first))

    async def _poll(self, last: Listing) -> None:
        try:
            while time.monotonic() - self.asked < _IDLE:
                await asyncio.sleep(INTERVAL)
                now = await listing(self.where, self.path, self.recursive)
                self.pending += changes(last, now)
                last = now
                if len(self.pending) > MAX_UNREAD:
                    self.failure = (
                        f"more than {MAX_UNREAD} events unread: GetWatcherEvents was not asked "
                        "often enough"
                    )
                    return
        except ConnectError as exc:
            self.failure = exc.message
        except Exception as exc:  # the sandbox went away: said on the next GetWatcherEvents
            self.failure = f"{type(exc).__name__}: {exc}"
        finally:
            _watchers.pop(self.key, None)

    @property
    def key(self) -> tuple[str, str]:
        return (self.where.sandbox_id, self.id)


_watchers: dict[tuple[str, str], Watcher] = {}
#: ``WatchDir`` streams open, by sandbox id.
_streams: dict[str, int] = {}


def _check_room(where: Target) -> None:
    """:raises ConnectError: the sandbox has :data:`MAX_WATCHERS` watchers and streams."""
    sandbox_id = where.sandbox_id
    used = sum(1 for key in _watchers if key[0] == sandbox_id) + _streams.get(sandbox_id, 0)
    if used >= MAX_WATCHERS:
        raise ConnectError(
            Code.RESOURCE_EXHAUSTED,
            f"sandbox {sandbox_id}: at most {MAX_WATCHERS} directory watchers at once; stop one "
            "first",
        )


async def create(where: Target, path: str, recursive: bool) -> str:
    _check_room(where)
    first = await listing(where, path, recursive)
    _check_room(where)  # others made meanwhile
    watcher = Watcher(where, path, recursive, first)
    _watchers[watcher.key] = watcher
    return watcher.id


def _watcher(where: Target, watcher_id: str) -> Watcher:
    watcher = _watchers.get((where.sandbox_id, watcher_id))
    if watcher is None:
        raise ConnectError(Code.NOT_FOUND, f"watcher {watcher_id!r} not found")
    return watcher


def events(where: Target, watcher_id: str) -> list[pb.FilesystemEvent]:
    watcher = _watcher(where, watcher_id)
    watcher.asked = time.monotonic()
    if watcher.failure is not None:
        raise ConnectError(Code.UNAVAILABLE, f"watcher {watcher_id!r}: {watcher.failure}")
    found, watcher.pending = watcher.pending, []
    return found


def remove(where: Target, watcher_id: str) -> None:
    watcher = _watcher(where, watcher_id)
    watcher.task.cancel()
    _watchers.pop(watcher.key, None)


async def stream(where: Target, path: str, recursive: bool) -> AsyncIterator[Any]:
    """``WatchDir``'s events: its start, then what changed, keepalives while nothing does."""
    _check_room(where)
    sandbox_id = where.sandbox_id
    _streams[sandbox_id] = _streams.get(sandbox_id, 0) + 1
    try:
        last = await listing(where, path, recursive)
        yield pb.WatchDirResponse(event=_oneof("start", pb.WatchDirResponse.StartEvent()))
        quiet = time.monotonic()
        while True:
            await asyncio.sleep(INTERVAL)
            now = await listing(where, path, recursive)
            for event in changes(last, now):
                quiet = time.monotonic()
                yield pb.WatchDirResponse(event=_oneof("filesystem", event))
            last = now
            if time.monotonic() - quiet > _KEEPALIVE:
                quiet = time.monotonic()
                keepalive = pb.WatchDirResponse.KeepAlive()
                yield pb.WatchDirResponse(event=_oneof("keepalive", keepalive))
    finally:
        left = _streams.get(sandbox_id, 1) - 1
        if left > 0:
            _streams[sandbox_id] = left
        else:
            _streams.pop(sandbox_id, None)


def _oneof(field: str, value: Any) -> Any:
    from protobuf import Oneof

    return Oneof(field, value)
