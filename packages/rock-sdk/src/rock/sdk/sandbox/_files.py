"""A :class:`~rock.sdk.sandbox.client.Sandbox`'s files: read, write, upload, line ranges, and
rock's directory listings, ``stat`` and downloads.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import warnings
from collections.abc import AsyncIterator
from pathlib import Path

from rock.sdk.sandbox._handle import SandboxHandle
from rock_core.actions import (
    Command,
    ListDirRequest,
    ListDirResponse,
    ReadFileRequest,
    ReadFileResponse,
    UploadMode,
    UploadRequest,
    UploadResponse,
    WriteFileRequest,
    WriteFileResponse,
)
from rock_core.actions.files import LIST_DIR, READ_FILE, STAT, WRITE_FILE, StatRequest, StatResponse
from rock_core.errors import CommandRockError, InvalidParameter, RockError, RockletUnreachable
from rock_core.models import NonBlankStr


class SandboxFiles(SandboxHandle):
    """Files in the sandbox (ROCK's file methods, and rock's)."""

    # -- files -------------------------------------------------------------------------------

    async def read_file(self, request: ReadFileRequest) -> ReadFileResponse:
        """Read a text file (``request.encoding``/``errors`` as ``Path.read_text``).

        :raises InvalidParameter: no such file, a directory, or text that does not decode
            (message with the byte offset; pass ``errors="replace"`` to read it anyway).
            ROCK answers ``content=""`` for a missing file.
        """
        return await self._call(READ_FILE, request)

    async def write_file(self, request: WriteFileRequest) -> WriteFileResponse:
        """Write ``request.content`` to ``request.path`` (parents created, file replaced).

        A failure is ``WriteFileResponse(success=False, message=<why>)`` (ROCK reports success).
        """
        return await self._do_write_file(request.content, request.path)

    async def write_file_by_path(self, content: str, path: str) -> WriteFileResponse:
        """:meth:`write_file` with the content and path as arguments."""
        return await self._do_write_file(content, path)

    async def _do_write_file(self, content: str, path: str) -> WriteFileResponse:
        sandbox_id = self._require_id("write_file")
        try:
            await self._get_driver().call(
                sandbox_id, WRITE_FILE, WriteFileRequest(content=content, path=path)
            )
        except RockError as exc:
            return WriteFileResponse(success=False, message=f"Failed to write file {path}: {exc}")
        return WriteFileResponse(success=True, message=f"Successfully write content to file {path}")

    async def upload(self, request: UploadRequest) -> UploadResponse:
        """Upload the local file ``request.source_path`` to ``request.target_path``."""
        return await self.upload_by_path(
            request.source_path, request.target_path, request.upload_mode
        )

    async def upload_by_path(
        self,
        file_path: str | os.PathLike[str],
        target_path: str,
        upload_mode: UploadMode | str = UploadMode.AUTO,
    ) -> UploadResponse:
        """Upload a local file to ``target_path`` in the sandbox (parents created), streamed.

        Every ``upload_mode`` uploads directly to the sandbox (rock has no object-storage path
        and needs none: the file is streamed, whatever its size). A missing local file is
        ``UploadResponse(success=False, message="File not found: ...")`` as in ROCK; a failed
        upload is ``success=False`` with the reason (ROCK reports success).
        """
        try:
            UploadMode(upload_mode)
        except ValueError:
            modes = ", ".join(m.value for m in UploadMode)
            raise InvalidParameter(
                f"upload_mode: {upload_mode!r} is not one of {modes}",
                field="upload_mode",
                value=upload_mode,
            ) from None
        sandbox_id = self._require_id("upload")
        path = Path(file_path)
        if not path.exists():  # noqa: ASYNC240 - a local stat, not worth a thread
            return UploadResponse(success=False, message=f"File not found: {path}")
        if not path.is_file():  # noqa: ASYNC240
            return UploadResponse(
                success=False,
                message=f"Not a regular file: {path} (use fs.upload_dir for a directory)",
            )
        try:
            result = await self._get_driver().upload(sandbox_id, target_path, path)
        except RockError as exc:
            return UploadResponse(
                success=False, message=f"Failed to upload {path} to {target_path}: {exc}"
            )
        return UploadResponse(
            success=True,
            message=f"Successfully uploaded file {path.name} to {target_path}",
            file_name=result.file_name or target_path,
        )

    async def read_file_by_line_range(
        self,
        file_path: str,
        start_line: int | None = None,
        end_line: int | None = None,
        lines_per_request: int = 1000,
        session: str | None = None,
    ) -> ReadFileResponse:
        """Deprecated in ROCK: lines ``start_line``..``end_line`` (1-based, inclusive) of a file,
        read with ``sed`` in chunks of ``lines_per_request``; to the end when ``end_line`` is None.

        :raises InvalidParameter: ``start_line < 1``, ``end_line < start_line``,
            ``lines_per_request`` outside 1..10000.
        :raises CommandRockError: ``wc``/``sed`` failed (e.g. no such file).
        """
        if session is not None:
            warnings.warn(
                "the session argument of read_file_by_line_range is ignored",
                DeprecationWarning,
                stacklevel=2,
            )
        start_line = 1 if start_line is None else start_line
        if start_line < 1:
            raise InvalidParameter(
                f"start_line({start_line}) must be positive", field="start_line", value=start_line
            )
        if end_line is not None and end_line < start_line:
            raise InvalidParameter(
                f"end_line({end_line}) must be greater than start_line({start_line})",
                field="end_line",
                value=end_line,
            )
        if not 1 <= lines_per_request <= 10000:
            raise InvalidParameter(
                f"lines_per_request({lines_per_request}) must be between 1 and 10000",
                field="lines_per_request",
                value=lines_per_request,
            )
        if end_line is None:
            counted = await self._execute_checked(
                ["wc", "-l", file_path], f"Failed to count lines of file {file_path}"
            )
            end_line = int(counted.split()[0])
        parts = []
        first = start_line
        while first <= end_line:
            last = min(first + lines_per_request - 1, end_line)
            parts.append(
                await self._execute_checked(
                    ["sed", "-n", f"{first},{last}p", file_path], f"Failed to read file {file_path}"
                )
            )
            first = last + 1
        return ReadFileResponse(content="".join(parts))

    async def _execute_checked(self, argv: list[str], what: str) -> str:
        # Retried (as ROCK, 3 attempts) only when the sandbox did not answer; a non-zero exit is final.
        for attempt in range(3):
            try:
                result = await self.execute(Command(command=argv))
                break
            except RockletUnreachable:
                if attempt == 2:
                    raise
                await asyncio.sleep(1.0)
        if result.exit_code != 0:
            raise CommandRockError(
                f"{what}: {argv[0]} exited with code {result.exit_code}: {result.stderr.strip()}",
                sandbox_id=self._sandbox_id,
                attempted="read_file_by_line_range",
            )
        return result.stdout

    async def list_dir(self, path: str) -> ListDirResponse:
        """(rock) The entries of a directory: name, type, size, mode, mtime, symlink target."""
        return await self._call(LIST_DIR, ListDirRequest(path=NonBlankStr(path)))

    async def stat(self, path: str) -> StatResponse:
        """(rock) File information of ``path``: type (``file``, ``dir``, ``symlink``, ``other``),
        size, permission bits, mtime; a symbolic link is described itself, with its target.

        :raises InvalidParameter: no such path (as :meth:`read_file`), or a blank one.
        """
        return await self._call(STAT, StatRequest(path=NonBlankStr(path)))

    async def download(self, path: str) -> bytes:
        """(rock) The raw bytes of a file in the sandbox (any content, any size that fits in memory).

        :raises InvalidParameter: no such file, or a directory.
        """
        return b"".join([chunk async for chunk in self._download_chunks(path, "download")])

    async def _download_chunks(self, path: str, attempted: str) -> AsyncIterator[bytes]:
        chunks = self._get_driver().download(self._require_id(attempted), path)
        async with contextlib.aclosing(chunks):  # type: ignore[type-var]
            async for chunk in chunks:
                yield chunk
