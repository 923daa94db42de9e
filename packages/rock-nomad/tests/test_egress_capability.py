"""The Nomad runtime cannot enforce an egress policy on its nodes (capability ``egress``): it
declares so, and an engine on it refuses a policy naming the runtime and the capability."""

from __future__ import annotations

from pathlib import Path

import pytest

from rock_core.actions import SandboxStartRequest
from rock_core.converters import spec_from_start_request
from rock_core.engine import egress
from rock_core.engine.config import EngineConfig
from rock_core.engine.manager import SandboxManager
from rock_core.errors import NotSupported
from rock_nomad.runtime import NomadRuntime

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_an_engine_on_nomad_refuses_an_egress_policy_naming_the_capability(tmp_path: Path):
    runtime = NomadRuntime(address="http://127.0.0.1:1")
    try:
        assert runtime.capabilities.egress is False
        engine = SandboxManager(
            EngineConfig(store_path=str(tmp_path / "records.db")), runtime=runtime
        )
        spec = spec_from_start_request(
            SandboxStartRequest(image="python:3.11", egress={"default": "deny"})
        )
        problem = egress.refusal(engine._core, spec)
        assert problem is not None and "runtime 'nomad' cannot enforce an egress policy" in problem
        assert "(capability egress)" in problem
        with pytest.raises(NotSupported, match=r"runtime 'nomad' cannot .*\(capability egress\)"):
            await engine.update_egress("s", {"default": "deny"})
    finally:
        await runtime.aclose()
