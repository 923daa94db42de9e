"""A runtime that cannot pause declares it (capability ``pause``); the engine refuses
``pause()`` and ``resume()`` on it naming the runtime and the capability."""

from __future__ import annotations

import pytest

from rock_core.engine.config import EngineConfig
from rock_core.engine.manager import SandboxManager
from rock_core.errors import NotSupported
from rock_core.testing import NullRuntime

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_a_runtime_without_pause_declares_it() -> None:
    assert NullRuntime().capabilities.pause is False


async def test_the_engine_refuses_pause_naming_the_runtime_and_capability() -> None:
    async with SandboxManager(EngineConfig(), runtime=NullRuntime()) as engine:
        for call in (engine.pause, engine.resume):
            with pytest.raises(
                NotSupported,
                match=r"runtime 'null' cannot pause sandboxes .*\(capability pause\)",
            ) as info:
                await call("some-sandbox")
            assert info.value.attempted == call.__name__
