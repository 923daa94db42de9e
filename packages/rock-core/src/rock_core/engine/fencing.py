"""The fence of a leader's background work (issue #24): the lease it runs under, carried by
the work itself.

:mod:`rock_core.engine.leadership` runs the background work under a :class:`Fence` set in a
context variable, which every task that work starts inherits (asyncio copies the context into a
new task). :meth:`EngineCore.save <rock_core.engine.core.EngineCore.save>` writes a record made
under a fence through :meth:`Fence.write`: not at all once the lease ran out by this process's
monotonic clock, else in one statement with the store's check of the epoch
(:meth:`Leadership.put_fenced <rock_core.leadership.Leadership.put_fenced>`). Work outside any
fence (calls from clients, a single engine without ``cluster``) writes as before.

The runtime of an engine in a cluster is :func:`guarded`: each of its calls made under a fence
that lapsed raises :class:`LeaseLost` before it reaches the runtime. So a leader paused past its
lease (``SIGSTOP``) that wakes up does nothing more on the runtime, even in the step it was in:
the work sees a runtime error and its next write is fenced, until leadership cancels it.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import logging
import time
from typing import Any, cast

import attrs

from rock_core.errors import RockError
from rock_core.leadership import Leadership
from rock_core.models import SandboxRecord
from rock_core.runtime import Runtime

__all__ = ["Fence", "LeaseLost", "current", "entered", "guarded", "left"]

log = logging.getLogger("rock.engine")

_FENCE: contextvars.ContextVar[Fence | None] = contextvars.ContextVar("rock_fence", default=None)


@attrs.define(eq=False)
class Fence:
    """The lease ``epoch`` of ``leadership``, held until ``valid_until`` (``time.monotonic``)
    unless ``lost`` (a renewal or a fenced write answered that another holder has it)."""

    leadership: Leadership
    epoch: int
    valid_until: float
    lost: bool = False

    def valid(self) -> bool:
        """Whether the lease still holds, as far as this process knows without asking."""
        return not self.lost and time.monotonic() < self.valid_until

    def write(self, record: SandboxRecord) -> bool:
        """Write ``record`` under the fence; false (nothing written) when the lease is gone."""
        if self.valid() and self.leadership.put_fenced(record, self.epoch):
            return True
        self.lost = True
        log.warning(
            "lease epoch %d lost: the write of sandbox %s (%s) was fenced off",
            self.epoch,
            record.sandbox_id,
            record.state.value,
        )
        return False


def current() -> Fence | None:
    """The fence the running task works under (``None``: none, writes are not fenced)."""
    return _FENCE.get()


def entered(fence: Fence | None) -> contextvars.Token[Fence | None]:
    """Set ``fence`` for the running task and the tasks it starts from now on; undo with
    :func:`left`."""
    return _FENCE.set(fence)


def left(token: contextvars.Token[Fence | None]) -> None:
    """Undo :func:`entered`."""
    _FENCE.reset(token)


class LeaseLost(RockError):
    """A runtime call of a leader's work after its lease lapsed: refused, not made."""


def guarded(runtime: Runtime) -> Runtime:
    """``runtime`` with each of its coroutine methods refused under a lapsed fence."""
    return cast(Runtime, _Guarded(runtime))


class _Guarded:
    """The runtime, its coroutine methods checking the running task's fence first."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._runtime, name)
        if not inspect.iscoroutinefunction(found):
            return found

        @functools.wraps(found)
        async def call(*args: Any, **kwargs: Any) -> Any:
            fence = _FENCE.get()
            if fence is not None and not fence.valid():
                raise LeaseLost(
                    f"the lease of epoch {fence.epoch} lapsed: {name} refused", attempted=name
                )
            return await found(*args, **kwargs)

        return call
