"""envd's ``filesystem.Filesystem`` on rock: each call runs coreutils' ``find``, ``mkdir``,
``mv`` or ``rm`` in the sandbox through its rocklet, as the rocklet's user.

Watching a directory (``WatchDir``, ``CreateWatcher``, ``GetWatcherEvents``,
``RemoveWatcher``) lists it again and again: :mod:`rock_e2b.watching`.
"""

from __future__ import annotations

import os.path
import stat
from typing import Any

from connectrpc.code import Code
from connectrpc.errors import ConnectError
from protobuf.wkt.google.protobuf.timestamp_pb import Timestamp

from rock_core.actions import Command
from rock_core.errors import RockError
from rock_e2b import watching
from rock_e2b.dataplane import Target, current, rock_failure
from rock_e2b.envd.filesystem import filesystem_pb as pb
from rock_e2b.envd.filesystem.filesystem_connect import FilesystemASGIApplication

__all__ = ["METHODS", "application", "run"]

METHODS = (
    "Stat",
    "MakeDir",
    "Move",
    "ListDir",
    "Remove",
    "WatchDir",
    "CreateWatcher",
    "GetWatcherEvents",
    "RemoveWatcher",
)
#: ``find -printf``: type, size, mode, owner, group, mtime, symlink target, path (NUL-ended).
_FORMAT = "%y\\t%s\\t%m\\t%u\\t%g\\t%T@\\t%l\\t%p\\0"
_TYPES = {"f": pb.FileType.FILE, "d": pb.FileType.DIRECTORY, "l": pb.FileType.SYMLINK}


async def run(where: Target, argv: list[str]) -> tuple[int, str, str]:
    """Run ``argv`` in the sandbox: exit code, stdout, stderr."""
    user = where.other_user()
    if user is not None:
        raise ConnectError(
            Code.UNIMPLEMENTED,
            f"user {user!r}: rock acts on a sandbox's files as its own user (root); acting as "
            "another user is not served",
        )
    try:
        client = where.engine.rocklet(where.sandbox_id, f"e2b {argv[0]}")
        answer = await client.execute(Command(command=argv, timeout=60))
    except RockError as exc:
        raise rock_failure(exc) from None
    return (-1 if answer.exit_code is None else answer.exit_code), answer.stdout, answer.stderr


def _failure(path: str, stderr: str) -> ConnectError:
    text = stderr.strip() or "failed"
    if "No such file" in text:
        return ConnectError(Code.NOT_FOUND, f"path {path!r} not found: {text}")
    if "Permission denied" in text:
        return ConnectError(Code.PERMISSION_DENIED, f"path {path!r}: {text}")
    if "Not a directory" in text:
        return ConnectError(Code.INVALID_ARGUMENT, f"path {path!r}: {text}")
    return ConnectError(Code.INTERNAL, f"path {path!r}: {text}")


def _entry(line: str) -> pb.EntryInfo:
    kind, size, mode, owner, group, mtime, target, path = line.split("\t", 7)
    perm = int(mode, 8)
    file_type = _TYPES.get(kind, pb.FileType.UNSPECIFIED)
    type_bits = {"d": stat.S_IFDIR, "l": stat.S_IFLNK}.get(kind, stat.S_IFREG)
    return pb.EntryInfo(
        name=os.path.basename(path.rstrip("/")) or path,
        type=file_type,
        path=path,
        size=int(size),
        mode=perm,
        permissions=stat.filemode(type_bits | perm),
        owner=owner,
        group=group,
        modified_time=Timestamp.from_seconds(float(mtime)),
        symlink_target=target or None,
    )


async def stat_path(where: Target, path: str) -> pb.EntryInfo:
    code, out, err = await run(where, ["find", path, "-maxdepth", "0", "-printf", _FORMAT])
    if code != 0:
        raise _failure(path, err)
    return _entry(out.rstrip("\0"))


class FilesystemService:
    """The ``filesystem.Filesystem`` implementation."""

    async def stat(self, request: pb.StatRequest, ctx: Any) -> pb.StatResponse:
        return pb.StatResponse(entry=await stat_path(current.get(), request.path))

    async def make_dir(self, request: pb.MakeDirRequest, ctx: Any) -> pb.MakeDirResponse:
        where = current.get()
        code, _, err = await run(where, ["find", request.path, "-maxdepth", "0"])
        if code == 0:
            raise ConnectError(Code.ALREADY_EXISTS, f"path {request.path!r} already exists")
        code, _, err = await run(where, ["mkdir", "-p", "--", request.path])
        if code != 0:
            raise _failure(request.path, err)
        return pb.MakeDirResponse(entry=await stat_path(where, request.path))

    async def move(self, request: pb.MoveRequest, ctx: Any) -> pb.MoveResponse:
        where = current.get()
        await stat_path(where, request.source)
        code, _, err = await run(where, ["mv", "-T", "--", request.source, request.destination])
        if code != 0:
            raise _failure(request.destination, err)
        return pb.MoveResponse(entry=await stat_path(where, request.destination))

    async def list_dir(self, request: pb.ListDirRequest, ctx: Any) -> pb.ListDirResponse:
        where = current.get()
        entry = await stat_path(where, request.path)
        if entry.type != pb.FileType.DIRECTORY:
            raise ConnectError(Code.INVALID_ARGUMENT, f"path {request.path!r} is not a directory")
        depth = str(max(1, request.depth))
        argv = ["find", request.path, "-mindepth", "1", "-maxdepth", depth, "-printf", _FORMAT]
        code, out, err = await run(where, argv)
        if code != 0:
            raise _failure(request.path, err)
        lines = [line for line in out.split("\0") if line]
        return pb.ListDirResponse(entries=[_entry(line) for line in lines])

    async def remove(self, request: pb.RemoveRequest, ctx: Any) -> pb.RemoveResponse:
        where = current.get()
        await stat_path(where, request.path)
        code, _, err = await run(where, ["rm", "-rf", "--", request.path])
        if code != 0:
            raise _failure(request.path, err)
        return pb.RemoveResponse()

    def watch_dir(self, request: pb.WatchDirRequest, ctx: Any) -> Any:
        _no_entries(request)
        return watching.stream(current.get(), request.path, request.recursive)

    async def create_watcher(
        self, request: pb.CreateWatcherRequest, ctx: Any
    ) -> pb.CreateWatcherResponse:
        _no_entries(request)
        watcher_id = await watching.create(current.get(), request.path, request.recursive)
        return pb.CreateWatcherResponse(watcher_id=watcher_id)

    async def get_watcher_events(
        self, request: pb.GetWatcherEventsRequest, ctx: Any
    ) -> pb.GetWatcherEventsResponse:
        found = watching.events(current.get(), request.watcher_id)
        return pb.GetWatcherEventsResponse(events=found)

    async def remove_watcher(
        self, request: pb.RemoveWatcherRequest, ctx: Any
    ) -> pb.RemoveWatcherResponse:
        watching.remove(current.get(), request.watcher_id)
        return pb.RemoveWatcherResponse()


def _no_entries(request: Any) -> None:
    if request.include_entry or request.allow_network_mounts:
        raise ConnectError(
            Code.UNIMPLEMENTED,
            "rock's directory watching reports event names only (no include_entry, no "
            "allow_network_mounts)",
        )


_app: FilesystemASGIApplication | None = None


def application() -> FilesystemASGIApplication:
    """The one ``filesystem.Filesystem`` ASGI application of this admin."""
    global _app
    if _app is None:
        _app = FilesystemASGIApplication(FilesystemService())  # type: ignore[arg-type]
    return _app
