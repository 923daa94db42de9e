"""One wait for the model calls of many sandboxes: :class:`ModelCallHub`.

Each added :class:`~.base.ModelService` keeps one connection to its sandbox's service (rock's
channel, :mod:`._channel`), on which the service pushes each call the moment the agent makes it,
and every call, of every sandbox, lands in one queue: the trainer awaits
:meth:`ModelCallHub.next_call` and answers what comes, whichever sandbox it is from. A thousand
agents in flight are a thousand idle connections read by one event loop, not a thousand
polling loops.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from rock.sdk.sandbox.model_service.base import ModelCall, ModelService

__all__ = ["ModelCallHub"]


class ModelCallHub:
    """The calls of many sandboxes' agents, in the order they are made."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[ModelCall] = asyncio.Queue()
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self.services: dict[str, ModelService] = {}

    def add(self, service: ModelService) -> None:
        """Take ``service``'s calls (from its next one on) into this hub, until its session
        ends."""
        key = service._sandbox.sandbox_id or str(id(service))
        self.services[key] = service
        self._tasks[key] = asyncio.get_running_loop().create_task(self._attach(key, service))

    async def _attach(self, key: str, service: ModelService) -> None:
        try:
            await service.listen(self._queue.put_nowait)
        except Exception as exc:  # the service unreachable: the trainer hears of it in order
            self._queue.put_nowait(ModelCall(key, service._delivered + 1, error=repr(exc)))

    async def next_call(self, timeout: float | None = None) -> ModelCall:
        """The next call of any sandbox (or a sandbox's session end, or an error reaching it).
        :class:`TimeoutError` after ``timeout`` seconds."""
        try:
            return await asyncio.wait_for(self._queue.get(), timeout)
        except asyncio.TimeoutError:  # noqa: UP041 - distinct on Python 3.10
            raise TimeoutError(f"no model call within {timeout} s") from None

    @property
    def listening(self) -> int:
        """How many sandboxes' sessions are still open."""
        return sum(1 for s in self.services.values() if s._end is None and s._broken is None)

    async def aclose(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        for task in self._tasks.values():
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        for service in self.services.values():
            service._sink = None

    async def __aenter__(self) -> ModelCallHub:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()
