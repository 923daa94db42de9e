"""Fixtures of rock-postgres's cluster tests that drive sandboxes with rock's SDK (which
``rock_postgres.testing``, a plugin's module, may not import): a sandbox of two real admins of
one cluster (:func:`rock_postgres.testing.cluster_admins`), reached through each."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from rock.sdk.sandbox.client import Sandbox
from rock.sdk.sandbox.config import SandboxConfig
from rock_postgres.testing import AdminProcess, cluster_admins, postgres_url  # noqa: F401


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def through_both(
    cluster_admins: tuple[AdminProcess, AdminProcess],  # noqa: F811 - the fixture
) -> AsyncIterator[tuple[Sandbox, Sandbox]]:
    """A sandbox (``python:3.11``, 512m, half a CPU) started through the cluster's follower and
    attached through its leader, as (through the follower, through the leader); stopped after."""
    leader, follower = cluster_admins
    through_follower, through_leader = (
        Sandbox(SandboxConfig(image="python:3.11", base_url=url, memory="512m", cpus=0.5))
        for url in (follower.url, leader.url)
    )
    await through_follower.start()
    assert through_follower.sandbox_id is not None
    await through_leader.attach(through_follower.sandbox_id)
    try:
        yield through_follower, through_leader
    finally:
        await through_leader.stop()
