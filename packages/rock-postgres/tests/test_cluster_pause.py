"""Pause and resume in a cluster of two real admins on one PostgreSQL database: both calls are
the leader's (a follower forwards them), and the follower, which serves calls from the shared
store, sees the pause at once: its status says paused, and a command sent to it is refused
naming the pause until the sandbox is resumed."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from rock.sdk.sandbox.client import Sandbox
from rock.sdk.sandbox.config import SandboxConfig
from rock_core.errors import BadRequestRockError
from rock_postgres.testing import AdminProcess, postgres_url, two_admins  # noqa: F401

pytestmark = [pytest.mark.anyio, pytest.mark.docker]

CLUSTER = f"pause-{uuid.uuid4().hex[:8]}"


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


async def test_a_pause_through_the_follower_holds_on_both_admins(
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
        await through_follower.arun("echo before")  # the follower holds a client of it now
        paused = await through_follower.pause()  # forwarded to the leader
        assert paused.paused and paused.state.value == "running"
        for handle in (through_follower, through_leader):
            assert (await handle.get_status()).paused
            with pytest.raises(BadRequestRockError, match=f"{sandbox_id} is paused; resume it"):
                await handle.arun("echo hi")
        resumed = await through_follower.resume()
        assert not resumed.paused
        for handle in (through_follower, through_leader):
            assert (await handle.arun("echo after")).output.strip() == "after"
    finally:
        await through_leader.stop()
