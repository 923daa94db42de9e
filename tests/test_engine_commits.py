"""ROCK's commit in the engine (issue #25 point 5), on real Docker, with a registry configured
(``commit_registries``) where nothing listens: the push is really tried and fails, reported as
``FAILED`` at stage ``push`` (``PUSH_FAILED``) with the image committed on the node; a registry
not configured is refused at once. A commit never renames an image that is not the tenant's own
commit (a base image stays as it was); the tenant's own tag is replaced by a new commit. One
commit at a time per sandbox."""

from __future__ import annotations

import socket
import uuid
from collections.abc import AsyncIterator
from typing import Any

import anyio
import docker.errors
import pytest

from rock_core.actions import (
    Command,
    CommitErrorCode,
    CommitPhase,
    CommitStatusResponse,
    SandboxStartRequest,
)
from rock_core.engine.config import EngineConfig
from rock_core.engine.manager import SandboxManager
from rock_core.errors import BadRequestRockError, InvalidParameter

pytestmark = [pytest.mark.docker, pytest.mark.anyio]

SMALL = {"image": "python:3.11", "memory": "256m", "cpus": 0.5}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


REGISTRY = f"localhost:{_free_port()}"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def engine(docker_client: Any) -> AsyncIterator[SandboxManager]:
    config = EngineConfig(timer_interval=0.2, commit_registries=[REGISTRY])
    async with SandboxManager(config) as manager:
        yield manager


async def _done(engine: SandboxManager, sandbox_id: str) -> CommitStatusResponse:
    for _ in range(1200):
        status = await engine.get_commit_status(sandbox_id)
        if status.phase is not CommitPhase.RUNNING:
            return status
        await anyio.sleep(0.1)
    raise AssertionError(f"the commit of {sandbox_id} did not end")


async def _running(engine: SandboxManager) -> str:
    started = await engine.start_async(SandboxStartRequest(**SMALL))
    await engine.wait_until_running(started.sandbox_id, timeout=120)
    return started.sandbox_id


def _remove(docker_client: Any, *tags: str) -> None:
    for tag in tags:
        try:
            docker_client.api.remove_image(tag, force=True)
        except docker.errors.ImageNotFound:
            pass


async def test_a_push_to_a_configured_registry_is_tried_and_its_failure_reported(
    engine: SandboxManager, docker_client: Any
) -> None:
    sandbox_id = await _running(engine)
    tag = f"{REGISTRY}/team/env:{uuid.uuid4().hex[:8]}"
    try:
        begun = await engine.commit(sandbox_id, tag, "user", "secret-password")
        assert begun.phase is CommitPhase.RUNNING and begun.image_tag == tag
        status = await _done(engine, sandbox_id)
        assert status.phase is CommitPhase.FAILED, status
        assert (status.failed_stage, status.error_code) == ("push", CommitErrorCode.PUSH_FAILED)
        assert status.error_message and "secret-password" not in status.error_message
        assert docker_client.api.inspect_image(tag)["Id"]  # committed before the push
        with pytest.raises(InvalidParameter, match="not among the configured commit_registries"):
            await engine.commit(sandbox_id, "registry.example.com/team/env:1")
    finally:
        await engine.stop(sandbox_id)
        _remove(docker_client, tag)


async def test_a_commit_never_renames_a_base_image_but_replaces_its_own_tag(
    engine: SandboxManager, docker_client: Any
) -> None:
    sandbox_id = await _running(engine)
    base = docker_client.api.inspect_image("python:3.11")["Id"]
    tag = f"rock-commit-test:{uuid.uuid4().hex[:8]}"
    try:
        await engine.commit(sandbox_id, "python:3.11")
        status = await _done(engine, sandbox_id)
        assert status.phase is CommitPhase.FAILED and status.failed_stage == "commit", status
        assert "python:3.11" in (status.error_message or "")
        assert "not a commit of this tenant" in (status.error_message or "")
        assert docker_client.api.inspect_image("python:3.11")["Id"] == base
        await engine.commit(sandbox_id, tag)
        with pytest.raises(BadRequestRockError, match="COMMIT_CONFLICT"):
            await engine.commit(sandbox_id, tag)
        assert (await _done(engine, sandbox_id)).phase is CommitPhase.SUCCEEDED
        first = docker_client.api.inspect_image(tag)["Id"]
        rock = engine.rocklet(sandbox_id, "execute")
        await rock.execute(Command(command=["sh", "-c", "echo again > /again.txt"]))
        await engine.commit(sandbox_id, tag)
        assert (await _done(engine, sandbox_id)).phase is CommitPhase.SUCCEEDED
        assert docker_client.api.inspect_image(tag)["Id"] != first
    finally:
        await engine.stop(sandbox_id)
        _remove(docker_client, tag)
