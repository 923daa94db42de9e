"""Fixtures shared by tests/'s modules (the root conftest.py holds those of the whole run)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from rock_core.engine.config import EngineConfig
from rock_core.engine.manager import SandboxManager
from rock_core.errors import BadRequestRockError
from rock_core.testing import eventually_empty


@pytest.fixture
async def snapshot_engine(docker_client: Any) -> AsyncIterator[SandboxManager]:
    """An embedded engine on the local Docker engine; at the end its snapshots are deleted (those
    made over others first, each retried while sandboxes still use it) and none of its
    containers is left."""
    async with SandboxManager(EngineConfig(timer_interval=0.2)) as manager:
        yield manager
        for snap in reversed(await manager.list_snapshots()):  # those made over others first
            for _ in range(300):
                try:
                    await manager.delete_snapshot(snap.name)
                    break
                except BadRequestRockError:
                    await anyio.sleep(0.1)
    assert (
        eventually_empty(
            lambda: docker_client.containers.list(
                all=True,
                filters={"label": f"rock.engine_id={manager.engine_id}"},
                ignore_removed=True,
            )
        )
        == []
    )
