"""The layer of an incremental snapshot: what changed in a container's writable layer (overlay2's
upper directory) since the mark of a snapshot made of it, as a layer tar to put over that
snapshot (:mod:`rock_docker._snapshot_delta` says when it is used and how it becomes an image).

:func:`write_delta_layer` walks the upper directory while the container is frozen and writes:

- every entry whose ctime is at or after the floor (the old mark's wall time rounded down to
  the second: an extra unchanged file is harmless, a missed one is not), with the directories
  above it (their metadata as they are);
- a whiteout (``.wh.<name>``) for each whiteout of the upper directory (a character device 0:0)
  that changed;
- a changed directory whose files the layers below it cannot add to, that is, one that is opaque
  (``trusted.overlay.opaque=y``), under an opaque one, or that the container's image does not
  have: the directory, an opaque marker (``.wh..wh..opq``) and its whole subtree, whatever the
  ctimes (a directory moved there keeps its children's ctimes);
- for any other changed directory, a whiteout for every name the previous snapshot's own layers
  show there (merged top-down as overlay does) that the upper directory no longer has.

The sandbox writes the tree being walked (it is frozen, but wrote it before), so no path is
followed: every directory and file is opened relative to its parent's descriptor with
``O_NOFOLLOW`` (files also ``O_NONBLOCK``), checked with ``fstat`` to be the entry listed;
symbolic links are read with ``readlink`` and kept as links; devices, FIFOs and sockets are never
opened. Owners, modes, mtimes (to the nanosecond), hard links, devices, FIFOs and the ``user.*``
and ``security.*`` extended attributes are kept (pax ``SCHILY.xattr.*`` records, binary values
byte for byte). Whatever this does not handle raises :class:`Fallback` (the snapshot is then a
full ``docker commit``): overlay's ``redirect`` or ``metacopy`` attributes, attributes it cannot
read, a name starting with ``.wh.``, a name gone that the image would show again, a directory
the container merges with its image that the previous snapshot hides, a hard link whose other
names are not all in the layer, a tree deeper than :data:`MAX_DEPTH`.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import tarfile
from collections.abc import Sequence
from typing import IO, Any

__all__ = ["MAX_DEPTH", "DeltaLayer", "Fallback", "LayerView", "write_delta_layer"]

#: Deeper than this the walk stops and the snapshot is a full commit (a descriptor per level).
MAX_DEPTH = 128
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_OPAQUE = "trusted.overlay.opaque"
_UNHANDLED = ("trusted.overlay.redirect", "trusted.overlay.metacopy")
_KEPT = ("security.", "user.")
_WHITEOUT = ".wh."
_OPAQUE_MARKER = ".wh..wh..opq"
_SECOND = 1_000_000_000


class Fallback(Exception):
    """Something the delta layer does not handle: the snapshot is a full commit instead."""


class DeltaLayer:
    """A layer tar written: its digest (the image's ``diff_id``) and size in bytes."""

    def __init__(self, diff_id: str, size: int) -> None:
        self.diff_id = diff_id
        self.size = size


def _is_whiteout(st: os.stat_result) -> bool:
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


def _open_dir(name: str, dir_fd: int, st: os.stat_result) -> int:
    """The directory ``name`` under ``dir_fd``, never through a symbolic link, checked to be
    the one ``st`` describes."""
    fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    opened = os.fstat(fd)
    if (opened.st_dev, opened.st_ino) != (st.st_dev, st.st_ino):
        os.close(fd)
        raise Fallback(f"{name!r} changed while it was read")
    return fd


def _xattrs(target: int | str) -> dict[str, bytes]:
    """The extended attributes of an open descriptor, or of a path never followed."""
    follow = isinstance(target, int)
    try:
        names = os.listxattr(target, follow_symlinks=follow)
        found = {name: os.getxattr(target, name, follow_symlinks=follow) for name in names}
    except OSError as exc:
        if exc.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
            return {}
        raise Fallback(f"unreadable extended attributes: {exc}") from exc
    if any(name in found for name in _UNHANDLED):
        raise Fallback("overlay redirect or metacopy attributes")
    return found


class LayerView:
    """Read-only lookups in the merge of image layers' directories (top first), as overlay
    shows them: a whiteout or a non-directory hides the layers below at its path and under it,
    an opaque directory hides what the layers below have under it. No path is followed."""

    def __init__(self, roots: Sequence[str]) -> None:
        self._roots = list(roots)
        self._fds: list[int] = []

    def __enter__(self) -> LayerView:
        for root in self._roots:
            self._fds.append(os.open(root, _DIR_FLAGS))
        return self

    def __exit__(self, *exc: object) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()

    def _descend(self, root: int, rel: Sequence[str]) -> tuple[str, int | None, bool]:
        """In one layer: ``("dir", fd, opaque)``, ``("missing", None, opaque)`` or
        ``("hidden", None, opaque)``; ``opaque``: a directory on the way (or at ``rel``) is
        opaque, so the layers below show nothing there."""
        opened: list[int] = []
        opaque = False
        cur = root
        try:
            for name in rel:
                try:
                    st = os.stat(name, dir_fd=cur, follow_symlinks=False)
                except FileNotFoundError:
                    return "missing", None, opaque
                if not stat.S_ISDIR(st.st_mode):
                    return "hidden", None, opaque  # a whiteout or a file hides what is below
                cur = _open_dir(name, cur, st)
                opened.append(cur)
                opaque = opaque or _xattrs(cur).get(_OPAQUE) == b"y"
            return "dir", os.dup(cur), opaque
        finally:
            for fd in opened:
                os.close(fd)

    def lookup(
        self, rel: Sequence[str], *, names: bool = True
    ) -> tuple[dict[str, str], bool, bool]:
        """At ``rel``: the names the merge shows (``"whiteout"`` for one deleted there, else
        ``"dir"`` or ``"other"``; with ``names``), whether it is a directory, and whether the
        layers under these ones are hidden there."""
        found: dict[str, str] = {}
        is_dir = False
        for root in self._fds:
            status, fd, opaque = self._descend(root, rel)
            if status == "hidden":
                return found, is_dir, True
            if fd is not None:
                is_dir = True
                try:
                    if names:
                        with os.scandir(fd) as entries:
                            for entry in entries:
                                st = entry.stat(follow_symlinks=False)
                                kind = "dir" if stat.S_ISDIR(st.st_mode) else "other"
                                found.setdefault(
                                    entry.name, "whiteout" if _is_whiteout(st) else kind
                                )
                finally:
                    os.close(fd)
                if not names:
                    return found, True, opaque
            if opaque:
                return found, is_dir, True
        return found, is_dir, False


class _Sink:
    """Where the tar goes, hashed and counted on the way."""

    def __init__(self, out: IO[bytes]) -> None:
        self.out = out
        self.digest = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.out.write(data)
        self.digest.update(data)
        self.size += len(data)
        return len(data)


def _header(
    path: str, st: os.stat_result, kind: bytes, xattrs: dict[str, bytes]
) -> tarfile.TarInfo:
    info = tarfile.TarInfo(path)
    info.type = kind
    info.mode = stat.S_IMODE(st.st_mode)
    info.uid, info.gid = st.st_uid, st.st_gid
    info.uname = info.gname = ""
    seconds, nanos = divmod(st.st_mtime_ns, _SECOND)
    info.mtime = seconds
    info.pax_headers = {"mtime": f"{seconds}.{nanos:09d}"} if seconds >= 0 else {}
    for name, value in xattrs.items():
        if name.startswith(_KEPT):
            info.pax_headers[f"SCHILY.xattr.{name}"] = value.decode("utf-8", "surrogateescape")
    return info


def _marker(path: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(path)
    info.mode, info.uname, info.gname = 0, "", ""
    return info


class _Walk:
    def __init__(self, tar: tarfile.TarFile, base: LayerView, own: LayerView, floor: int):
        self.tar, self.base, self.own, self.floor = tar, base, own, floor
        self.pending: list[list[Any]] = []  # [header, written] of the directories walked into
        self.links: dict[tuple[int, int], list[Any]] = {}  # inode: [first path, nlink, names]

    def flush(self) -> None:
        """Write the directories walked into that are not written yet (outermost first)."""
        for ancestor in self.pending:
            if not ancestor[1]:
                self.tar.addfile(ancestor[0])
                ancestor[1] = True

    def emit(self, info: tarfile.TarInfo, data: IO[bytes] | None = None) -> None:
        self.flush()
        self.tar.addfile(info, data)

    def gone(self, rel: tuple[str, ...], here: set[str]) -> None:
        """Whiteouts for the names the previous snapshot's own layers show at the changed
        directory ``rel`` (which the container merges with its image) and it lacks now."""
        own, _, hides = self.own.lookup(rel)
        if hides:
            raise Fallback(f"/{'/'.join(rel)}: the previous snapshot hides the image there")
        base: dict[str, str] | None = None
        for name, kind in sorted(own.items()):
            if name in here:
                continue
            if base is None:
                base = self.base.lookup(rel)[0]
            if base.get(name, "whiteout") != "whiteout":
                raise Fallback(f"/{'/'.join((*rel, name))}: gone, but the image has it")
            if kind != "whiteout":
                self.emit(_marker("/".join((*rel, _WHITEOUT + name))))

    def walk(
        self, fd: int, rel: tuple[str, ...], depth: int, whole: bool, hidden: bool, check: bool
    ) -> None:
        """The directory ``fd`` at ``rel``: everything in it with ``whole``; ``hidden``: the
        image shows nothing here (an opaque directory above); ``check``: it changed and merges
        with the image (whiteouts for what the previous snapshot had and it has no more)."""
        with os.scandir(fd) as listing:
            entries = sorted(listing, key=lambda entry: entry.name)
        if check:
            self.gone(rel, {entry.name for entry in entries})
        for entry in entries:
            name = entry.name
            if name.startswith(_WHITEOUT):
                raise Fallback(f"a file named {name!r}: a whiteout in a layer")
            st = entry.stat(follow_symlinks=False)
            path = "/".join((*rel, name))
            changed = whole or st.st_ctime_ns >= self.floor
            if stat.S_ISDIR(st.st_mode):
                self.directory(fd, name, st, rel, depth, whole, hidden, changed)
            elif _is_whiteout(st):
                if changed:
                    self.emit(_marker("/".join((*rel, _WHITEOUT + name))))
            elif changed and not stat.S_ISSOCK(st.st_mode):  # sockets: not in layers
                self.other(fd, name, st, path)

    def directory(
        self,
        fd: int,
        name: str,
        st: os.stat_result,
        rel: tuple[str, ...],
        depth: int,
        whole: bool,
        hidden: bool,
        changed: bool,
    ) -> None:
        if depth >= MAX_DEPTH:
            raise Fallback(f"deeper than {MAX_DEPTH} directories")
        here = (*rel, name)
        child = _open_dir(name, fd, st)
        try:
            xattrs = _xattrs(child)
            opaque = xattrs.get(_OPAQUE) == b"y"
            child_whole, check, marker = whole, False, whole and opaque
            if changed and not whole:
                if opaque or hidden or not self.base.lookup(here, names=False)[1]:
                    child_whole = marker = True  # nothing below adds to it: all of it, opaque
                else:
                    check = True
            self.pending.append([_header("/".join(here), st, tarfile.DIRTYPE, xattrs), False])
            if marker:
                self.emit(_marker("/".join((*here, _OPAQUE_MARKER))))
            elif changed:
                self.flush()
            self.walk(child, here, depth + 1, child_whole, hidden or opaque, check)
            self.pending.pop()
        finally:
            os.close(child)

    def other(self, fd: int, name: str, st: os.stat_result, path: str) -> None:
        """A file, symbolic link, device or FIFO, or another name of an inode already written."""
        key = (st.st_dev, st.st_ino)
        if st.st_nlink > 1:
            if key in self.links:
                self.links[key][2] += 1
                info = _header(path, st, tarfile.LNKTYPE, {})
                info.linkname = self.links[key][0]
                self.emit(info)
                return
            self.links[key] = [path, st.st_nlink, 1]
        mode = st.st_mode
        if stat.S_ISREG(mode):
            file_fd = os.open(name, _FILE_FLAGS, dir_fd=fd)
            with os.fdopen(file_fd, "rb") as data:
                opened = os.fstat(file_fd)
                if not stat.S_ISREG(opened.st_mode) or (opened.st_dev, opened.st_ino) != key:
                    raise Fallback(f"{path!r} changed while it was read")
                info = _header(path, opened, tarfile.REGTYPE, _xattrs(file_fd))
                info.size = opened.st_size
                self.emit(info, data)
            return
        xattrs = _xattrs(f"/proc/self/fd/{fd}/{name}")  # the entry itself, never followed
        if stat.S_ISLNK(mode):
            info = _header(path, st, tarfile.SYMTYPE, xattrs)
            info.linkname = os.readlink(name, dir_fd=fd)
        elif stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
            info = _header(
                path, st, tarfile.CHRTYPE if stat.S_ISCHR(mode) else tarfile.BLKTYPE, xattrs
            )
            info.devmajor, info.devminor = os.major(st.st_rdev), os.minor(st.st_rdev)
        elif stat.S_ISFIFO(mode):
            info = _header(path, st, tarfile.FIFOTYPE, xattrs)
        else:
            raise Fallback(f"{path!r}: a kind of file the layer cannot hold")
        self.emit(info)


def write_delta_layer(
    upper: str, base: LayerView, own: LayerView, floor_ns: int, out: IO[bytes]
) -> DeltaLayer:
    """Write to ``out`` the layer tar of what changed under ``upper`` at or after ``floor_ns``
    (rounded down here to the second), over the previous snapshot whose own layers ``own``
    shows, on the image ``base`` shows. Blocking; the container must be frozen.

    :raises Fallback: something it does not handle (the module's docstring lists them).
    :raises OSError: the upper directory could not be read.
    """
    floor = floor_ns - floor_ns % _SECOND
    sink = _Sink(out)
    root = os.open(upper, _DIR_FLAGS)
    try:
        with tarfile.open(  # type: ignore[call-overload]
            fileobj=sink,
            mode="w|",
            format=tarfile.PAX_FORMAT,
            encoding="utf-8",
            errors="surrogateescape",
        ) as tar:
            walk = _Walk(tar, base, own, floor)
            walk.walk(root, (), 0, False, False, os.fstat(root).st_ctime_ns >= floor)
            for path, nlink, names in walk.links.values():
                if names != nlink:
                    raise Fallback(f"{path!r}: a hard link whose other names did not change")
    except tarfile.TarError as exc:
        raise Fallback(f"the layer could not be written: {exc}") from exc
    finally:
        os.close(root)
    return DeltaLayer(f"sha256:{sink.digest.hexdigest()}", sink.size)
