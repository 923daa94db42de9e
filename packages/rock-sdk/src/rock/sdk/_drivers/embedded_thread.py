"""The embedded engine's thread: one ``SandboxManager`` on an event loop of its own, and the calls
into that loop from any caller's loop, thread or synchronous code (:class:`DriverThread`, the base
of :class:`~rock.sdk._drivers.embedded.EmbeddedDriver`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import anyio
import anyio.abc
from anyio.from_thread import BlockingPortal

from rock.sdk._drivers.embedded_tracking import AddressBook, LocalPorts
from rock_core.engine.config import EngineConfig
from rock_core.engine.manager import SandboxManager
from rock_core.errors import InternalServerRockError

__all__ = ["DriverThread", "closed_error"]

log = logging.getLogger("rock.sdk.engine")

T = TypeVar("T")

# Items a streamed call (download, execute_stream) may run ahead of its reader.
_STREAM_BUFFER = 16


def closed_error() -> InternalServerRockError:
    return InternalServerRockError(
        "rock's embedded engine is closed (the interpreter is exiting, or close_embedded_driver() was called); "
        "its sandboxes were removed",
        attempted="call",
    )


async def _close_manager(manager: SandboxManager) -> None:
    """Close ``manager`` from the task that entered it (its task group must exit there).

    ``aclose`` shields its own clean-up, so a cancelled caller still removes the sandboxes.
    """
    await manager.aclose()


class DriverThread:
    """The thread, loop and manager of an embedded engine; :class:`EmbeddedDriver` sets the fields
    declared here in its ``__init__``."""

    config: EngineConfig
    _factory: Callable[[EngineConfig], SandboxManager]
    _close_timeout: float
    _lock: threading.Lock
    _portal: BlockingPortal | None
    #: The engine's loop and the callers' calls running on it (set with ``_portal``).
    _engine_loop: asyncio.AbstractEventLoop
    _calls: set[asyncio.Task[Any]]
    #: Calls handed to the engine's loop and not yet answered (see :meth:`_fail_handoffs`).
    _handoffs: dict[concurrent.futures.Future[Any], Any]
    #: Set once the engine's loop has run for the last time.
    _loop_ended: bool
    _manager: SandboxManager | None
    _thread: threading.Thread | None
    _thread_id: int | None
    _stop: anyio.Event | None
    _tg: anyio.abc.TaskGroup | None
    _closed: bool
    _addresses: AddressBook
    _local_ports: LocalPorts

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
                raise closed_error()
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
            self._fail_handoffs()
            ready.set()

    def _fail_handoffs(self) -> None:
        """(the engine's thread, its loop gone) Fail the calls handed over that it never took.

        A call handed over between the loop's last turn and its close is queued on a loop that
        never runs again; its caller would wait forever. Every such call fails with
        :func:`closed_error` instead, and its coroutine is closed unrun.
        """
        self._loop_ended = True
        for future, call in list(self._handoffs.items()):
            self._handoffs.pop(future, None)
            if future.done():
                continue
            with contextlib.suppress(concurrent.futures.InvalidStateError):
                future.set_exception(closed_error())
                call.close()

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
                self._engine_loop = asyncio.get_running_loop()
                self._calls = set()
                self._loop_ended = False
                self._portal = portal
                ready.set()
                await self._stop.wait()
                self._portal = None
                for call in list(self._calls):  # calls in flight end with a cancellation
                    call.cancel()
                await portal.stop(cancel_remaining=True)
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
                raise closed_error()
        if threading.get_ident() == self._thread_id:
            return await func(*args)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # another async library (trio): wait in a worker thread
            try:
                future = portal.start_task_soon(func, *args)
            except RuntimeError as exc:
                raise closed_error() from exc
            return await anyio.to_thread.run_sync(future.result)
        # Handed to the engine's loop without waiting for it to take the call: the portal's
        # start_task_soon blocks the caller's thread until the engine's loop has spawned the
        # task, and the caller's loop, which serves every other sandbox of the caller, stood
        # still meanwhile (about 1 ms a call on a busy machine, 100 ms in a rollout of 10).
        call = self._on_engine(func, args)
        try:
            future = asyncio.run_coroutine_threadsafe(call, self._engine_loop)
        except RuntimeError as exc:  # the engine's loop is closed
            call.close()
            raise closed_error() from exc
        handoffs = self._handoffs
        handoffs[future] = call
        if self._loop_ended:  # it ended while this call was handed over: nothing will take it
            self._fail_handoffs()
        try:
            return await asyncio.wrap_future(future, loop=loop)
        finally:
            handoffs.pop(future, None)

    async def _on_engine(self, func: Callable[..., Awaitable[T]], args: tuple[Any, ...]) -> T:
        """(engine loop) ``func(*args)``, cancelled if the engine stops while it runs."""
        if self._portal is None:
            raise closed_error()
        task = asyncio.current_task()
        if task is None:  # not in a task: nothing to cancel it by
            return await func(*args)
        self._calls.add(task)
        try:
            return await func(*args)
        finally:
            self._calls.discard(task)

    def call_blocking(self, func: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run ``func(*args)`` on the engine's loop and block the calling thread until it returns.

        For synchronous callers (``rock.make``); ``func`` may use :attr:`manager`.
        """
        self.start()
        if threading.get_ident() == self._thread_id:
            raise RuntimeError("call_blocking cannot be used on the engine's own thread")
        portal = self._portal
        if portal is None:
            raise closed_error()
        try:
            return portal.call(func, *args)
        except RuntimeError as exc:
            if self._portal is None:
                raise closed_error() from exc
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
            raise closed_error()
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
