"""rock-core's own archive store: archived sandboxes as files under one folder.

:class:`FilesystemArchiveStore` (registered as ``fs`` by rock-core's plugin ``archive-fs``, which
this module is) keeps part ``<part>`` of sandbox ``<id>`` as the file ``<root>/<id>/<part>``. For
tests and single-machine use: the archive lives where the engine runs. Configure it with
``EngineConfig(archive_store="fs", plugin_options={"archive-fs": {"root": "/srv/rock-archives"}})``,
``[plugins.archive-fs] root = ...`` in the admin's file, or ``ROCK_PLUGIN_ARCHIVE_FS_ROOT``.

A put writes a hidden temporary file beside the part (``.<part>.<random>.partial``), flushes it to
disk and renames it over the part: readers see the old part or the new one, never a partial one.
A delete first renames the sandbox's folder out of the way (``.deleted-<id>-<random>``), so that a
put still in flight for it fails at its rename instead of bringing a part back.
"""

from __future__ import annotations

import errno
import functools
import os
import secrets
import shutil
from collections.abc import AsyncIterable, AsyncIterator, Callable
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import anyio
import anyio.to_thread

from rock_core.archive import ArchiveStore, check_archive_address
from rock_core.converters import structure_value
from rock_core.errors import InternalServerRockError, SandboxNotFound
from rock_core.hookspecs import Register, hookimpl
from rock_core.models import NonBlankStr
from rock_core.sizes import MiB

__all__ = ["FilesystemArchiveStore", "default_root", "rock_register_archive_stores"]

T = TypeVar("T")

#: How much a put gathers before one write, and a get reads at once.
CHUNK = 1 * MiB
_PARTIAL = ".partial"
_TRASH = ".deleted-"


def default_root() -> Path:
    """``$XDG_DATA_HOME/rock/archives``, else ``~/.local/share/rock/archives``."""
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "share"
    )
    return Path(base) / "rock" / "archives"


