"""An engine that closes hands its sandboxes' containers to the reaper (rock_docker.reaper),
which removes them without the engine: their egress rules go before the close returns."""

from __future__ import annotations

import subprocess

import pytest

from rock_core.actions import SandboxStartRequest
from rock_core.engine.config import EngineConfig
from rock_core.engine.manager import SandboxManager

pytestmark = [pytest.mark.anyio, pytest.mark.docker]


@pytest.fixture
def anyio_backend():
    return "asyncio"


def _rules_of(unit_id: str) -> list[str]:
    saved = subprocess.run(
        ["iptables-save", "-t", "filter"], capture_output=True, text=True, check=True
    ).stdout
    return [line for line in saved.splitlines() if unit_id[:16] in line]


async def test_a_closing_engine_leaves_no_egress_rule_of_its_sandboxes(docker_client):
    request = SandboxStartRequest(
        image="python:3.11", memory="256m", cpus=0.5, egress={"default": "deny"}
    )
    async with SandboxManager(EngineConfig(reap_orphans=False)) as engine:
        units = []
        for _ in range(3):
            status = await engine.start(request)
            units.append(engine.get_record(status.sandbox_id).unit_id or "")
        assert all(_rules_of(unit) for unit in units)
    assert {unit[:12]: _rules_of(unit) for unit in units if _rules_of(unit)} == {}
