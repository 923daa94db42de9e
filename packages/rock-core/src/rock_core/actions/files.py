"""Files: read, write, upload, chown, chmod and list a directory in a sandbox."""

from __future__ import annotations

import enum

import attrs

from rock_core.actions._fields import sandbox_id_field
from rock_core.actions._operation import Operation
from rock_core.models import (
    NonBlankStr,
    constrained,
)

__all__ = [
    "ReadFileRequest",
    "SandboxReadFileRequest",
    "WriteFileRequest",
    "SandboxWriteFileRequest",
    "UploadMode",
    "UploadRequest",
    "ChownRequest",
    "ChmodRequest",
    "ListDirRequest",
    "StatRequest",
    "ReadFileResponse",
    "WriteFileResponse",
    "UploadResponse",
    "FileUploadResponse",
    "ChownResponse",
    "ChmodResponse",
    "DownloadFileResponse",
    "DownloadResponse",
    "DirEntry",
    "ListDirResponse",
    "StatResponse",
]


@attrs.frozen(kw_only=True)
class ReadFileRequest:
    """Read the text file at ``path`` (``encoding``/``errors`` as in ``Path.read_text``)."""

    path: str
    encoding: str | None = None
    errors: str | None = None


@attrs.frozen(kw_only=True)
class SandboxReadFileRequest(ReadFileRequest):
    """:class:`ReadFileRequest` with ``sandbox_id``."""

    sandbox_id: NonBlankStr = sandbox_id_field()


@attrs.frozen(kw_only=True)
class WriteFileRequest:
    """Write ``content`` to ``path``, creating parent directories and replacing the file."""

    content: str
    path: str


@attrs.frozen(kw_only=True)
class SandboxWriteFileRequest(WriteFileRequest):
    """:class:`WriteFileRequest` with ``sandbox_id``."""

    sandbox_id: NonBlankStr = sandbox_id_field()


class UploadMode(str, enum.Enum):
    """How the SDK uploads a file: pick by size, through object storage, or in the request."""

    AUTO = "auto"
    OSS = "oss"
    DIRECT = "direct"


@attrs.frozen(kw_only=True)
class UploadRequest:
    """Upload the local file ``source_path`` to ``target_path`` in the sandbox."""

    source_path: str
    target_path: str
    upload_mode: UploadMode = attrs.field(default=UploadMode.AUTO, converter=UploadMode)


@attrs.frozen(kw_only=True)
class ChownRequest:
    """``chown [-R] user:user paths`` inside the sandbox."""

    remote_user: str
    paths: list[str] = attrs.field(factory=list)
    recursive: bool = False


@attrs.frozen(kw_only=True)
class ChmodRequest:
    """``chmod [-R] mode paths`` inside the sandbox."""

    paths: list[str] = attrs.field(factory=list)
    mode: str = "755"
    recursive: bool = False


@attrs.frozen(kw_only=True)
class ListDirRequest:
    """(rock) List the directory at ``path``."""

    path: NonBlankStr = constrained(NonBlankStr)


@attrs.frozen(kw_only=True)
class ReadFileResponse:
    """Result of ``/read_file``: the file's text."""

    content: str = ""


@attrs.frozen(kw_only=True)
class WriteFileResponse:
    """Result of ``/write_file``."""

    success: bool = False
    message: str = ""


@attrs.frozen(kw_only=True)
class UploadResponse:
    """Result of ``/upload``: ``file_name`` is where the file landed."""

    success: bool = False
    message: str = ""
    file_name: str = ""


#: ROCK's alias of :class:`UploadResponse`.
FileUploadResponse = UploadResponse


@attrs.frozen(kw_only=True)
class ChownResponse:
    """Result of the SDK's ``fs.chown``."""

    success: bool = False
    message: str = ""


@attrs.frozen(kw_only=True)
class ChmodResponse:
    """Result of the SDK's ``fs.chmod``."""

    success: bool = False
    message: str = ""


@attrs.frozen(kw_only=True)
class DownloadFileResponse:
    """Result of the SDK's ``fs.download_file``."""

    success: bool = False
    message: str = ""


#: ROCK's older name of :class:`DownloadFileResponse`.
DownloadResponse = DownloadFileResponse


@attrs.frozen(kw_only=True)
class DirEntry:
    """One entry of a directory listing: ``type`` is ``file``, ``dir``, ``symlink`` or ``other``;
    ``mode`` the permission bits, ``mtime`` seconds since the epoch, ``target`` a link's target."""

    name: str
    type: str
    size: int = 0
    mode: int = 0
    mtime: float = 0.0
    target: str | None = None


@attrs.frozen(kw_only=True)
class ListDirResponse:
    """Result of the rocklet's ``/list_dir`` (rock addition)."""

    path: str
    entries: list[DirEntry] = attrs.field(factory=list)


# -- operations --------------------------------------------------------------------------------

READ_FILE: Operation[ReadFileRequest, ReadFileResponse] = Operation(
    name="read_file",
    request=ReadFileRequest,
    response=ReadFileResponse,
    rocklet="POST /read_file",
    admin="POST /read_file",
    admin_body=SandboxReadFileRequest,
    failure="read file failed",
    summary="Read a text file.",
)
WRITE_FILE: Operation[WriteFileRequest, WriteFileResponse] = Operation(
    name="write_file",
    request=WriteFileRequest,
    response=WriteFileResponse,
    rocklet="POST /write_file",
    admin="POST /write_file",
    admin_body=SandboxWriteFileRequest,
    failure="write file failed",
    summary="Write a text file, creating parent directories.",
)
UPLOAD: Operation[UploadRequest, UploadResponse] = Operation(
    name="upload",
    request=UploadRequest,
    response=UploadResponse,
    rocklet="POST /upload",
    admin="POST /upload",
    kind="multipart",
    failure="upload file failed",
    summary="Upload a file (multipart: file, target_path, sandbox_id).",
)
DOWNLOAD: Operation[dict, bytes] = Operation(  # type: ignore[type-arg]
    name="download",
    request=dict,
    response=bytes,
    rocklet="POST /download",
    admin="POST /download",
    kind="bytes",
    failure="download file failed",
    summary="The raw bytes of a file in the sandbox.",
)
LIST_DIR: Operation[ListDirRequest, ListDirResponse] = Operation(
    name="list_dir",
    request=ListDirRequest,
    response=ListDirResponse,
    rocklet="POST /list_dir",
    admin="POST /list_dir",
    failure="list directory failed",
    summary="List a directory in the sandbox.",
)


@attrs.frozen(kw_only=True)
class StatRequest:
    """(rock) The file information of ``path`` (a symbolic link itself, not its target)."""

    path: NonBlankStr = constrained(NonBlankStr)


@attrs.frozen(kw_only=True)
class StatResponse:
    """(rock) File information of ``path``: ``type`` is ``file``, ``dir``, ``symlink`` or
    ``other``; ``size`` in bytes, ``mode`` the permission bits, ``mtime`` seconds since the
    epoch; a symbolic link's ``target`` (``is_symlink``)."""

    path: str
    type: str
    size: int = 0
    mode: int = 0
    mtime: float = 0.0
    is_symlink: bool = False
    target: str | None = None


STAT: Operation[StatRequest, StatResponse] = Operation(
    name="stat",
    request=StatRequest,
    response=StatResponse,
    rocklet="POST /stat",
    admin="POST /stat",
    failure="stat failed",
    summary="File information of a path: type, size, mode, mtime, symlink target.",
)
