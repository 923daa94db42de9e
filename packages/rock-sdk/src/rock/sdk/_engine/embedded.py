"""Embedded mode: rock-core's :class:`~rock_core.engine.manager.SandboxManager` in this process.

:class:`EmbeddedEngine` runs one ``SandboxManager`` in a daemon thread with its own event loop
(``anyio.run`` with a :class:`~anyio.from_thread.BlockingPortal`). It starts on first use, is
shared by every :class:`~rock.sdk.sandbox.client.Sandbox` of the process, and can be called from
any asyncio event loop, from other threads, and from synchronous code
(:meth:`EmbeddedEngine.call_blocking`).

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
import atexit
import contextlib
import logging
import os
import threading
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, TypeVar

import anyio
import anyio.abc
import httpx
from anyio.from_thread import BlockingPortal

from rock.sdk._engine.connect import (
    PortConnection,
    RockletShell,
    Shell,
    TunnelConnection,
    check_port,
)
from rock_core import hookimpl
from rock_core.actions import (
    Command,
    CommandLine,
    ProcessInfo,
    SandboxStartRequest,
    SandboxStartResponse,
    SandboxStatusResponse,
    UploadResponse,
    WarmPoolStatus,
)
from rock_core.engine.config import EngineConfig
from rock_core.engine.forwarding import PortForwards
from rock_core.engine.manager import SandboxManager
from rock_core.errors import InternalServerRockError, InvalidParameter, RockletUnreachable
from rock_core.models import Port
from rock_core.operations import Operation
from rock_core.responses import start_response, status_response
from rock_core.rocklet_client import RockletClient, new_http_client
from rock_core.states import LIVE_STATES

__all__ = [
    "EmbeddedEngine",
    "close_embedded_engine",
    "configure_embedded_engine",
    "get_embedded_engine",
]

log = logging.getLogger("rock.sdk.engine")

T = TypeVar("T")
Req = TypeVar("Req")
Resp = TypeVar("Resp")

# Items a streamed call (download, execute_stream) may run ahead of its reader.
_STREAM_BUFFER = 16


def _closed_error() -> InternalServerRockError:
    return InternalServerRockError(
        "rock's embedded engine is closed (the interpreter is exiting, or close_embedded_engine() was called); "
        "its sandboxes were removed",
        attempted="call",
    )


async def _close_manager(manager: SandboxManager) -> None:
    """Close ``manager`` from the task that entered it (its task group must exit there).

    ``aclose`` shields its own clean-up, so a cancelled caller still removes the sandboxes.
    """
    await manager.aclose()


class _AddressBook:
    """Rocklet addresses of running sandboxes, for calls straight from callers' loops.

    Registered as a plugin of the engine's manager: every lifecycle transition of a sandbox
    (stop, restart, ...) drops its entry at once, in the engine's thread, before the engine acts
    on the unit; the next call asks the engine again.
    """

    def __init__(self) -> None:
        self._addresses: dict[str, tuple[str, int, str | None]] = {}

    def get(self, sandbox_id: str) -> tuple[str, int, str | None] | None:
        """``(host, port, secret)`` of ``sandbox_id``'s rocklet, when known and still valid."""
        return self._addresses.get(sandbox_id)

    def put(self, sandbox_id: str, address: tuple[str, int, str | None]) -> None:
        """Remember an address the engine just handed out (engine thread only)."""
        self._addresses[sandbox_id] = address

    @hookimpl
    def rock_sandbox_transition(self, record: Any, event: Any, old: Any, new: Any) -> None:
        """Forget the sandbox's address: whatever state it is in now, ask the engine again."""
        self._addresses.pop(record.sandbox_id, None)


