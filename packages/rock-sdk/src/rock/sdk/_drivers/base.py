"""The :class:`Driver` protocol: everything a :class:`~rock.sdk.sandbox.client.Sandbox` asks of
whatever runs its sandboxes.

Two implementations: :class:`~rock.sdk._drivers.embedded.EmbeddedDriver` (rock-core's
``SandboxManager`` in this process, on the local Docker engine) and
:class:`~rock.sdk._drivers.remote.RemoteDriver` (rock's admin server, over its HTTP API). Every
call names its sandbox by id and returns the wire models of :mod:`rock_core.actions`; failures
are :class:`~rock_core.errors.RockError`\\ s.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from rock_core.actions import (
    Command,
    CommandLine,
    CommitStatusResponse,
    ForkResponse,
    ProcessInfo,
    SandboxStartRequest,
    SandboxStartResponse,
    SandboxStatusResponse,
    SnapshotInfo,
    UploadResponse,
    WaitAnyResponse,
    WarmPoolStatus,
)
from rock_core.operations import Operation

__all__ = ["Driver"]

Req = TypeVar("Req")
Resp = TypeVar("Resp")


class Driver(Protocol):
    """Lifecycle and runtime calls on sandboxes, by sandbox id (async, any asyncio loop)."""

    # -- lifecycle ---------------------------------------------------------------------------

    async def start_async(
        self,
        request: SandboxStartRequest,
        *,
        user_id: str | None = None,
        experiment_id: str | None = None,
        namespace: str | None = None,
        cluster: str | None = None,
    ) -> SandboxStartResponse:
        """Accept a start and return at once with the new sandbox's id (state ``pending``)."""
        ...

    async def wait_until_running(
        self, sandbox_id: str, timeout: float | None = None
    ) -> SandboxStatusResponse:
        """Wait for the sandbox's current start to finish; raise the start's error if it failed."""
        ...

    async def wait_any(self, sandbox_ids: Sequence[str], timeout: float) -> WaitAnyResponse:
        """(rock) Wait up to ``timeout`` seconds until the start of any of ``sandbox_ids`` has
        settled; the statuses of all that have (``include_all_states``), and the ids unknown to
        the engine (one wait for many sandboxes: :meth:`wait_until_running` of many concurrent
        starts uses it through the admin)."""
        ...

    async def get_status(
        self, sandbox_id: str, include_all_states: bool = False
    ) -> SandboxStatusResponse:
        """ROCK's ``get_status`` (without ``include_all_states`` only pending/running are found)."""
        ...

    async def list_sandboxes(
        self, filters: Mapping[str, str] | None = None
    ) -> list[SandboxStatusResponse]:
        """(rock) The pending and running sandboxes this driver may see, whose fields equal ``filters``
        (``user_id``, ``experiment_id``, ``namespace``, ``cluster``, ``image``, ``state``)."""
        ...

    async def set_warm_pool(self, request: SandboxStartRequest, size: int) -> None:
        """(rock) Keep ``size`` started sandboxes of the kind ``request`` describes (0 removes the pool)."""
        ...

    async def warm_pools(self) -> list[WarmPoolStatus]:
        """(rock) Every warm pool: target size, members ready and starting, claims, failures."""
        ...

    async def snapshot(
        self, sandbox_id: str, name: str | None = None, archive: bool = False
    ) -> SnapshotInfo:
        """(rock) Keep the sandbox's files (not its processes) as a snapshot of its tenant
        (``archive``: in the engine's archive store as well)."""
        ...

    async def list_snapshots(self) -> list[SnapshotInfo]:
        """(rock) The caller's tenant's snapshots, oldest first."""
        ...

    async def delete_snapshot(self, name: str) -> None:
        """(rock) Delete one of the caller's snapshots (refused while sandboxes use it)."""
        ...

    async def fork(self, sandbox_id: str, count: int) -> ForkResponse:
        """(rock) A snapshot of the sandbox and ``count`` starts from it (each ``pending``)."""
        ...

    async def commit(
        self, sandbox_id: str, image_tag: str, username: str, password: str
    ) -> CommitStatusResponse:
        """ROCK's commit: begin keeping the sandbox's files as ``image_tag`` (``RUNNING``)."""
        ...

    async def get_commit_status(self, sandbox_id: str) -> CommitStatusResponse:
        """ROCK's commit: the sandbox's last commit's status."""
        ...

    async def stop(self, sandbox_id: str) -> None:
        """Stop the sandbox (unknown or already stopped: no error)."""
        ...

    async def delete(self, sandbox_id: str) -> None:
        """Delete a stopped sandbox (unknown or deleted: no error)."""
        ...

    async def restart(self, sandbox_id: str) -> SandboxStartResponse:
        """Start a stopped sandbox again (restore an archived one); wait with :meth:`wait_until_running`."""
        ...

    async def archive(self, sandbox_id: str) -> None:
        """Start archiving a stopped sandbox (returns at once; it becomes ``archived``)."""
        ...

    async def pause(self, sandbox_id: str) -> SandboxStatusResponse:
        """(rock) Freeze a running sandbox (it stays ``running``, ``paused``); its status."""
        ...

    async def resume(self, sandbox_id: str) -> SandboxStatusResponse:
        """(rock) Thaw a paused sandbox; its status."""
        ...

    async def update_egress(
        self, sandbox_id: str, egress: dict[str, Any] | None
    ) -> SandboxStatusResponse:
        """(rock) Replace a running sandbox's egress policy (in force before this returns)."""
        ...

    async def reset(self, sandbox_id: str, snapshot: str | None = None) -> SandboxStatusResponse:
        """(rock) Put a running sandbox back to its image's files, or to the snapshot
        ``snapshot``'s: its processes and sessions end, its id, ports and secret stay; its status."""
        ...

    # -- the catalog's operations --------------------------------------------------------------

    async def call(self, sandbox_id: str, op: Operation[Req, Resp], request: Req) -> Resp:
        """Any operation of kind ``call`` of :mod:`rock_core.operations` (execute, the bash
        sessions, read_file, write_file, list_dir, ...): its request, its response model."""
        ...

    # -- streams, files and figures (hand-written: see the catalog's kinds) ---------------------

    def execute_stream(self, sandbox_id: str, command: Command) -> AsyncIterator[dict[str, Any]]:
        """Run a one-shot command, yielding its start, output and exit events as they happen."""
        ...

    # -- files -------------------------------------------------------------------------------

    async def upload(
        self,
        sandbox_id: str,
        target_path: str,
        data: bytes | str | os.PathLike[str],
        *,
        unzip: bool = False,
    ) -> UploadResponse:
        """Upload bytes, or the local file at a path, to ``target_path``."""
        ...

    def download(self, sandbox_id: str, path: str) -> AsyncIterator[bytes]:
        """The raw bytes of a file in the sandbox, in chunks."""
        ...

    async def get_statistics(self, sandbox_id: str) -> dict[str, Any]:
        """CPU, memory, disk and network figures."""
        ...

    # -- background processes ------------------------------------------------------------------

    async def start_process(
        self,
        sandbox_id: str,
        command: CommandLine,
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> ProcessInfo:
        """Start a background command (its real exit code stays readable)."""
        ...

    async def process_status(
        self, sandbox_id: str, process_id: str, *, wait: float = 0.0, tail: int = 4096
    ) -> ProcessInfo:
        """A background process's state, waiting up to ``wait`` seconds for it to end."""
        ...

    async def process_output(
        self, sandbox_id: str, process_id: str, *, offset: int = 0, limit: int | None = None
    ) -> bytes:
        """A background process's output bytes from ``offset``."""
        ...

    async def kill_process(
        self, sandbox_id: str, process_id: str, *, signal: int | str = 15, wait: float = 5.0
    ) -> ProcessInfo:
        """Signal a background process."""
        ...

    # -- the sandbox's own services (rock) -------------------------------------------------------

    async def port_url(self, sandbox_id: str, port: int, path: str = "") -> str:
        """A URL that reaches ``port`` in the sandbox (embedded: a local port; remote: the admin's proxy)."""
        ...

    async def open_port(self, sandbox_id: str, port: int) -> Any:
        """A :class:`~rock.sdk._drivers.connect.PortConnection` to ``127.0.0.1:port`` in the sandbox."""
        ...

    async def open_shell(self, sandbox_id: str, **options: Any) -> Any:
        """A :class:`~rock.sdk._drivers.connect.Shell`: a program on a pseudo-terminal in the sandbox."""
        ...
