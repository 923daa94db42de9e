"""Fixtures for rock-nomad's tests: the local Docker engine and the test image.

The stand-in Nomad server runs every task as a real container, so these tests need a Docker
engine and ``rock-test/python:3.11`` (``make test`` provides both: scripts/ensure-docker.sh,
scripts/ensure-test-images.sh).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from rock_core.engine.config import EngineConfig
from rock_core.engine.manager import SandboxManager
from rock_core.rocklet_delivery import prepare_rocklet
from rock_nomad.runtime import NomadRuntime
from rock_nomad.testing import StandInNomad
from rock_nomad.testing.contract import ArtifactServer

IMAGE = "rock-test/python:3.11"


@pytest.fixture(scope="module")
def rocklet_url(tmp_path_factory) -> Any:
    """The engine's rocklet (built as the engine builds it), served over HTTP for the nodes."""
    delivery = prepare_rocklet()
    server = ArtifactServer(delivery.path.parent, "127.0.0.1")
    yield f"{server.url}/{delivery.path.name}"
    server.close()


@pytest.fixture
def engine_on(rocklet_url: str, tmp_path: Path) -> Callable[..., Any]:
    """``async with engine_on(nomad, **settings) as engine``: an engine whose runtime is
    ``nomad``, configured by its plugin table (``[plugins.nomad]``)."""

    @contextlib.asynccontextmanager
    async def make(
        nomad: StandInNomad, *, store: str | None = None, keep: bool = False, **settings: Any
    ) -> AsyncIterator[SandboxManager]:
        table = {"address": nomad.address, "rocklet_url": rocklet_url, **settings}
        config = EngineConfig(
            runtime="nomad",
            plugin_options={"nomad": table},
            reconcile_interval=0.5,
            store_path=store,
            stop_timeout=3.0,
            remove_on_close=not keep,
        )
        async with SandboxManager(config, owner=f"test-cluster-{tmp_path.name}") as engine:
            assert isinstance(engine.runtime, NomadRuntime)
            yield engine

    return make
