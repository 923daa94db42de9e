"""Docker's event stream as the runtime's ``watch``: a container's death, OOM kill or removal,
as ``(handle, status)`` pairs the engine reconciles on (:meth:`DockerRuntime.watch`)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
import attrs

from rock_core.errors import RuntimeFailure
from rock_core.models import RuntimeStatus, UnitState
from rock_core.runtime import UnitHandle
from rock_docker._errors import DOCKER_ERRORS, translate

if TYPE_CHECKING:
    from rock_docker.runtime import DockerRuntime

__all__ = ["EventWatch", "event_status"]


class EventWatch:
    """The async iterator :meth:`DockerRuntime.watch` returns, over Docker's event stream.

    The stream is opened on the first ``__anext__`` with ``since`` = the time of the
    ``watch`` call, so no event in between is lost. Each blocking read runs in a worker thread of
    its own limiter, so an idle watch never holds a slot the runtime's calls need; closing the
    stream's socket ends a read in progress.
    """

    def __init__(self, runtime: DockerRuntime, labels: Mapping[str, str]) -> None:
        self._runtime = runtime
        self._filters = {
            "type": ["container"],
            "event": ["die", "oom", "destroy"],
            "label": [f"{key}={value}" for key, value in labels.items()],
        }
        # Docker reads "seconds.nanoseconds"; the fraction is an integer count of nanoseconds.
        now = time.time_ns()
        self._since = f"{now // 1_000_000_000}.{now % 1_000_000_000:09d}"
        self._stream: Any = None
        self._closed = False
        self._limiter = anyio.CapacityLimiter(1)

    def __aiter__(self) -> EventWatch:
        return self

    async def __anext__(self) -> tuple[UnitHandle, RuntimeStatus]:
        runtime = self._runtime
        while True:
            if self._closed:
                raise StopAsyncIteration
            if self._stream is None:
                self._stream = await runtime._run(
                    lambda: runtime._docker().events(
                        decode=True, filters=self._filters, since=self._since
                    ),
                    attempted="watch",
                )
            try:
                event = await anyio.to_thread.run_sync(
                    next, self._stream, None, limiter=self._limiter, abandon_on_cancel=True
                )
            except BaseException as exc:
                # Cancelled (the read goes on in its thread until the socket closes) or broken.
                self._close()
                if isinstance(exc, DOCKER_ERRORS):
                    raise translate(exc, sandbox_id=None, attempted="watch") from exc
                raise
            if event is None:  # the stream ended: closed by us, or the engine went away
                was_closed = self._closed
                self._close()
                if was_closed:
                    raise StopAsyncIteration
                raise RuntimeFailure("the Docker engine ended the event stream", attempted="watch")
            item = await event_status(runtime, event)
            if item is not None:
                return item

    async def aclose(self) -> None:
        """End the subscription; a read in progress returns and iteration stops. Idempotent."""
        self._close()

    def _close(self) -> None:
        self._closed = True
        stream, self._stream = self._stream, None
        if stream is not None:
            try:
                stream.close()
            except (OSError, AttributeError):
                pass  # already closed by the engine


async def event_status(
    runtime: DockerRuntime, event: Mapping[str, Any]
) -> tuple[UnitHandle, RuntimeStatus] | None:
    """The ``(handle, status)`` a Docker event stands for, or ``None`` for an event to skip."""
    action = event.get("status") or event.get("Action") or ""
    actor = event.get("Actor") or {}
    attributes = actor.get("Attributes") or {}
    unit_id = event.get("id") or actor.get("ID")
    if not unit_id or action not in ("die", "oom", "destroy"):
        return None
    handle = UnitHandle(
        runtime=runtime.name, unit_id=unit_id, sandbox_id=attributes.get("name") or unit_id
    )
    if action == "destroy":
        return handle, RuntimeStatus(state=UnitState.MISSING, error="container removed")
    status = await runtime.inspect(handle)
    if action == "die" and status.state is not UnitState.EXITED:
        # Removed (or not yet marked exited) by the time we looked: the event has the code.
        code = attributes.get("exitCode")
        status = RuntimeStatus(
            state=UnitState.EXITED,
            exit_code=int(code) if code and code.lstrip("-").isdigit() else None,
            oom_killed=status.oom_killed,
        )
    if action == "oom":
        status = attrs.evolve(status, oom_killed=True)
    return handle, status
