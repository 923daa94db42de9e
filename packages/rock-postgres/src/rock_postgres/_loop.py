"""An asyncio event loop on a thread of its own, for a synchronous API over an async driver.

The record store seam is synchronous and the engine calls it from its own event loop, where
awaiting is not possible; asyncpg is async only. So the store runs asyncpg on a private loop in
a daemon thread and blocks the caller on each call (:meth:`LoopThread.run`), for at most a
bounded time. Any thread may call, the engine's loop included: the private loop never waits on
its callers.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["LoopThread"]

T = TypeVar("T")


class LoopThread:
    """A private event loop running in a daemon thread, started at construction.

    :param name: the thread's name (seen in stack dumps).
    """

    def __init__(self, name: str) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        self._thread.start()
        self._closed = False

    def run(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        """Run ``coro`` on the private loop and wait for its result, at most ``timeout`` seconds.

        :raises TimeoutError: it took longer (the coroutine is then cancelled).
        :raises RuntimeError: called from the private loop's own thread (it would wait forever),
            or after :meth:`close`.
        """
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("a blocking call on the store's own event loop would never end")
        if self._closed:
            coro.close()
            raise RuntimeError("the store is closed")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise

    def close(self) -> None:
        """Stop the loop and its thread (after what runs on it has returned). Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()
