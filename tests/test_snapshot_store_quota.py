"""A tenant's snapshots that only the archive store holds count towards its ``max_snapshots``:
a node that never had the snapshot's image (or whose image was removed) still sees it in the
store, lists it, and refuses the tenant a snapshot past its quota; the admin's count of the
tenant's snapshots shows it too.

Two engines on this Docker host with different engine labels stand for two nodes sharing a
filesystem archive store: neither sees the other's snapshot images, only the store.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from rock_core.actions import SandboxStartRequest
from rock_core.engine.config import EngineConfig
from rock_core.engine.manager import SandboxManager
from rock_core.errors import QuotaExceeded
from rock_core.tenancy import Quota

pytestmark = [pytest.mark.docker, pytest.mark.anyio]

SMALL: dict[str, Any] = {"image": "python:3.11", "memory": "256m", "cpus": 0.5}
TENANT = "team-s"
ONE = Quota(max_snapshots=1)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def nodes(tmp_path: Any) -> AsyncIterator[tuple[SandboxManager, SandboxManager]]:
    run = uuid.uuid4().hex[:8]
    store = {"archive_store": "fs", "plugin_options": {"archive-fs": {"root": str(tmp_path)}}}
    async with (
        SandboxManager(EngineConfig(engine_label=f"quota-a-{run}", **store)) as a,
        SandboxManager(EngineConfig(engine_label=f"quota-b-{run}", **store)) as b,
    ):
        yield a, b
        for engine in (a, b):
            for snap in await engine.list_snapshots(TENANT):
                await engine.delete_snapshot(snap.name, tenant=TENANT)


async def test_a_snapshot_only_the_archive_store_holds_counts_towards_max_snapshots(
    nodes: tuple[SandboxManager, SandboxManager],
) -> None:
    a, b = nodes
    on_a = (await a.start(SandboxStartRequest(**SMALL), tenant=TENANT)).sandbox_id
    await a.snapshot(on_a, "kept", tenant=TENANT, quota=ONE, archive=True)
    await a.stop(on_a)

    # Node b has no image of it: the store's copy is the tenant's one snapshot there.
    (listed,) = await b.list_snapshots(TENANT)
    assert listed.name == "kept" and not listed.on_node
    assert (await b.snapshot_counts()).get(TENANT) == 1
    on_b = (await b.start(SandboxStartRequest(**SMALL), tenant=TENANT)).sandbox_id
    try:
        with pytest.raises(QuotaExceeded, match=r"max_snapshots 1 reached \(using 1, asked 1\)"):
            await b.snapshot(on_b, "second", tenant=TENANT, quota=ONE)
        assert [s.name for s in await b.list_snapshots(TENANT)] == ["kept"]
        # Deleted (from the store): the tenant may snapshot again.
        await b.delete_snapshot("kept", tenant=TENANT)
        await b.snapshot(on_b, "second", tenant=TENANT, quota=ONE)
    finally:
        await b.stop(on_b)
