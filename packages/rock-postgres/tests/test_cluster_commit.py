"""ROCK's commit in a cluster of two real admins on one PostgreSQL database: the commit and its
status are the leader's (the follower forwards both, so a status asked through either admin is
the same job's), and the image tag is made on the node."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import docker.errors
import pytest

from rock.sdk.sandbox.client import Sandbox
from rock.sdk.sandbox.config import SandboxConfig
from rock_core.actions import CommitPhase
from rock_postgres.testing import AdminProcess, postgres_url, two_admins  # noqa: F401

pytestmark = [pytest.mark.anyio, pytest.mark.docker]

CLUSTER = f"commit-{uuid.uuid4().hex[:8]}"


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


async def test_a_commit_through_the_follower_is_the_leaders_and_its_status_the_same_on_both(
    admins: tuple[AdminProcess, AdminProcess],
) -> None:
    leader, follower = admins
    tag = f"rock-commit-cluster:{uuid.uuid4().hex[:10]}"
    through_follower = _sandbox(follower.url)
    await through_follower.start()
    sandbox_id = through_follower.sandbox_id
    assert sandbox_id is not None
    through_leader = _sandbox(leader.url)
    await through_leader.attach(sandbox_id)
    client = docker.from_env()
    try:
        await through_follower.arun("echo clustered > /c.txt")
        status = await through_follower.commit(tag, "", "", timeout=120, interval=0.2)
        assert status is not None and status.phase is CommitPhase.SUCCEEDED, status
        assert await through_leader.get_commit_status() == status
        assert client.api.inspect_image(tag)["Id"]
    finally:
        await through_leader.stop()
        try:
            client.api.remove_image(tag, force=True)
        except docker.errors.ImageNotFound:
            pass
        client.close()
