"""Reset in a cluster of two real admins on one PostgreSQL database: the call is the leader's (a
follower forwards it), and the follower, which serves calls from the shared store, reaches the
sandbox's new container after it: the files are the image's, and commands run."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from rock.sdk.sandbox.client import Sandbox
from rock.sdk.sandbox.config import SandboxConfig
from rock_postgres.testing import AdminProcess, postgres_url, two_admins  # noqa: F401

pytestmark = [pytest.mark.anyio, pytest.mark.docker]

CLUSTER = f"reset-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def admins(tmp_path: Path, postgres_url: str) -> Iterator[tuple[AdminProcess, AdminProcess]]:
    """The cluster's (leader, follower)."""
    with two_admins(tmp_path, postgres_url, cluster=CLUSTER) as admins:
        yield admins


def _sandbox(url: str) -> Sandbox:
    return Sandbox(SandboxConfig(image="python:3.11", base_url=url, memory="512m", cpus=0.5))


async def test_a_reset_through_the_follower_is_seen_on_both_admins(
    admins: tuple[AdminProcess, AdminProcess],
) -> None:
    leader, follower = admins
    through_follower = _sandbox(follower.url)
    await through_follower.start()
    sandbox_id = through_follower.sandbox_id
    assert sandbox_id is not None
    through_leader = _sandbox(leader.url)
    await through_leader.attach(sandbox_id)
    try:
        # The follower holds a client of the sandbox's first container now.
        await through_follower.arun("echo dirty > /dirty")
        before = await through_leader.get_status()
        status = await through_follower.reset()  # forwarded to the leader
        assert status.status is not None and "reset to image" in status.status["reset"].message
        for handle in (through_follower, through_leader):
            done = await handle.arun("test -e /dirty && echo kept || echo gone")
            assert done.output.strip() == "gone"
            after = await handle.get_status()
            assert after.is_alive and after.port_mapping == before.port_mapping
    finally:
        await through_leader.stop()
