"""Files: ROCK's read_file, write_file and multipart upload; rock's download, list_dir and stat.

Differences from ROCK a user notices: ``read_file`` returns the bytes as they are (no newline
translation), and a file that is not valid text, or a directory, is an error that says so with
the path (and the byte offset of the first bad byte); an upload streams to disk instead of being
held in memory, and zip entries keep their permission bits.
"""

from __future__ import annotations

import errno
import os
import stat

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds at start; annotations are strings anyway
    from collections.abc import Callable, Iterator
    from typing import IO, Any

from .errors import BadRequest, FileDecodeError

__all__ = [
    "ROUTES",
    "read_file",
    "write_file",
    "open_download",
    "list_dir",
    "stat_path",
    "MultipartParser",
    "save_upload",
]

_CHUNK = 1 << 18

#: ``POST`` routes this module serves itself, each a function of the request's JSON body that
#: returns the answer's JSON (the rocklet's router finds them on first use: rocklet/api.py).
#: A new file operation is its function here and a line in this table.


def read_file(path: str, encoding: str | None = None, errors: str | None = None) -> dict[str, Any]:
    """ROCK's ``ReadFileResponse``: the text of ``path``."""
    if os.path.isdir(path):
        raise IsADirectoryError(
            errno.EISDIR, "Is a directory, not a file (use /list_dir to list it)", path
        )
    with open(path, "rb") as f:
        data = f.read()
    enc = encoding or "utf-8"
    try:
        content = data.decode(enc, errors or "strict")
    except UnicodeDecodeError as exc:
        bad = data[exc.start : exc.start + 1]
        raise FileDecodeError(
            "%s is not valid %s text: byte 0x%s at offset %d cannot be decoded (%s); "
            "pass errors='replace' or 'backslashreplace', or another encoding, to read it anyway"
            % (path, enc, bad.hex(), exc.start, exc.reason),
            extra_info={"path": path, "encoding": enc, "offset": exc.start},
        ) from None
    except LookupError:
        raise BadRequest(
            "unknown encoding or errors handler: encoding=%r errors=%r" % (encoding, errors)
        ) from None
    return {"content": content}


def write_file(path: str, content: str) -> dict[str, Any]:
    """ROCK's ``WriteFileResponse``: ``content`` written to ``path`` (parents created, overwritten)."""
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)
    with open(path, "wb") as f:
        f.write(content.encode("utf-8", "surrogateescape"))
    return {"success": True, "message": ""}


def open_download(path: str) -> tuple[Iterator[bytes], int]:
    """The bytes of ``path`` as chunks, and its size (errors raise before anything is sent)."""
    if os.path.isdir(path):
        raise IsADirectoryError(
            errno.EISDIR, "Is a directory, not a file (use /list_dir to list it)", path
        )
    f = open(path, "rb")
    size = os.fstat(f.fileno()).st_size

    def chunks() -> Iterator[bytes]:
        try:
            left = size
            while left > 0:
                data = f.read(min(_CHUNK, left))
                if not data:
                    # The file shrank while we sent it: pad so Content-Length stays true.
                    yield b"\0" * left
                    return
                left -= len(data)
                yield data
        finally:
            f.close()

    return chunks(), size


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISLNK(mode):
        return "symlink"
    return "other"


def list_dir(path: str) -> dict[str, Any]:
    """The entries of directory ``path``: name, type, size, mode, mtime (symlinks not followed)."""
    entries: list[dict[str, Any]] = []
    with os.scandir(path) as it:
        for entry in it:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            item: dict[str, Any] = {
                "name": entry.name,
                "type": _kind(st.st_mode),
                "size": st.st_size,
                "mode": stat.S_IMODE(st.st_mode),
                "mtime": st.st_mtime,
            }
            if stat.S_ISLNK(st.st_mode):
                try:
                    item["target"] = os.readlink(entry.path)
                except OSError:
                    item["target"] = None
            entries.append(item)
    entries.sort(key=lambda e: e["name"])
    return {"path": path, "entries": entries}


