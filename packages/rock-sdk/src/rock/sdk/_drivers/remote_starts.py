"""Starts over the admin's HTTP API: :meth:`RemoteStarts.start_async`, the remote driver's base,
so :mod:`rock.sdk._drivers.remote` stays one module's read.

A trainer starts hundreds or thousands of sandboxes at once from one process (``asyncio.gather``
of ``Sandbox.start()``). The starts asked in one turn of an event loop are sent together, as one
``POST /sandboxes/start_batch`` (:data:`_BATCH_ITEMS` a request), as the GEM batches send
an env's steps (:mod:`rock.sdk.envs._backend`): one request and one answer instead of one each,
for the trainer's process and the admin's. Each item is still admitted for the caller's tenant,
and each caller gets its own sandbox or its own error (the one ``/start_async`` would have
answered). A start alone in its turn goes as ``POST /start_async``, as it always did; so do all
of them with an admin that has no batch route (ROCK's, or an older rock).
"""

from __future__ import annotations

import asyncio
import uuid
import weakref
from typing import Any

from rock.sdk._drivers.admin_urls import IDEMPOTENCY_HEADER
from rock.sdk._drivers.remote_waits import RemoteWaits
from rock.sdk._drivers.remote_wire import error_from_envelope
from rock_core.actions import SandboxStartRequest, SandboxStartResponse, StartBatchResponse
from rock_core.converters import structure_wire, unstructure_wire
from rock_core.errors import InvalidParameter, NotSupported

__all__ = ["RemoteStarts"]

#: Starts in one ``/sandboxes/start_batch`` request (the admin's ``batch_max_count`` is 2,000
#: by default); a larger turn's starts go as several requests at once, which the admin serves
#: in turn (the first answered first: smaller batches, earlier answers).
_BATCH_ITEMS = 250

_IDENTITY = (
    ("user_id", "X-User-Id"),
    ("experiment_id", "X-Experiment-Id"),
    ("namespace", "X-Namespace"),
    ("cluster", "X-Cluster"),
)

_Waiting = tuple[SandboxStartRequest, dict[str, Any], "asyncio.Future[SandboxStartResponse]"]


class _Batcher:
    """The starts asked of one driver in one turn of one event loop, sent as one request."""

    def __init__(self, driver: RemoteStarts) -> None:
        self.driver = driver
        self.waiting: list[_Waiting] | None = None
        self.tasks: set[asyncio.Task[None]] = set()

    def add(
        self, loop: asyncio.AbstractEventLoop, request: SandboxStartRequest, item: dict[str, Any]
    ) -> asyncio.Future[SandboxStartResponse]:
        future: asyncio.Future[SandboxStartResponse] = loop.create_future()
        if self.waiting is None:
            self.waiting = []
            loop.call_soon(self._send, loop)  # after the other tasks ready in this turn
        self.waiting.append((request, item, future))
        return future

    def _send(self, loop: asyncio.AbstractEventLoop) -> None:
        waiting, self.waiting = self.waiting or [], None
        for at in range(0, len(waiting), _BATCH_ITEMS):
            task = loop.create_task(self._run(waiting[at : at + _BATCH_ITEMS]))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _run(self, waiting: list[_Waiting]) -> None:
        live = [w for w in waiting if not w[2].done()]  # a caller cancelled before it was sent
        if not live:
            return
        if len(live) == 1 or not self.driver._start_batch_served:
            await asyncio.gather(*(self._one(w) for w in live))
            return
        try:
            result = await self.driver._call(
                "POST",
                "/sandboxes/start_batch",
                "start",
                None,
                json={"items": [item for _, item, _ in live]},
            )
            answer = structure_wire(result, StartBatchResponse, forbid_extra_keys=False)
            if len(answer.items) != len(live):
                raise NotSupported(
                    f"the admin answered {len(answer.items)} outcomes for {len(live)} starts"
                )
        except (NotSupported, InvalidParameter) as exc:
            if isinstance(exc, InvalidParameter) and exc.field != "base_url":
                _fail(live, exc)
                return
            self.driver._start_batch_served = False  # no such route here: one by one
            await asyncio.gather(*(self._one(w) for w in live))
            return
        except BaseException as exc:
            _fail(live, exc)
            if not isinstance(exc, Exception):
                raise
            return
        for (request, _, future), outcome in zip(live, answer.items, strict=True):
            if future.done():
                continue
            if outcome.sandbox is not None:
                future.set_result(outcome.sandbox)
                continue
            envelope = {
                "status": "Failed",
                "message": outcome.message,
                "error": outcome.error,
                "result": {"code": outcome.code, "rock_code": outcome.rock_code},
            }
            future.set_exception(
                error_from_envelope(envelope, sandbox_id=request.sandbox_id, attempted="start")
            )

    async def _one(self, waiting: _Waiting) -> None:
        request, item, future = waiting
        try:
            started = await self.driver._start_one(request, item)
        except Exception as exc:
            if not future.done():
                future.set_exception(exc)
        else:
            if not future.done():
                future.set_result(started)


def _fail(waiting: list[_Waiting], exc: BaseException) -> None:
    for _, _, future in waiting:
        if future.done():
            continue
        if isinstance(exc, asyncio.CancelledError):
            future.cancel()
        else:
            future.set_exception(exc)


class RemoteStarts(RemoteWaits):
    """:meth:`start_async` of :class:`~rock.sdk._drivers.remote.RemoteDriver`."""

    _start_batch_served: bool = True  # until the admin answers that it has no such route

    async def start_async(
        self,
        request: SandboxStartRequest,
        *,
        user_id: str | None = None,
        experiment_id: str | None = None,
        namespace: str | None = None,
        cluster: str | None = None,
    ) -> SandboxStartResponse:
        """``POST /start_async``: accept a start (``pending``); the identity goes in ROCK's headers.

        Each start carries a fresh ``Idempotency-Key``, kept for its retries: the admin answers a
        repeated key with the first start's sandbox, so a start whose connection failed after
        it was sent moves on to the next admin URL without starting a second sandbox (a ROCK
        admin ignores the header). The starts asked in the same turn of the event loop go
        together as one ``POST /sandboxes/start_batch`` where the admin serves it (see the
        module docstring); each still answers or raises as its own ``/start_async`` would.
        """
        given = {
            "user_id": user_id,
            "experiment_id": experiment_id,
            "namespace": namespace,
            "cluster": cluster,
        }
        item = {name: value for name, value in given.items() if value}
        item["idempotency_key"] = uuid.uuid4().hex
        if not self._start_batch_served:
            return await self._start_one(request, item)
        loop = asyncio.get_running_loop()
        with self._clients_lock:
            batchers = self.__dict__.setdefault("_batchers", weakref.WeakKeyDictionary())
            batcher: _Batcher | None = batchers.get(loop)
            if batcher is None:
                batcher = batchers[loop] = _Batcher(self)
        item["request"] = unstructure_wire(request)
        return await batcher.add(loop, request, item)

    async def _start_one(
        self, request: SandboxStartRequest, item: dict[str, Any]
    ) -> SandboxStartResponse:
        """``POST /start_async`` of one start (``item``: its identity and key)."""
        headers = {header: item[name] for name, header in _IDENTITY if item.get(name)}
        headers[IDEMPOTENCY_HEADER] = item["idempotency_key"]
        result = await self._call(
            "POST",
            "/start_async",
            "start",
            request.sandbox_id,
            json=item.get("request") or unstructure_wire(request),
            headers=headers,
        )
        return structure_wire(result, SandboxStartResponse, forbid_extra_keys=False)
