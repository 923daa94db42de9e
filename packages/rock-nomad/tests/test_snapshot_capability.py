"""The Nomad runtime cannot keep a sandbox's files as an image on its node (a job's allocation
has no commit): it declares so, and the engine refuses a snapshot, a fork, a listing and a start
from a snapshot naming the runtime and the capability ``snapshot_image``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from rock_core.actions import SandboxStartRequest
from rock_core.engine.config import EngineConfig
from rock_core.engine.manager import SandboxManager
from rock_core.errors import NotSupported
from rock_core.runtime import SnapshotImage, UnitHandle
from rock_nomad.runtime import NomadRuntime

pytestmark = pytest.mark.anyio

REFUSAL = (
    "runtime 'nomad' cannot keep snapshots of sandboxes' files as images (snapshot, fork)"
    " (capability snapshot_image)"
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[SandboxManager]:
    """An engine on the Nomad runtime, not opened: the refusals come before any call to Nomad."""
    runtime = NomadRuntime(address="http://127.0.0.1:1")
    yield SandboxManager(EngineConfig(store_path=str(tmp_path / "records.db")), runtime=runtime)
    await runtime.aclose()


def test_the_nomad_runtime_declares_it_cannot_keep_snapshot_images() -> None:
    runtime = NomadRuntime(address="http://127.0.0.1:1")
    assert runtime.capabilities.snapshot_image is False
    assert runtime.capabilities.missing("snapshot_image", runtime.name) == REFUSAL


async def test_the_nomad_runtime_refuses_a_snapshot_it_is_asked() -> None:
    runtime = NomadRuntime(address="http://127.0.0.1:1")
    handle = UnitHandle(runtime="nomad", unit_id="job", sandbox_id="s")
    with pytest.raises(NotSupported, match="capability snapshot_image"):
        await runtime.snapshot_image(handle, labels={}, strip_env=[])


async def test_an_engine_on_nomad_refuses_snapshots_forks_and_starts_from_one(
    engine: SandboxManager,
) -> None:
    for call in (
        engine.snapshot("s"),
        engine.fork("s", 2),
        engine.list_snapshots(),
        engine.delete_snapshot("x"),
        engine.start_async(SandboxStartRequest(image="python:3.11", snapshot="x")),
    ):
        with pytest.raises(NotSupported) as caught:
            await call
        assert str(caught.value) == REFUSAL


async def test_the_nomad_runtime_cannot_tell_a_sandbox_unchanged_since_a_snapshot() -> None:
    runtime = NomadRuntime(address="http://127.0.0.1:1")
    assert runtime.capabilities.snapshot_reuse is False
    handle = UnitHandle(runtime="nomad", unit_id="job", sandbox_id="s")
    with pytest.raises(NotSupported) as caught:
        await runtime.snapshot_unchanged(handle, SnapshotImage(image_id="i", reference="r"))
    assert str(caught.value) == (
        "runtime 'nomad' cannot tell whether a sandbox's files changed since a snapshot of it"
        " (capability snapshot_reuse)"
    )