def stat_path(body: dict[str, Any]) -> dict[str, Any]:
    """``POST /stat {path}``: the file information of ``path`` (``os.lstat``: a symbolic link
    itself, with its target). A missing path is ``FileNotFoundError``, as ``/read_file`` answers."""
    path = body.get("path")
    if not isinstance(path, str) or not path:
        raise BadRequest("field 'path' must be a non-empty string, got %r" % (path,))
    st = os.lstat(path)
    info: dict[str, Any] = {
        "path": path,
        "type": _kind(st.st_mode),
        "size": st.st_size,
        "mode": stat.S_IMODE(st.st_mode),
        "mtime": st.st_mtime,
        "is_symlink": stat.S_ISLNK(st.st_mode),
    }
    if stat.S_ISLNK(st.st_mode):
        info["target"] = os.readlink(path)
    return info


#: ``POST`` routes this module serves itself, each a function of the request's JSON body that
#: returns the answer's JSON (the rocklet's router finds them on first use: rocklet/api.py).
#: A new file operation is its function here and a line in this table.
ROUTES: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {"/stat": stat_path}


# -- multipart/form-data ----------------------------------------------------------------------


def _header_params(value: str) -> tuple[str, dict[str, str]]:
    """``form-data; name="file"; filename="a b.txt"`` → ``("form-data", {...})``."""
    parts: list[str] = []
    current: list[str] = []
    quoted = False
    i = 0
    while i < len(value):
        ch = value[i]
        if ch == '"':
            quoted = not quoted
        elif ch == "\\" and quoted and i + 1 < len(value):
            i += 1
            current.append(value[i])
            i += 1
            continue
        elif ch == ";" and not quoted:
            parts.append("".join(current))
            current = []
            i += 1
            continue
        current.append(ch)
        i += 1
    parts.append("".join(current))
    params = {}
    for part in parts[1:]:
        key, _, val = part.strip().partition("=")
        val = val.strip()
        if len(val) >= 2 and val[0] == '"' and val[-1] == '"':
            val = val[1:-1]
        params[key.strip().lower()] = val
    return parts[0].strip().lower(), params


class MultipartParser:
    """A streaming ``multipart/form-data`` parser (the stdlib's ``cgi`` is gone in 3.13).

    Feed it the body with :meth:`feed`; for each part it calls ``open_part(headers)``, which
    returns a ``write(bytes)`` callable for the part's data, and ``close_part()`` at its end.
    """

    def __init__(
        self,
        boundary: bytes,
        open_part: Callable[[dict[str, str]], Callable[[bytes], Any]],
        close_part: Callable[[], None],
    ) -> None:
        self._delim = b"--" + boundary
        self._body_delim = b"\r\n--" + boundary
        self._open = open_part
        self._close = close_part
        self._buf = bytearray()
        self._state = "preamble"
        self._write: Callable[[bytes], Any] | None = None
        self.finished = False

    def feed(self, data: bytes) -> None:
        """Consume the next piece of the body."""
        self._buf += data
        while self._step():
            pass

    def _step(self) -> bool:
        buf = self._buf
        if self._state == "preamble":
            i = buf.find(self._delim)
            if i == -1:
                del buf[: max(0, len(buf) - len(self._delim))]
                return False
            del buf[: i + len(self._delim)]
            self._state = "after_delim"
            return True
        if self._state == "after_delim":
            if len(buf) < 2:
                return False
            if buf[:2] == b"--":
                self._state = "epilogue"
                self.finished = True
                buf.clear()
                return False
            eol = buf.find(b"\r\n")
            if eol == -1:
                return False
            del buf[: eol + 2]  # tolerate transport padding after the delimiter
            self._state = "headers"
            return True
        if self._state == "headers":
            end = buf.find(b"\r\n\r\n")
            if end == -1:
                if len(buf) > 65536:
                    raise BadRequest("multipart part headers are too long")
                return False
            headers = {}
            for line in bytes(buf[:end]).decode("utf-8", "replace").split("\r\n"):
                key, sep, value = line.partition(":")
                if sep:
                    headers[key.strip().lower()] = value.strip()
            del buf[: end + 4]
            self._write = self._open(headers)
            self._state = "body"
            return True
        if self._state == "body":
            i = buf.find(self._body_delim)
            if i == -1:
                keep = len(self._body_delim) - 1
                if len(buf) > keep:
                    self._write(bytes(buf[: len(buf) - keep]))  # type: ignore[misc]  # set by the headers state
                    del buf[: len(buf) - keep]
                return False
            if i:
                self._write(bytes(buf[:i]))  # type: ignore[misc]
            del buf[: i + len(self._body_delim)]
            self._close()
            self._state = "after_delim"
            return True
        buf.clear()
        return False


