"""Fixtures the engine's tests share: asyncio for anyio, one real rocklet in a thread per module,
and a fresh scripted runtime (rock_core.testing.ScriptedRuntime) on it per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rock_core.testing import ScriptedRuntime, rocklet_in_thread


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def rocklet() -> Iterator[tuple[str, int]]:
    with rocklet_in_thread() as address:
        yield address


@pytest.fixture
def runtime(rocklet: tuple[str, int]) -> ScriptedRuntime:
    return ScriptedRuntime(rocklet)