class _LocalPorts:
    """Host ports on 127.0.0.1 for :meth:`EmbeddedEngine.port_url`, one per sandbox port asked
    for, each carried through the sandbox's rocklet (rock-core's :class:`PortForwards`).

    Registered as a plugin like :class:`_AddressBook`: a sandbox's transition (stop, restart)
    closes its ports; the next ``get_url`` opens a new one. Engine thread only.
    """

    def __init__(self) -> None:
        self._forwards: PortForwards | None = None
        self._keys: dict[str, set[str]] = {}

    async def open(
        self,
        task_group: anyio.abc.TaskGroup,
        client: RockletClient,
        sandbox_id: str,
        port: int,
        touch: Callable[[], None],
    ) -> int:
        """The host port that reaches ``port`` of ``sandbox_id`` (opened on first use); each
        connection to it calls ``touch`` (activity for the idle timer)."""
        if self._forwards is None:
            self._forwards = PortForwards(task_group)
        key = f"{sandbox_id}\0{port}"
        mapping = self._forwards.mapping(key) or await self._forwards.open(
            key,
            _Touching(client, touch),  # type: ignore[arg-type]  # the tunnel half of a client
            [port],
        )
        self._keys.setdefault(sandbox_id, set()).add(key)
        return int(mapping[Port(port)])

    @hookimpl
    def rock_sandbox_transition(self, record: Any, event: Any, old: Any, new: Any) -> None:
        """Close the sandbox's local ports: its rocklet changes or goes away."""
        for key in self._keys.pop(record.sandbox_id, ()):
            if self._forwards is not None:
                self._forwards.close(key)


class _Touching:
    """A rocklet client whose every new connection counts as the sandbox's activity."""

    def __init__(self, client: RockletClient, touch: Callable[[], None]) -> None:
        self._client = client
        self._touch = touch
        self.sandbox_id = client.sandbox_id

    async def open_tunnel(self, port: int) -> anyio.abc.ByteStream:
        self._touch()
        return await self._client.open_tunnel(port)

    async def connect(self) -> anyio.abc.ByteStream:
        self._touch()
        return await self._client.connect()


async def _close_with_loop(http: httpx.AsyncClient) -> AsyncGenerator[None, None]:
    # Suspended for the loop's lifetime; asyncio.run() closes every async generator at shutdown,
    # which closes the loop's pooled client with its own loop still running.
    try:
        yield
    finally:
        await http.aclose()


