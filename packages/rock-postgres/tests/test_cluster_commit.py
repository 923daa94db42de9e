"""ROCK's commit in a cluster of two real admins on one PostgreSQL database: the commit and its
status are the leader's (the follower forwards both, so a status asked through either admin is
the same job's), and the image tag is made on the node."""

from __future__ import annotations

import uuid

import docker
import docker.errors
import pytest

from rock.sdk.sandbox.client import Sandbox
from rock_core.actions import CommitPhase

pytestmark = [pytest.mark.anyio, pytest.mark.docker]


async def test_a_commit_through_the_follower_is_the_leaders_and_its_status_the_same_on_both(
    through_both: tuple[Sandbox, Sandbox],
) -> None:
    through_follower, through_leader = through_both
    tag = f"rock-commit-cluster:{uuid.uuid4().hex[:10]}"
    client = docker.from_env()
    try:
        await through_follower.arun("echo clustered > /c.txt")
        status = await through_follower.commit(tag, "", "", timeout=120, interval=0.2)
        assert status is not None and status.phase is CommitPhase.SUCCEEDED, status
        assert await through_leader.get_commit_status() == status
        assert client.api.inspect_image(tag)["Id"]
    finally:
        try:
            client.api.remove_image(tag, force=True)
        except docker.errors.ImageNotFound:
            pass
        client.close()