class FilesystemArchiveStore(ArchiveStore):
    """Archives as files under ``root`` (created on first use, mode 0700; parts are 0600).

    :param root: the folder archives are kept in (default: :func:`default_root`).
    :raises InvalidParameter: ``root`` is blank.
    """

    name: ClassVar[str] = "fs"

    def __init__(self, *, root: str | os.PathLike[str] | None = None) -> None:
        if root is None:
            self.root = default_root()
        else:
            self.root = Path(
                structure_value(os.fspath(root), NonBlankStr, path="root")
            ).expanduser()

    def __repr__(self) -> str:
        return f"FilesystemArchiveStore(root={str(self.root)!r})"

    # -- the contract ------------------------------------------------------------------------

    async def put(self, sandbox_id: str, part: str, data: AsyncIterable[bytes]) -> None:
        check_archive_address(sandbox_id, part)
        folder = self.root / sandbox_id
        final = folder / part
        partial = folder / f".{part}.{secrets.token_hex(8)}{_PARTIAL}"

        def open_partial() -> int:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            folder.mkdir(mode=0o700, exist_ok=True)
            return os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)

        fd = await self._io(open_partial, "put", sandbox_id, part)
        open_fd = [fd]  # emptied once closed, so that a failure after it does not close it again
        try:
            pending: list[bytes] = []
            size = 0
            async for chunk in data:
                if not chunk:
                    continue
                pending.append(chunk)
                size += len(chunk)
                if size >= CHUNK:
                    block = b"".join(pending) if len(pending) > 1 else pending[0]
                    pending, size = [], 0
                    await self._io(
                        functools.partial(_write_all, fd, block), "put", sandbox_id, part
                    )
            if pending:
                block = b"".join(pending)
                await self._io(lambda: _write_all(fd, block), "put", sandbox_id, part)

            def finish() -> None:
                os.fsync(fd)
                os.close(open_fd.pop())
                try:
                    os.replace(partial, final)
                except FileNotFoundError as exc:
                    raise _DeletedMeanwhile from exc
                _fsync_dir(folder)

            try:
                await self._io(finish, "put", sandbox_id, part)
            except _DeletedMeanwhile as exc:
                raise InternalServerRockError(
                    f"archive-fs: part {part!r} of sandbox {sandbox_id} was not stored: the sandbox's "
                    f"archive was deleted while it was being written",
                    sandbox_id=sandbox_id,
                    attempted="archive put",
                ) from exc.__cause__
        except BaseException:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(_discard, open_fd, partial)
            raise

    async def get(self, sandbox_id: str, part: str) -> AsyncIterator[bytes]:
        check_archive_address(sandbox_id, part)
        path = self.root / sandbox_id / part
        try:
            file = await self._io(lambda: open(path, "rb", buffering=0), "get", sandbox_id, part)  # noqa: SIM115
        except InternalServerRockError as exc:
            if isinstance(exc.__cause__, (FileNotFoundError, NotADirectoryError)):
                raise SandboxNotFound(
                    f"archive-fs: no part {part!r} of sandbox {sandbox_id} is stored under {self.root}",
                    sandbox_id=sandbox_id,
                    attempted="archive get",
                ) from None
            raise
        return self._read(file, sandbox_id, part)

    async def _read(self, file: Any, sandbox_id: str, part: str) -> AsyncIterator[bytes]:
        try:
            while chunk := await self._io(lambda: file.read(CHUNK), "get", sandbox_id, part):
                yield chunk
        finally:
            file.close()

    async def exists(self, sandbox_id: str, part: str) -> bool:
        check_archive_address(sandbox_id, part)
        path = self.root / sandbox_id / part
        return await self._io(path.is_file, "exists", sandbox_id, part)

    async def delete(self, sandbox_id: str) -> None:
        check_archive_address(sandbox_id)
        folder = self.root / sandbox_id
        trash = self.root / f"{_TRASH}{sandbox_id}-{secrets.token_hex(8)}"

        def remove() -> None:
            try:
                os.rename(folder, trash)
            except FileNotFoundError:
                return
            shutil.rmtree(trash)

        await self._io(remove, "delete", sandbox_id, None)

    async def names(self, prefix: str) -> list[str] | None:
        def listing() -> list[str]:
            try:
                entries = list(os.scandir(self.root))
            except FileNotFoundError:
                return []
            return sorted(
                e.name
                for e in entries
                if e.name.startswith(prefix) and not e.name.startswith(".") and e.is_dir()
            )

        return await self._io(listing, "list", prefix, None)

    # -- helpers -----------------------------------------------------------------------------

    async def _io(
        self, call: Callable[[], T], attempted: str, sandbox_id: str, part: str | None
    ) -> T:
        """Run a blocking file call in a worker thread; an ``OSError`` becomes a rock error."""
        try:
            return await anyio.to_thread.run_sync(call)
        except OSError as exc:
            what = (
                f"part {part!r} of sandbox {sandbox_id}"
                if part
                else f"the archive of sandbox {sandbox_id}"
            )
            reason = os.strerror(exc.errno) if exc.errno else str(exc)
            raise InternalServerRockError(
                f"archive-fs: cannot {attempted} {what} under {self.root}: {reason}"
                + (" (the disk is full)" if exc.errno == errno.ENOSPC else ""),
                sandbox_id=sandbox_id,
                attempted=f"archive {attempted}",
            ) from exc


class _DeletedMeanwhile(Exception):
    """The sandbox's folder went away between a put's first write and its rename."""


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _fsync_dir(folder: Path) -> None:
    # The rename is durable only once the folder is; some filesystems cannot open a folder.
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _discard(open_fd: list[int], partial: Path) -> None:
    if open_fd:
        try:
            os.close(open_fd.pop())
        except OSError:
            pass
    try:
        os.unlink(partial)
    except OSError:
        pass


@hookimpl
def rock_register_archive_stores(register: Register) -> None:
    """Register the filesystem archive store under the name ``fs``."""
    register(FilesystemArchiveStore.name, FilesystemArchiveStore)
