"""The Nomad runtime cannot keep a sandbox's files as an image (capability ``snapshot_image``),
so an engine on it refuses ROCK's commit and its status, naming the runtime and the capability,
before any call to Nomad; its default image tagging and pushing refuse too."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from rock_core.engine.config import EngineConfig
from rock_core.engine.manager import SandboxManager
from rock_core.errors import NotSupported
from rock_nomad.runtime import NomadRuntime

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[SandboxManager]:
    runtime = NomadRuntime(address="http://127.0.0.1:1")
    yield SandboxManager(EngineConfig(store_path=str(tmp_path / "records.db")), runtime=runtime)
    await runtime.aclose()


async def test_an_engine_on_nomad_refuses_a_commit_and_its_status_naming_the_capability(
    engine: SandboxManager,
) -> None:
    for call in (engine.commit("s", "team/env:1"), engine.get_commit_status("s")):
        with pytest.raises(NotSupported) as caught:
            await call
        assert "runtime 'nomad' cannot" in str(caught.value)
        assert "(capability snapshot_image)" in str(caught.value)


async def test_the_nomad_runtime_refuses_to_tag_or_push_an_image() -> None:
    runtime = NomadRuntime(address="http://127.0.0.1:1")
    try:
        with pytest.raises(NotSupported, match="cannot tag images"):
            await runtime.tag_image("sha256:x", "team/env:1")
        with pytest.raises(NotSupported, match="cannot push images"):
            await runtime.push_image("r.example.com/team/env:1", username="", password="")
    finally:
        await runtime.aclose()
