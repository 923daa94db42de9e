"""Folders and files that hold secrets or sockets, kept to the engine's own user.

rock keeps rocklet secrets in its store (``rock.db``) and the rocklets' sockets in a folder
(the docker runtime's ``socket_dir``, ``$TMPDIR/rock-<uid>`` by default). Another local user who
could read the one or make the other first would reach every sandbox. So:

* :func:`private_dir` makes a folder mode 0700, or takes an existing one only when it is a real
  folder (not a symbolic link) owned by this process's user and writable by no one else;
  otherwise it refuses, naming the path, its owner and mode, and the setting that chose it;
* :func:`private_file` makes a file mode 0600 without following a link, or narrows an existing
  one of this user to 0600, and refuses one of another user.

Both raise :class:`~rock_core.errors.InvalidParameter` naming the setting.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from rock_core.errors import InvalidParameter

__all__ = ["private_dir", "private_file"]


def _refuse(
    path: Path, setting: str, problem: str, found: os.stat_result | None
) -> InvalidParameter:
    seen = (
        f" (owner uid {found.st_uid}, mode {stat.filemode(found.st_mode)} {oct(stat.S_IMODE(found.st_mode))})"
        if found
        else ""
    )
    return InvalidParameter(
        f"{setting}: {path} {problem}{seen}; rock keeps secrets and sockets there and needs it to belong to uid "
        f"{os.geteuid()} alone: remove it, or set {setting} to a path of its own",
        field=setting,
        value=str(path),
    )


def private_dir(path: str | os.PathLike[str], *, setting: str, tighten: bool = True) -> Path:
    """Make folder ``path`` (mode 0700; missing parents as ``mkdir -p`` makes them), or check
    the one there: a folder, not a link, owned by this user, writable by no one else.

    :param setting: the setting that chose ``path``, for the error.
    :param tighten: narrow an existing folder of this user that others may read or enter to 0700.
    :raises InvalidParameter: naming ``setting``, the path, its owner and mode.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise _refuse(path, setting, f"cannot be made ({exc.strerror})", None) from exc
    try:
        found = os.lstat(path)
    except OSError as exc:
        raise _refuse(path, setting, f"cannot be checked ({exc.strerror})", None) from exc
    if stat.S_ISLNK(found.st_mode):
        raise _refuse(path, setting, "is a symbolic link, not a folder", found)
    if not stat.S_ISDIR(found.st_mode):
        raise _refuse(path, setting, "is not a folder", found)
    if found.st_uid != os.geteuid():
        raise _refuse(path, setting, "belongs to another user", found)
    if found.st_mode & 0o022:
        raise _refuse(path, setting, "is writable by other users", found)
    if tighten and found.st_mode & 0o077:
        os.chmod(path, 0o700, follow_symlinks=False)
    return path


def private_file(path: str | os.PathLike[str], *, setting: str) -> Path:
    """Make file ``path`` (empty, mode 0600) unless it exists, never through a symbolic link;
    narrow an existing file of this user to 0600.

    :raises InvalidParameter: ``path`` is a link, not a regular file, or another user's.
    """
    path = Path(path)
    try:
        fd = os.open(
            path,
            os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0),
            0o600,
        )
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _refuse(path, setting, "is a symbolic link", None) from exc
        raise _refuse(path, setting, f"cannot be opened ({exc.strerror})", None) from exc
    try:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode):
            raise _refuse(path, setting, "is not a regular file", found)
        if found.st_uid != os.geteuid():
            raise _refuse(path, setting, "belongs to another user", found)
        if found.st_mode & 0o077:
            os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
    return path
