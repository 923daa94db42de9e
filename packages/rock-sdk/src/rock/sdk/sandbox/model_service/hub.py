"""One wait for the model calls of many sandboxes: :class:`ModelCallHub`.

Each added :class:`~.base.ModelService` gets one held request at a time to its sandbox's
service (``GET /v1/rock/next``, answered the moment the agent makes its call), and every call,
of every sandbox, lands in one queue: the trainer awaits :meth:`ModelCallHub.next_call` and
answers what comes, whichever sandbox it is from. A thousand agents in flight are a thousand
idle held requests in one event loop, not a thousand polling loops.
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

    def add(self, service: ModelService, first_index: int = 1) -> None:
        """Listen to ``service``'s calls from ``first_index`` on, until its session ends."""
        key = service._sandbox.sandbox_id or str(id(service))
        self.services[key] = service
        self._tasks[key] = asyncio.get_running_loop().create_task(
            self._listen(key, service, first_index)
        )

    async def _listen(self, key: str, service: ModelService, index: int) -> None:
        failures = 0
        while True:
            try:
                call = await service.poll_call(index, 20.0)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the service unreachable: tell the trainer after 3 tries
                failures += 1
                if failures >= 3:
                    self._queue.put_nowait(ModelCall(key, index, error=repr(exc)))
                    return
                await asyncio.sleep(0.2 * failures)
                continue
            failures = 0
            if call is None:
                continue
            self._queue.put_nowait(call)
            if call.session_end:
                return
            index += 1

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
        return sum(1 for t in self._tasks.values() if not t.done())

    async def aclose(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        for task in self._tasks.values():
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()

    async def __aenter__(self) -> ModelCallHub:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()
