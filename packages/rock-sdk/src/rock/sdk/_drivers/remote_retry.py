"""When the remote driver sends a call again, and how many calls one process has under way (no
HTTP here: :mod:`rock.sdk._drivers.remote_transport` asks).

A trainer starting thousands of sandboxes at once meets a busy admin. The driver:

- sends a call again when the admin answered HTTP 503 with ``Retry-After`` (its
  ``max_connections`` was reached: the request never reached a route, so any call may be
  repeated), or answered 503 without it to a call safe to repeat (a read, stop, delete, a start
  with its ``Idempotency-Key``);
- sends a call again when no admin accepted its connection (refused: restarting, or its backlog
  full), once this driver has been answered before (a driver that never reached an admin fails
  at once: "is `rock admin start` running?"); and when a connection was reset after a call safe
  to repeat was sent.

It waits ``Retry-After`` seconds (else a back-off from 0.1 s doubling to 2 s), times a random 1 to
1.5 so that the refused calls of many processes do not come back together, and gives up when the
next attempt would start after the call's own timeout (120 s for most calls) from its first
attempt: the last answer or error is then the call's.

Calls that answer at once (a start, a status, a listing: every call without a timeout of its own
and not held by the admin) are at most :func:`max_in_flight` at once per event loop (64, or
``ROCK_MAX_IN_FLIGHT``); the rest wait their turn in the driver, so that 16,000 starts from one
process neither open 16,000 connections (the ephemeral ports of the host, the admin's
``max_connections``) nor queue in httpx's pool. They go over :class:`QuickPools`: pools of at
most 8 connections each, the call to the one with the most free, because httpx's pool looks at
every connection it holds for each connection on each request's start and end (its cost grows
with the square of its size: 128 connections in one pool cost a trainer's process most of its
CPU while 1,000 sandboxes started). Commands (which carry their own timeout) share one pool of
1,000 connections as before, and requests the admin holds have their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable

import httpx

__all__ = ["QuickPools", "Retrying", "max_in_flight"]

_FIRST_DELAY = 0.1
_MAX_DELAY = 2.0
_JITTER = (1.0, 1.5)
#: Retry-After above this is taken as this (a misconfigured proxy must not park a call for hours).
_MAX_RETRY_AFTER = 30.0
_IN_FLIGHT_DEFAULT = 64
_PER_POOL = 8
_IN_FLIGHT_ENV = "ROCK_MAX_IN_FLIGHT"


def max_in_flight() -> int:
    """Quick calls under way at once per event loop: ``ROCK_MAX_IN_FLIGHT``, default 64.

    :raises ValueError: the variable is set to something other than a positive integer."""
    text = os.environ.get(_IN_FLIGHT_ENV, "").strip()
    if not text:
        return _IN_FLIGHT_DEFAULT
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{_IN_FLIGHT_ENV} must be a positive integer, not {text!r}")
    return value


def retry_after(response: httpx.Response) -> float | None:
    """The seconds of the response's ``Retry-After`` (only the seconds form), or ``None``."""
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return min(max(0.0, seconds), _MAX_RETRY_AFTER)


class Retrying:
    """The retries of one call: :meth:`pause` says how long to wait before the next attempt, or
    ``None`` when the call's ``budget`` seconds (from its first attempt) would be over by then."""

    def __init__(self, budget: float | None) -> None:
        self._deadline = time.monotonic() + (120.0 if budget is None else budget)
        self._delay = _FIRST_DELAY

    def pause(self, after: float | None = None) -> float | None:
        wait = max(after or 0.0, self._delay) * random.uniform(*_JITTER)
        self._delay = min(self._delay * 2, _MAX_DELAY)
        if time.monotonic() + wait >= self._deadline:
            return None
        return wait


class QuickPools:
    """The quick calls of one event loop: at most ``size`` at once, over pools of at most 8
    connections (``make(n)``: an ``httpx.AsyncClient`` of ``n`` connections), each call on the
    pool with the most free, so that none queues in httpx."""

    def __init__(self, make: Callable[[int], httpx.AsyncClient], size: int) -> None:
        sizes = [min(_PER_POOL, size - start) for start in range(0, size, _PER_POOL)]
        self._clients = [make(n) for n in sizes]
        self._free = sizes
        self._slots = asyncio.Semaphore(size)

    @contextlib.asynccontextmanager
    async def client(self) -> AsyncIterator[httpx.AsyncClient]:
        """A client with a free connection, held for one call."""
        async with self._slots:
            index = self._free.index(max(self._free))
            self._free[index] -= 1
            try:
                yield self._clients[index]
            finally:
                self._free[index] += 1

    async def aclose(self) -> None:
        for client in self._clients:
            await client.aclose()

    async def closed_with_loop(self) -> AsyncGenerator[None, None]:
        """Suspended for the loop's lifetime (as ``close_with_loop``): closes the pools."""
        try:
            yield
        finally:
            await self.aclose()