class EmbeddedEngine:
    """A ``SandboxManager`` in a daemon thread, callable from any event loop or thread.

    Implements :class:`~rock.sdk._engine.base.Engine`. Most code uses the process-wide one
    (:func:`get_embedded_engine`); tests and tools may make their own.

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
        self._addresses = _AddressBook()
        self._local_ports = _LocalPorts()
        self._loop_clients: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, tuple[httpx.AsyncClient, Any]
        ] = weakref.WeakKeyDictionary()
        self._loop_clients_lock = threading.Lock()

    def __repr__(self) -> str:
        state = (
            "closed" if self._closed else "running" if self._portal is not None else "not started"
        )
        return f"<EmbeddedEngine {state} runtime={self.config.runtime!r}>"

    # -- the engine's own lifecycle ------------------------------------------------------------

    @property
    def running(self) -> bool:
        """Whether the engine's thread is up and taking calls."""
        return self._portal is not None

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (a closed engine cannot be started again)."""
        return self._closed

    @property
    def manager(self) -> SandboxManager:
        """The manager, for code that runs on the engine's loop (``call_blocking`` functions)."""
        if self._manager is None:
            raise RuntimeError("the embedded engine is not running")
        return self._manager

    def start(self) -> None:
        """Start the engine's thread and manager if they are not running; block until ready.

        :raises InvalidParameter: no runtime named ``config.runtime`` is installed (e.g.
            rock-docker is missing), or another error building the manager.
        :raises InternalServerRockError: the engine was closed.
        """
        if self._portal is not None:
            return
        with self._lock:
            if self._closed:
                raise _closed_error()
            if self._portal is not None:
                return
            ready = threading.Event()
            failure: list[BaseException] = []
            thread = threading.Thread(
                target=self._thread_main,
                args=(ready, failure),
                name="rock-embedded-engine",
                daemon=True,
            )
            thread.start()
            ready.wait()
            if failure:
                thread.join()
                raise failure[0]
            self._thread = thread

    def _thread_main(self, ready: threading.Event, failure: list[BaseException]) -> None:
        try:
            anyio.run(self._serve, ready, backend="asyncio")
        except BaseException as exc:  # noqa: BLE001 - reported to the thread that waits for us
            if not ready.is_set():
                failure.append(exc)
            else:
                log.exception("rock's embedded engine stopped with an error")
        finally:
            self._portal = None
            self._manager = None
            ready.set()

    async def _serve(self, ready: threading.Event) -> None:
        self._thread_id = threading.get_ident()
        manager = self._factory(self.config)
        manager.plugins.pm.register(self._addresses, name=f"rock.sdk.embedded-addresses-{id(self)}")
        manager.plugins.pm.register(
            self._local_ports, name=f"rock.sdk.embedded-local-ports-{id(self)}"
        )
        await manager.__aenter__()
        try:
            async with BlockingPortal() as portal, anyio.create_task_group() as tg:
                self._stop = anyio.Event()
                self._manager = manager
                self._tg = tg
                self._portal = portal
                ready.set()
                await self._stop.wait()
                self._portal = None
                await portal.stop(cancel_remaining=True)  # calls in flight end with a cancellation
                tg.cancel_scope.cancel()
        finally:
            await _close_manager(manager)

    def close(self) -> None:
        """Stop the engine: cancel calls in flight, remove this process's sandboxes. Idempotent.

        Blocks until done (at most ``close_timeout`` seconds). Must not be called from a
        function running on the engine's own loop.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            portal, thread, stop = self._portal, self._thread, self._stop
        if portal is None or thread is None or stop is None:
            return
        if threading.get_ident() == self._thread_id:
            raise RuntimeError("the embedded engine cannot be closed from its own thread")
        with contextlib.suppress(RuntimeError):  # its loop may already be gone
            portal.call(stop.set)
        thread.join(self._close_timeout)
        if thread.is_alive():
            log.warning(
                "rock's embedded engine did not finish closing within %gs", self._close_timeout
            )

    async def aclose(self) -> None:
        """:meth:`close`, waited for in a worker thread so the caller's loop keeps running."""
        await anyio.to_thread.run_sync(self.close)

    # -- calling into the engine's loop --------------------------------------------------------

    async def _call(self, func: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run ``func(*args)`` on the engine's loop and await its result from the caller's loop."""
        portal = self._portal
        if portal is None:
            await anyio.to_thread.run_sync(self.start)  # slow path: plugins load, Docker connects
            portal = self._portal
            if portal is None:
                raise _closed_error()
        if threading.get_ident() == self._thread_id:
            return await func(*args)
        try:
            future = portal.start_task_soon(func, *args)
        except RuntimeError as exc:
            raise _closed_error() from exc
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # another async library (trio): wait in a worker thread
            return await anyio.to_thread.run_sync(future.result)
        return await asyncio.wrap_future(future, loop=loop)

    def call_blocking(self, func: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run ``func(*args)`` on the engine's loop and block the calling thread until it returns.

        For synchronous callers (``rock.make``); ``func`` may use :attr:`manager`.
        """
        self.start()
        if threading.get_ident() == self._thread_id:
            raise RuntimeError("call_blocking cannot be used on the engine's own thread")
        portal = self._portal
        if portal is None:
            raise _closed_error()
        try:
            return portal.call(func, *args)
        except RuntimeError as exc:
            if self._portal is None:
                raise _closed_error() from exc
            raise

    async def _iterate(
        self, factory: Callable[..., AsyncIterator[T]], *args: Any
    ) -> AsyncIterator[T]:
        """Yield, in the caller's loop, what ``factory(*args)`` yields on the engine's loop."""
        send, receive = anyio.create_memory_object_stream[tuple[bool, Any]](_STREAM_BUFFER)
        await self._call(self._start_pump, send, factory, args)
        try:
            while True:
                try:
                    ok, value = await self._call(receive.receive)
                except anyio.EndOfStream:
                    return
                if not ok:
                    raise value
                yield value
        finally:
            portal = self._portal
            if portal is not None:
                with contextlib.suppress(RuntimeError):
                    portal.start_task_soon(receive.aclose)

    async def _start_pump(
        self, send: Any, factory: Callable[..., AsyncIterator[Any]], args: tuple[Any, ...]
    ) -> None:
        if self._tg is None:
            raise _closed_error()
        self._tg.start_soon(self._pump, send, factory, args)

    @staticmethod
    async def _pump(
        send: Any, factory: Callable[..., AsyncIterator[Any]], args: tuple[Any, ...]
    ) -> None:
        async with send:
            try:
                async with contextlib.aclosing(factory(*args)) as items:  # type: ignore[type-var]
                    async for item in items:
                        await send.send((True, item))
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                return  # the reader went away
            except Exception as exc:  # noqa: BLE001 - handed to the reader, raised there
                with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                    await send.send((False, exc))

    # -- runtime calls through the engine's loop -----------------------------------------------

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
        http = new_http_client()
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

    # -- Engine: lifecycle ---------------------------------------------------------------------

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

    # -- Engine: the catalog's operations --------------------------------------------------------

    async def call(self, sandbox_id: str, op: Operation[Req, Resp], request: Req) -> Resp:
        """Any operation of kind ``call``, straight to the sandbox's rocklet (as a call: the
        sandbox is not idle-stopped under it)."""
        return await self._rocklet(sandbox_id, op.name, RockletClient.call, op, request)

    # -- Engine: streams, files and figures ------------------------------------------------------

    def execute_stream(self, sandbox_id: str, command: Command) -> AsyncIterator[dict[str, Any]]:
        """Run a one-shot command, yielding its events as they happen."""
        return self._stream(sandbox_id, "execute_stream", RockletClient.execute_stream, command)

    # -- Engine: files -------------------------------------------------------------------------

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
        """CPU, memory, disk and network figures."""
        return await self._rocklet(sandbox_id, "get_statistics", RockletClient.get_statistics)

    # -- Engine: background processes ------------------------------------------------------------

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
            raise _closed_error()
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


# -- the process-wide engine ----------------------------------------------------------------------

_default: EmbeddedEngine | None = None
_default_config: EngineConfig | None = None
_default_lock = threading.Lock()
_atexit_registered = False


def configure_embedded_engine(config: EngineConfig) -> None:
    """Set the :class:`EngineConfig` of the process-wide embedded engine.

    Call it before the first sandbox starts (e.g. to cap concurrent starts, or to keep
    stopped sandboxes longer). Once the engine runs with another config it cannot change.

    :raises RuntimeError: the engine already runs with a different config.
    """
    global _default, _default_config
    with _default_lock:
        if _default is not None and not _default.closed:
            if _default.running and _default.config != config:
                raise RuntimeError(
                    "rock's embedded engine is already running with another EngineConfig; call "
                    "configure_embedded_engine() before the first sandbox starts (or close_embedded_engine() first)"
                )
            if not _default.running:
                _default = None
        _default_config = config


def get_embedded_engine() -> EmbeddedEngine:
    """The process-wide :class:`EmbeddedEngine` (made on first use; started on first call)."""
    global _default, _atexit_registered
    engine = _default
    if engine is not None and not engine.closed:
        return engine
    with _default_lock:
        if _default is None or _default.closed:
            _default = EmbeddedEngine(_default_config)
        if not _atexit_registered:
            atexit.register(close_embedded_engine)
            _atexit_registered = True
        return _default


def close_embedded_engine() -> None:
    """Close the process-wide engine, removing its sandboxes (also run at interpreter exit)."""
    global _default
    with _default_lock:
        engine, _default = _default, None
    if engine is not None:
        engine.close()


def _forget_after_fork() -> None:
    # A forked child has no engine thread; it must start its own and leave the parent's alone.
    global _default, _default_lock
    _default = None
    _default_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)