def _truthy(text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "t", "yes", "y", "on"):
        return True
    if value in ("0", "false", "f", "no", "n", "off", ""):
        return False
    raise BadRequest("field 'unzip' must be a boolean, got %r" % text)


def save_upload(reader: Any, content_type: str, scratch_dir: str) -> dict[str, Any]:
    """ROCK's ``/upload``: parts ``file``, ``target_path``, ``unzip`` → ``UploadResponse``.

    The file streams to a temporary file (next to the target when ``target_path`` came first,
    as clients send it), then is renamed into place or, with ``unzip``, extracted into
    ``target_path`` as a directory.
    """
    kind, params = _header_params(content_type)
    boundary = params.get("boundary")
    if kind != "multipart/form-data" or not boundary:
        raise BadRequest("upload must be multipart/form-data with a boundary")
    fields: dict[str, str] = {}
    state: dict[str, Any] = {
        "tmp": None,
        "file": None,
        "name": None,
        "filename": None,
        "field": None,
    }

    def open_part(headers: dict[str, str]) -> Callable[[bytes], Any]:
        _, disp = _header_params(headers.get("content-disposition", ""))
        name = disp.get("name", "")
        if "filename" in disp and name == "file":
            target = fields.get("target_path")
            where = os.path.dirname(target) if target else scratch_dir
            if not where:
                where = "."
            os.makedirs(where, exist_ok=True)
            tmp = os.path.join(where, ".rocklet-upload-%s" % os.urandom(6).hex())
            state["tmp"] = tmp
            state["filename"] = disp.get("filename")
            out: IO[bytes] = open(tmp, "wb")
            state["file"] = out
            return out.write
        state["name"] = name
        state["field"] = bytearray()

        def collect(data: bytes) -> None:
            if len(state["field"]) + len(data) > 1 << 20:
                raise BadRequest("form field %r is larger than 1 MiB" % name)
            state["field"].extend(data)

        return collect

    def close_part() -> None:
        if state["file"] is not None:
            state["file"].close()
            state["file"] = None
        elif state["field"] is not None:
            fields[state["name"]] = bytes(state["field"]).decode("utf-8", "surrogateescape")
            state["field"] = None

    parser = MultipartParser(boundary.encode("latin-1"), open_part, close_part)
    try:
        while True:
            data = reader.read(_CHUNK)
            if not data:
                break
            parser.feed(data)
        if not parser.finished:
            raise BadRequest("multipart body ended before its closing boundary")
        if state["tmp"] is None:
            raise BadRequest("upload needs a 'file' part")
        target = fields.get("target_path")
        if not target:
            raise BadRequest("upload needs a 'target_path' field")
        unzip = _truthy(fields.get("unzip", "false"))
        parent = os.path.dirname(target)
        if parent:
            os.makedirs(parent, exist_ok=True)
        if unzip:
            _extract_zip(state["tmp"], target)
        else:
            try:
                os.replace(state["tmp"], target)
            except OSError:
                import shutil  # here: shutil imports bz2 and lzma, which nothing else needs

                shutil.move(state["tmp"], target)
            state["tmp"] = None
    finally:
        if state["file"] is not None:
            state["file"].close()
        if state["tmp"] is not None and os.path.exists(state["tmp"]):
            os.unlink(state["tmp"])
    return {"success": True, "message": "", "file_name": target}


def _extract_zip(archive: str, target: str) -> None:
    import zipfile

    os.makedirs(target, exist_ok=True)
    with zipfile.ZipFile(archive) as zf:
        for info in zf.infolist():
            # ZipFile.extract drops ".." and leading "/" so nothing lands outside target.
            path = zf.extract(info, target)
            mode = (info.external_attr >> 16) & 0o7777
            if mode and not info.is_dir():
                os.chmod(path, mode)
