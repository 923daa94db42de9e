"""Embedded mode: rock-core's :class:`~rock_core.engine.manager.SandboxManager` in this process.

:class:`EmbeddedDriver` runs one ``SandboxManager`` in a daemon thread with its own event loop
(``anyio.run`` with a :class:`~anyio.from_thread.BlockingPortal`). It starts on first use, is
shared by every :class:`~rock.sdk.sandbox.client.Sandbox` of the process, and can be called from
any asyncio event loop, from other threads, and from synchronous code
(:meth:`EmbeddedDriver.call_blocking`).

Why a thread of its own: the engine owns timers (idle stop, auto-delete), the reconciler and the
records, which must outlive any one ``asyncio.run()`` of the user and must not depend on the
user's loop being responsive.

Two paths, so that commands pay no thread hop:

* **Lifecycle** (start, stop, status, ...) is handed to the engine's loop with
  ``portal.start_task_soon`` and awaited with :func:`asyncio.wrap_future`, never blocking the
  caller's loop (about 0.1 ms per call).
* **Runtime calls** (commands, sessions, files) go straight from the caller's loop to the
  sandbox's rocklet, over one pooled HTTP client per caller loop (closed when that loop shuts
  down). The rocklet's address is asked of the engine once per sandbox and forgotten at the
  sandbox's next lifecycle transition (the engine announces each one, in its thread, as it
  happens), so a stopped sandbox is never reached at a stale address. Each call still counts as
  activity for the idle timer. Callers that are not in an asyncio loop take the first path.

At interpreter exit an :mod:`atexit` handler closes the engine, which removes the sandboxes this
process made (``EngineConfig.remove_on_close``); containers of a process that died without
that chance are removed by the next engine that starts (``reap_orphans``).

While a runtime call is in flight (a long command, a big upload) the sandbox counts as active, so
its idle timer (``auto_clear_seconds``) never stops it under a running command.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

import anyio
import anyio.abc
import httpx
from anyio.from_thread import BlockingPortal

from rock.sdk._drivers.connect import (
    PortConnection,
    RockletShell,
    Shell,
    TunnelConnection,
    check_port,
)
from rock.sdk._drivers.embedded_thread import DriverThread, closed_error
from rock.sdk._drivers.embedded_tracking import AddressBook, LocalPorts
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
from rock_core.engine.config import EngineConfig
from rock_core.engine.manager import SandboxManager
from rock_core.errors import InvalidParameter, RockletUnreachable, SandboxNotFound
from rock_core.operations import Operation
from rock_core.responses import rocklet_statistics, start_response, status_response
from rock_core.rocklet_client import RockletClient, new_http_client
from rock_core.states import LIVE_STATES

__all__ = ["EmbeddedDriver"]


T = TypeVar("T")
Req = TypeVar("Req")
Resp = TypeVar("Resp")


async def _close_with_loop(http: httpx.AsyncClient) -> AsyncGenerator[None, None]:
    # Suspended for the loop's lifetime; asyncio.run() closes every async generator at shutdown,
    # which closes the loop's pooled client with its own loop still running.
    try:
        yield
    finally:
        await http.aclose()


class EmbeddedDriver(DriverThread):
    """A ``SandboxManager`` in a daemon thread, callable from any event loop or thread.

    Implements :class:`~rock.sdk._drivers.base.Driver`. Most code uses the process-wide one
    (:func:`get_embedded_driver`); tests and tools may make their own.

    :param config: the manager's settings (default :class:`EngineConfig()`: Docker runtime,
        records in memory, sandboxes removed when the engine closes).
    :param manager_factory: builds the manager from ``config`` in the engine's thread (default
        :class:`SandboxManager`), e.g. to pass a runtime instance.
    :param close_timeout: seconds :meth:`close` waits for the engine to remove its sandboxes.

    Closing an engine removes the units it made (found by its ``rock.engine_id`` label), so
    several engines in one process do not touch each other's sandboxes.
    """

    def __init__(
        self,
        config: EngineConfig | None = None,
        *,
        manager_factory: Callable[[EngineConfig], SandboxManager] | None = None,
        close_timeout: float = 120.0,
    ) -> None:
        self.config = config if config is not None else EngineConfig()
        self._factory = manager_factory or (lambda c: SandboxManager(c))
        self._close_timeout = close_timeout
        self._lock = threading.Lock()
        self._portal: BlockingPortal | None = None
        self._manager: SandboxManager | None = None
        self._thread: threading.Thread | None = None
        self._thread_id: int | None = None
        self._stop: anyio.Event | None = None
        self._tg: anyio.abc.TaskGroup | None = None  # the engine loop's own tasks (streams' pumps)
        self._closed = False
        self._handoffs = {}
        self._loop_ended = False
        self._addresses = AddressBook()
        self._local_ports = LocalPorts()
        self._loop_clients: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, tuple[httpx.AsyncClient, Any]
        ] = weakref.WeakKeyDictionary()
        self._loop_clients_lock = threading.Lock()

    def __repr__(self) -> str:
        state = (
            "closed" if self._closed else "running" if self._portal is not None else "not started"
        )
        return f"<EmbeddedDriver {state} runtime={self.config.runtime!r}>"

    async def _rocklet_call(
        self,
        sandbox_id: str,
        attempted: str,
        method: Callable[..., Awaitable[T]],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> T:
        client = self.manager.rocklet(sandbox_id, attempted)
        with self.manager.call(sandbox_id):
            return await method(client, *args, **kwargs)

    async def _rocklet_stream(
        self,
        sandbox_id: str,
        attempted: str,
        method: Callable[..., AsyncIterator[T]],
        args: tuple[Any, ...],
    ) -> AsyncIterator[T]:
        client = self.manager.rocklet(sandbox_id, attempted)
        with self.manager.call(sandbox_id):
            async with contextlib.aclosing(method(client, *args)) as items:  # type: ignore[type-var]
                async for item in items:
                    yield item

    async def _manager_call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return await getattr(self.manager, name)(*args, **kwargs)

    # -- runtime calls straight from the caller's loop -----------------------------------------

    async def _address_of(self, sandbox_id: str, attempted: str) -> tuple[str, int, str | None]:
        """(engine loop) The rocklet address and secret of a running sandbox; raises the
        manager's error if not running."""
        client = self.manager.rocklet(sandbox_id, attempted)
        address = (
            client.host,
            client.port,
            client.token,
        )  # (path, 0, ...) for a rocklet on a unix socket
        self._addresses.put(sandbox_id, address)
        return address

    async def _loop_http(self, loop: asyncio.AbstractEventLoop) -> httpx.AsyncClient:
        with self._loop_clients_lock:
            entry = self._loop_clients.get(loop)
        if entry is not None:
            return entry[0]
        http = new_http_client(lean=True)  # this loop is asyncio: the lean calls (RockletHttp)
        closer = _close_with_loop(http)
        await closer.__anext__()  # now the loop finalizes it at shutdown
        with self._loop_clients_lock:
            entry = self._loop_clients.setdefault(loop, (http, closer))
        if entry[0] is not http:  # another task of this loop made one first
            await closer.aclose()
        return entry[0]

    async def _direct_client(self, sandbox_id: str, attempted: str) -> RockletClient | None:
        """A client bound to the caller's loop, or ``None`` when the call must go through the engine."""
        if self._manager is None or threading.get_ident() == self._thread_id:
            return None
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # another async library
            return None
        address = self._addresses.get(sandbox_id)
        if address is None:
            address = await self._call(self._address_of, sandbox_id, attempted)
        return RockletClient(
            await self._loop_http(loop), address[0], address[1], sandbox_id, token=address[2]
        )

    async def _explain_unreachable(self, sandbox_id: str, attempted: str) -> None:
        """After a rocklet did not answer: raise the engine's error if the sandbox is no longer running."""
        with contextlib.suppress(RockletUnreachable):
            status = await self.get_status(sandbox_id, True)
            if status.state not in LIVE_STATES:
                await self._call(
                    self._address_of, sandbox_id, attempted
                )  # raises "not running (stopped: why)"

    async def _rocklet(
        self,
        sandbox_id: str,
        attempted: str,
        method: Callable[..., Awaitable[T]],
        *args: Any,
        **kwargs: Any,
    ) -> T:
        client = await self._direct_client(sandbox_id, attempted)
        if client is None:
            return await self._call(self._rocklet_call, sandbox_id, attempted, method, args, kwargs)
        try:
            with self.manager.call(sandbox_id):  # safe from the caller's thread
                return await method(client, *args, **kwargs)
        except RockletUnreachable:
            await self._explain_unreachable(sandbox_id, attempted)
            raise

    async def _stream(
        self, sandbox_id: str, attempted: str, method: Callable[..., AsyncIterator[T]], *args: Any
    ) -> AsyncIterator[T]:
        client = await self._direct_client(sandbox_id, attempted)
        if client is None:
            items = self._iterate(self._rocklet_stream, sandbox_id, attempted, method, args)
        else:
            items = method(client, *args)
        try:
            with self.manager.call(sandbox_id) if client is not None else contextlib.nullcontext():
                async with contextlib.aclosing(items):  # type: ignore[type-var]
                    async for item in items:
                        yield item
        except RockletUnreachable:
            if client is not None:
                await self._explain_unreachable(sandbox_id, attempted)
            raise

    # -- Driver: lifecycle ---------------------------------------------------------------------

    async def start_async(
        self,
        request: SandboxStartRequest,
        *,
        user_id: str | None = None,
        experiment_id: str | None = None,
        namespace: str | None = None,
        cluster: str | None = None,
    ) -> SandboxStartResponse:
        """Accept a start (``pending``) and return the new sandbox's id and placement."""
        identity = {
            "user_id": user_id,
            "experiment_id": experiment_id,
            "namespace": namespace,
            "cluster": cluster,
        }
        return start_response(
            await self._call(self._manager_call, "start_async", (request,), identity)
        )

    async def wait_until_running(
        self, sandbox_id: str, timeout: float | None = None
    ) -> SandboxStatusResponse:
        """Wait on the engine's own event (no polling) for the start to finish."""
        return status_response(
            await self._call(self._manager_call, "wait_until_running", (sandbox_id, timeout), {})
        )

    async def wait_any(self, sandbox_ids: Sequence[str], timeout: float) -> WaitAnyResponse:
        """(rock) Wait up to ``timeout`` seconds until the start of any of ``sandbox_ids`` has
        settled: the statuses of all that have, and the ids the engine has no sandbox of."""

        async def on_engine() -> WaitAnyResponse:
            settled = await self.manager.wait_any(sandbox_ids, timeout)
            statuses, unknown = [], []
            for sandbox_id in settled:
                try:
                    statuses.append(
                        status_response(await self.manager.get_status(sandbox_id, True))
                    )
                except SandboxNotFound:
                    unknown.append(sandbox_id)
            return WaitAnyResponse(statuses=statuses, unknown=unknown)

        answer: WaitAnyResponse = await self._call(on_engine)
        return answer

    async def get_status(
        self, sandbox_id: str, include_all_states: bool = False
    ) -> SandboxStatusResponse:
        """ROCK's ``get_status``."""
        return status_response(
            await self._call(self._manager_call, "get_status", (sandbox_id, include_all_states), {})
        )

    async def set_warm_pool(self, request: SandboxStartRequest, size: int) -> None:
        """Keep ``size`` started sandboxes of the kind ``request`` describes in this process's engine."""
        await self._call(self._manager_call, "set_warm_pool", (request, size), {})

    async def warm_pools(self) -> list[WarmPoolStatus]:
        """The warm pools of this process's engine."""

        async def on_engine() -> list[WarmPoolStatus]:
            return self.manager.warm_pools()

        return await self._call(on_engine)

    async def snapshot(
        self, sandbox_id: str, name: str | None = None, archive: bool = False
    ) -> SnapshotInfo:
        """(rock) Keep the sandbox's files as a snapshot of this engine's."""
        snap: SnapshotInfo = await self._call(
            self._manager_call, "snapshot", (sandbox_id, name), {"archive": archive}
        )
        return snap

    async def list_snapshots(self) -> list[SnapshotInfo]:
        """(rock) This engine's snapshots."""
        snaps: list[SnapshotInfo] = await self._call(self._manager_call, "list_snapshots", (), {})
        return snaps

    async def delete_snapshot(self, name: str) -> None:
        """(rock) Delete a snapshot of this engine's."""
        await self._call(self._manager_call, "delete_snapshot", (name,), {})

    async def fork(self, sandbox_id: str, count: int) -> ForkResponse:
        """(rock) A snapshot of the sandbox and ``count`` starts from it."""
        snap, records = await self._call(self._manager_call, "fork", (sandbox_id, count), {})
        return ForkResponse(snapshot=snap, sandboxes=[start_response(r) for r in records])

    async def commit(
        self, sandbox_id: str, image_tag: str, username: str, password: str
    ) -> CommitStatusResponse:
        """ROCK's commit of the sandbox's files as ``image_tag``: its ``RUNNING`` status."""
        args = (sandbox_id, image_tag, username, password)
        status: CommitStatusResponse = await self._call(self._manager_call, "commit", args, {})
        return status

    async def get_commit_status(self, sandbox_id: str) -> CommitStatusResponse:
        """The sandbox's last commit's status."""
        args = (sandbox_id,)
        status: CommitStatusResponse = await self._call(
            self._manager_call, "get_commit_status", args, {}
        )
        return status

    async def list_sandboxes(
        self, filters: Mapping[str, str] | None = None
    ) -> list[SandboxStatusResponse]:
        """The pending and running sandboxes of this process's engine whose fields equal ``filters``."""

        async def on_engine() -> list[SandboxStatusResponse]:
            manager = self.manager
            states = sorted(LIVE_STATES, key=lambda s: s.value)
            return [
                status_response(s)
                for s in manager.statuses_of(manager.list_records(states=states, filters=filters))
            ]

        return await self._call(on_engine)

    async def stop(self, sandbox_id: str) -> None:
        """Stop the sandbox."""
        await self._call(self._manager_call, "stop", (sandbox_id,), {})

    async def delete(self, sandbox_id: str) -> None:
        """Delete a stopped sandbox."""
        await self._call(self._manager_call, "delete", (sandbox_id,), {})

    async def archive(self, sandbox_id: str) -> None:
        """Start archiving a stopped sandbox."""
        await self._call(self._manager_call, "archive", (sandbox_id,), {})

    async def restart(self, sandbox_id: str) -> SandboxStartResponse:
        """Start a stopped sandbox again (an archived one: restore it)."""
        return start_response(await self._call(self._manager_call, "restart", (sandbox_id,), {}))

    async def pause(self, sandbox_id: str) -> SandboxStatusResponse:
        """Freeze a running sandbox; calls from callers' loops ask the engine again (refused)."""

        async def on_engine() -> SandboxStatusResponse:
            record = await self.manager.pause(sandbox_id)
            self._addresses.forget(sandbox_id)
            return status_response(self.manager.status_of(record))

        return await self._call(on_engine)

    async def resume(self, sandbox_id: str) -> SandboxStatusResponse:
        """Thaw a paused sandbox."""

        async def on_engine() -> SandboxStatusResponse:
            return status_response(self.manager.status_of(await self.manager.resume(sandbox_id)))

        return await self._call(on_engine)

    async def update_egress(
        self, sandbox_id: str, egress: dict[str, Any] | None
    ) -> SandboxStatusResponse:
        """Replace a running sandbox's egress policy, in force on the host before this returns."""

        async def on_engine() -> SandboxStatusResponse:
            record = await self.manager.update_egress(sandbox_id, egress)
            return status_response(self.manager.status_of(record))

        return await self._call(on_engine)

    async def reset(self, sandbox_id: str, snapshot: str | None = None) -> SandboxStatusResponse:
        """Put a running sandbox back to its image's or a snapshot's files (a new unit)."""

        async def on_engine() -> SandboxStatusResponse:
            record = await self.manager.reset(sandbox_id, snapshot)
            self._addresses.forget(sandbox_id)
            return status_response(self.manager.status_of(record))

        return await self._call(on_engine)

    # -- Driver: the catalog's operations --------------------------------------------------------

    async def call(self, sandbox_id: str, op: Operation[Req, Resp], request: Req) -> Resp:
        """Any operation of kind ``call``, straight to the sandbox's rocklet (as a call: the
        sandbox is not idle-stopped under it)."""
        return await self._rocklet(sandbox_id, op.name, RockletClient.call, op, request)

    # -- Driver: streams, files and figures ------------------------------------------------------

    def execute_stream(self, sandbox_id: str, command: Command) -> AsyncIterator[dict[str, Any]]:
        """Run a one-shot command, yielding its events as they happen."""
        return self._stream(sandbox_id, "execute_stream", RockletClient.execute_stream, command)

    # -- Driver: files -------------------------------------------------------------------------

    async def upload(
        self,
        sandbox_id: str,
        target_path: str,
        data: bytes | str | os.PathLike[str],
        *,
        unzip: bool = False,
    ) -> UploadResponse:
        """Upload bytes, or the local file at a path (streamed), to ``target_path``."""
        return await self._rocklet(
            sandbox_id, "upload", RockletClient.upload, target_path, data, unzip=unzip
        )

    def download(self, sandbox_id: str, path: str) -> AsyncIterator[bytes]:
        """The raw bytes of a file in the sandbox, in chunks."""
        return self._stream(sandbox_id, "download", RockletClient.download, path)

    async def get_statistics(self, sandbox_id: str) -> dict[str, Any]:
        """CPU, memory, disk and network figures (``disk``: the sandbox's own use, as the
        admin's; :func:`~rock_core.responses.rocklet_statistics`)."""
        figures = await self._rocklet(sandbox_id, "get_statistics", RockletClient.get_statistics)
        status = await self._call(self._manager_call, "get_status", (sandbox_id, False), {})
        return rocklet_statistics(figures, status)

    # -- Driver: background processes ------------------------------------------------------------

    async def start_process(
        self,
        sandbox_id: str,
        command: CommandLine,
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> ProcessInfo:
        """Start a background command."""
        return await self._rocklet(
            sandbox_id,
            "start_process",
            RockletClient.start_process,
            command,
            cwd=cwd,
            env=env,
            timeout=timeout,
        )

    async def process_status(
        self, sandbox_id: str, process_id: str, *, wait: float = 0.0, tail: int = 4096
    ) -> ProcessInfo:
        """A background process's state."""
        return await self._rocklet(
            sandbox_id,
            "process_status",
            RockletClient.process_status,
            process_id,
            wait=wait,
            tail=tail,
        )

    async def process_output(
        self, sandbox_id: str, process_id: str, *, offset: int = 0, limit: int | None = None
    ) -> bytes:
        """A background process's output bytes."""
        return await self._rocklet(
            sandbox_id,
            "process_output",
            RockletClient.process_output,
            process_id,
            offset=offset,
            limit=limit,
        )

    async def kill_process(
        self, sandbox_id: str, process_id: str, *, signal: int | str = 15, wait: float = 5.0
    ) -> ProcessInfo:
        """Signal a background process."""
        return await self._rocklet(
            sandbox_id,
            "kill_process",
            RockletClient.kill_process,
            process_id,
            signal=signal,
            wait=wait,
        )

    # -- a sandbox's own ports and terminals ------------------------------------------------

    async def port_url(self, sandbox_id: str, port: int, path: str = "") -> str:
        """(rock) ``http://127.0.0.1:P/path``: a host port this engine opens on first use that
        reaches ``port`` in the sandbox (through its rocklet), closed when the sandbox stops."""
        check_port(port)
        host_port = await self._call(self._local_port, sandbox_id, port)
        return f"http://127.0.0.1:{host_port}/" + path.lstrip("/")

    async def _local_port(self, sandbox_id: str, port: int) -> int:
        if self._tg is None:
            raise closed_error()
        manager = self.manager
        client = manager.rocklet(sandbox_id, "get_url")
        return await self._local_ports.open(
            self._tg, client, sandbox_id, port, lambda: manager.touch(sandbox_id)
        )

    async def _caller_client(self, sandbox_id: str, attempted: str) -> RockletClient:
        """A rocklet client usable from the caller's loop (the engine started if need be)."""
        if self._manager is None:
            await anyio.to_thread.run_sync(self.start)
        if threading.get_ident() == self._thread_id:
            return self.manager.rocklet(sandbox_id, attempted)
        client = await self._direct_client(sandbox_id, attempted)
        if client is None:
            raise InvalidParameter(
                f"{attempted} in embedded mode needs an asyncio event loop", attempted=attempted
            )
        return client

    async def open_port(self, sandbox_id: str, port: int) -> PortConnection:
        """(rock) A TCP connection to ``127.0.0.1:port`` in the sandbox, through its rocklet; the
        sandbox is not idle-stopped while it is open."""
        check_port(port)
        client = await self._caller_client(sandbox_id, "port-forward")
        call = self.manager.call(sandbox_id)
        call.__enter__()
        try:
            stream = await client.open_tunnel(port)
        except BaseException:
            call.__exit__(None, None, None)
            raise
        return TunnelConnection(stream, on_close=lambda: call.__exit__(None, None, None))

    async def open_shell(self, sandbox_id: str, **options: Any) -> Shell:
        """(rock) A program on a pseudo-terminal in the sandbox (``user``, ``rows``, ``cols``,
        ``term``, ``command``: :meth:`RockletClient.open_pty`), straight to its rocklet."""
        client = await self._caller_client(sandbox_id, "shell")
        call = self.manager.call(sandbox_id)
        call.__enter__()
        try:
            stream = await client.open_pty(**options)
        except BaseException:
            call.__exit__(None, None, None)
            raise
        return RockletShell(stream, on_close=lambda: call.__exit__(None, None, None))
