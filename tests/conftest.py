"""Fixtures shared by tests/'s modules (the root conftest.py holds those of the whole run)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from rock_core.engine.config import EngineConfig
from rock_core.engine.manager import SandboxManager
from rock_core.errors import BadRequestRockError
from rock_core.testing import eventually_empty

ROCK = Path(sys.executable).with_name("rock")


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


@pytest.fixture
def control_plane_bench(tmp_path: Path) -> Callable[..., dict[str, Any]]:
    """Runs ``rock bench control-plane`` as a user does, with these options besides 2 clients,
    starts of 0.1 to 0.5 s, 50 status and 2 list calls and an output folder in ``tmp_path``;
    checks that it succeeded and wrote the figures it printed, and answers them."""

    def run(*options: str) -> dict[str, Any]:
        done = subprocess.run(
            [
                str(ROCK),
                "bench",
                "control-plane",
                *options,
                "--clients",
                "2",
                "--start-seconds",
                "0.1,0.5",
                "--status-calls",
                "50",
                "--list-calls",
                "2",
                "--output",
                str(tmp_path / "run"),
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        figures: dict[str, Any] = json.loads(done.stdout)["figures"]
        assert json.loads((tmp_path / "run" / "results.json").read_text())["figures"] == figures
        return figures

    return run
