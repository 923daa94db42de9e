"""Waiting for a condition in a test: the one ``eventually`` helper every rock test uses.

:func:`eventually` polls a probe until it answers something true and returns that answer;
:func:`eventually_async` does the same without blocking the event loop (the probe may be a
coroutine function). Both fail with ``what`` and the last answer seen. The timeout is a guard
against a hang, never a speed goal: it is generous, and a test never asserts how long it took.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

__all__ = ["DEFAULT_TIMEOUT", "eventually", "eventually_async"]

T = TypeVar("T")

#: Seconds before a wait fails: long enough for a loaded 2-core CI machine.
DEFAULT_TIMEOUT = 60.0


def _failure(what: str, timeout: float, last: object) -> AssertionError:
    return AssertionError(f"{what} did not happen within {timeout:g}s (last seen: {last!r})")


def eventually(
    probe: Callable[[], T],
    *,
    until: Callable[[T], object] = bool,
    what: str = "the condition",
    timeout: float = DEFAULT_TIMEOUT,
    interval: float = 0.05,
) -> T:
    """Call ``probe()`` until ``until(value)`` holds for its answer (by default: the answer is
    true), and return that answer.

    An exception from ``probe`` propagates at once. After ``timeout`` seconds raises
    :class:`AssertionError` naming ``what`` and showing the last value ``probe`` returned.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if until(value):
            return value
        if time.monotonic() > deadline:
            raise _failure(what, timeout, value)
        time.sleep(interval)


async def eventually_async(
    probe: Callable[[], T | Awaitable[T]],
    *,
    until: Callable[[T], object] = bool,
    what: str = "the condition",
    timeout: float = DEFAULT_TIMEOUT,
    interval: float = 0.05,
) -> T:
    """:func:`eventually` for async tests: sleeps with anyio, and awaits what ``probe`` returns
    when it is awaitable (a coroutine function, or ``lambda: anyio.to_thread.run_sync(blocking)``
    for a blocking probe)."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if inspect.isawaitable(value):
            value = await value
        if until(value):
            return value
        if time.monotonic() > deadline:
            raise _failure(what, timeout, value)
        await anyio.sleep(interval)
