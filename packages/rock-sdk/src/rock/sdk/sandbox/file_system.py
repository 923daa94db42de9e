"""Files and directories of a sandbox (ROCK's ``rock.sdk.sandbox.file_system``).

:class:`LinuxFileSystem` is ``sandbox.fs``: ``chown``, ``chmod``, ``upload_dir`` (a local
directory packed as tar.gz, replacing the target directory) and ``download_file`` (streamed
straight from the sandbox; ROCK goes through OSS).
"""

from __future__ import annotations

import abc
import os
import shlex
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from rock_core.actions import (
    ChmodRequest,
    ChmodResponse,
    ChownRequest,
    ChownResponse,
    Command,
    DownloadFileResponse,
    Observation,
)
from rock_core.errors import InvalidParameter, RockError

__all__ = ["FileSystem", "LinuxFileSystem"]


class FileSystem(abc.ABC):
    """File operations on ``sandbox`` (a :class:`~rock.sdk.sandbox.client.Sandbox`)."""

    def __init__(self, sandbox: Any = None) -> None:
        self.sandbox = sandbox

    @abc.abstractmethod
    async def chown(self, request: ChownRequest) -> ChownResponse:
        """Change the owner of paths."""

    @abc.abstractmethod
    async def chmod(self, request: ChmodRequest) -> ChmodResponse:
        """Change the mode of paths."""

    @abc.abstractmethod
    async def upload_dir(
        self, source_dir: str | Path, target_dir: str, extract_timeout: float = 600
    ) -> Observation:
        """Copy a local directory into the sandbox."""

    @abc.abstractmethod
    async def download_file(self, remote_path: str, local_path: str | Path) -> DownloadFileResponse:
        """Copy a file of the sandbox to the local machine."""


def _pack(source: Path, archive: Path) -> None:
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(str(source), arcname=".")


class LinuxFileSystem(FileSystem):
    """File operations on a Linux sandbox."""

    async def chown(self, request: ChownRequest) -> ChownResponse:
        """``chown [-R] user:user paths``; ``success`` and the command's result as ``message``.

        :raises InvalidParameter: ``request.paths`` is empty.
        """
        if not request.paths:
            raise InvalidParameter(
                "paths: chown needs at least one path", field="paths", value=request.paths
            )
        argv = [
            "chown",
            *(["-R"] if request.recursive else []),
            f"{request.remote_user}:{request.remote_user}",
            *request.paths,
        ]
        result = await self.sandbox.execute(Command(command=argv))
        return ChownResponse(success=result.exit_code == 0, message=str(result))

    async def chmod(self, request: ChmodRequest) -> ChmodResponse:
        """``chmod [-R] mode paths``; ``success`` and the command's result as ``message``.

        :raises InvalidParameter: ``request.paths`` is empty.
        """
        if not request.paths:
            raise InvalidParameter(
                "paths: chmod needs at least one path", field="paths", value=request.paths
            )
        argv = ["chmod", *(["-R"] if request.recursive else []), request.mode, *request.paths]
        result = await self.sandbox.execute(Command(command=argv))
        return ChmodResponse(success=result.exit_code == 0, message=str(result))

    async def upload_dir(
        self, source_dir: str | Path, target_dir: str, extract_timeout: float = 600
    ) -> Observation:
        """Replace ``target_dir`` (absolute) in the sandbox with the content of local ``source_dir``.

        Packs the directory as tar.gz locally, uploads it to ``/tmp/rock_upload_<ns>.tar.gz``,
        then runs ``rm -rf target && mkdir -p target && tar -xzf ... -C target`` (at most
        ``extract_timeout`` seconds) and removes the archive. Needs ``tar`` in the sandbox.
        Returns ``Observation(exit_code=0)`` or ``exit_code=1`` with ``failure_reason``.
        """
        src = Path(source_dir).expanduser().resolve()  # noqa: ASYNC240 - a local stat
        if not src.exists():
            return Observation(exit_code=1, failure_reason=f"source_dir not found: {src}")
        if not src.is_dir():
            return Observation(exit_code=1, failure_reason=f"source_dir must be a directory: {src}")
        if not isinstance(target_dir, str) or not target_dir.startswith("/"):
            return Observation(
                exit_code=1, failure_reason=f"target_dir must be absolute path: {target_dir}"
            )
        stamp = time.time_ns()
        remote_tar = f"/tmp/rock_upload_{stamp}.tar.gz"
        with tempfile.TemporaryDirectory(prefix="rock_upload_") as tmp:
            local_tar = Path(tmp) / f"rock_upload_{stamp}.tar.gz"
            try:
                check = await self.sandbox.execute(
                    Command(command=["/bin/sh", "-c", "command -v tar"])
                )
                if check.exit_code != 0:
                    return Observation(
                        exit_code=1,
                        failure_reason="sandbox has no tar command; cannot extract tarball",
                    )
                await anyio.to_thread.run_sync(_pack, src, local_tar)
                uploaded = await self.sandbox.upload_by_path(local_tar, remote_tar)
                if not uploaded.success:
                    return Observation(
                        exit_code=1, failure_reason=f"tar upload failed: {uploaded.message}"
                    )
                target = shlex.quote(target_dir)
                archive = shlex.quote(remote_tar)
                script = (
                    f"rm -rf {target} && mkdir -p {target} && tar -xzf {archive} -C {target}; "
                    f"s=$?; rm -f {archive}; exit $s"
                )
                result = await self.sandbox.execute(
                    Command(command=["/bin/sh", "-c", script], timeout=extract_timeout)
                )
            except (RockError, OSError, tarfile.TarError) as exc:
                return Observation(exit_code=1, failure_reason=f"upload_dir failed: {exc}")
        if result.exit_code != 0:
            return Observation(
                exit_code=1,
                failure_reason=f"tar extract failed: {result.stderr.strip() or result.stdout.strip()}",
            )
        return Observation(exit_code=0, output=f"uploaded {src} -> {target_dir} via tar")

    async def download_file(self, remote_path: str, local_path: str | Path) -> DownloadFileResponse:
        """Copy the sandbox's file ``remote_path`` to ``local_path`` (parents created), streamed
        straight from the sandbox (ROCK: through OSS only). The local file appears complete or not
        at all. Returns ``DownloadFileResponse(success, message)``.
        """
        local = Path(local_path).expanduser().resolve()  # noqa: ASYNC240 - a local stat
        try:
            local.parent.mkdir(parents=True, exist_ok=True)
            fd, partial = tempfile.mkstemp(
                prefix=f".{local.name}.", suffix=".part", dir=local.parent
            )
        except OSError as exc:
            return DownloadFileResponse(success=False, message=f"Cannot write {local}: {exc}")
        try:
            size = 0
            with os.fdopen(fd, "wb") as out:
                async for chunk in self.sandbox._download_chunks(remote_path, "download_file"):
                    out.write(chunk)
                    size += len(chunk)
            os.replace(partial, local)
        except (RockError, OSError) as exc:
            os.unlink(partial)
            return DownloadFileResponse(
                success=False, message=f"Failed to download {remote_path}: {exc}"
            )
        except BaseException:
            os.unlink(partial)
            raise
        return DownloadFileResponse(
            success=True, message=f"Successfully downloaded {remote_path} to {local} ({size} bytes)"
        )
