"""The Nomad runtime cannot pause a sandbox (Nomad's API has no freeze of an allocation):
it declares so, and the engine's refusal names the runtime and the capability."""

from __future__ import annotations

import pytest

from rock_core.errors import NotSupported
from rock_core.runtime import UnitHandle
from rock_nomad.runtime import NomadRuntime

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_the_nomad_runtime_declares_it_cannot_pause() -> None:
    runtime = NomadRuntime(address="http://127.0.0.1:1")
    assert runtime.capabilities.pause is False
    assert runtime.capabilities.missing("pause", runtime.name) == (
        "runtime 'nomad' cannot pause sandboxes (freeze their processes, memory kept)"
        " (capability pause)"
    )


async def test_the_nomad_runtime_refuses_a_pause_it_is_asked() -> None:
    runtime = NomadRuntime(address="http://127.0.0.1:1")
    with pytest.raises(NotSupported, match="runtime 'nomad' cannot pause"):
        await runtime.pause(UnitHandle(runtime="nomad", unit_id="job", sandbox_id="s"))
