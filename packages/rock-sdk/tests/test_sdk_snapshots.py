"""Filesystem snapshots, starts from them and forks (issue #25 points 1 and 2), on real Docker,
embedded and (with ``ROCK_TEST_REMOTE=1``) through a real admin.

A snapshot holds the sandbox's files over its image: files written, an image file deleted, a
symlink, a mode and an owner changed all appear in a sandbox started from it; its processes do
not. The committed image carries no secret of the engine (the rocklet's token is blanked).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest

from rock.actions import Command
from rock.sdk import warm_pool
from rock.sdk.sandbox.client import Sandbox
from rock.sdk.sandbox.config import SandboxConfig
from rock_core.errors import BadRequestRockError, InvalidParameter, RockError
from rock_core.rocklet.server import TOKEN_ENV

pytestmark = [pytest.mark.anyio, pytest.mark.docker]


def _name(prefix: str = "snap") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


async def _sh(sandbox: Sandbox, script: str) -> str:
    answer = await sandbox.execute(Command(command=["bash", "-c", script], timeout=60))
    assert answer.exit_code == 0, (script, answer.stdout, answer.stderr)
    return answer.stdout.strip()


PREPARE = (
    "mkdir -p /work && echo hello > /work/data.txt && ln -s /work/data.txt /work/link"
    " && chmod 751 /work/data.txt && touch /work/owned && chown nobody:nogroup /work/owned"
    " && rm /etc/debian_version && (sleep 1000 >/dev/null 2>&1 &)"
)
CHECK = (
    "cat /work/data.txt; readlink /work/link; stat -c %a /work/data.txt; stat -c %U /work/owned;"
    " test -e /etc/debian_version && echo present || echo deleted;"
    " pgrep -x sleep >/dev/null && echo sleeping || echo no-sleep"
)
EXPECTED = "hello\n/work/data.txt\n751\nnobody\ndeleted\nno-sleep"


async def test_a_sandbox_started_from_a_snapshot_has_the_parents_files_but_not_its_processes(
    engine: Any, small: dict[str, Any], docker_client: Any
) -> None:
    parent = Sandbox(SandboxConfig(**small))
    await parent.start()
    child: Sandbox | None = None
    name = _name()
    try:
        await _sh(parent, PREPARE)
        snap = await parent.snapshot(name=name)
        assert (snap.name, snap.sandbox_id) == (name, parent.sandbox_id)
        assert snap.size > 0 and snap.created_at.year >= 2024
        assert snap.frozen_seconds is not None and snap.frozen_seconds >= 0
        # The parent runs on, its process too.
        assert (await _sh(parent, "pgrep -x sleep >/dev/null && echo sleeping")) == "sleeping"
        # The image's configuration (what a sandbox started from it gets) holds no rocklet token
        # (blanked) and no rock.* label of the parent's. (Docker 20.10 also keeps the parent
        # container's own config in the image's legacy ContainerConfig, on this node only.)
        token = next(
            e.split("=", 1)[1]
            for e in docker_client.api.inspect_container(parent.sandbox_id)["Config"]["Env"]
            if e.startswith(f"{TOKEN_ENV}=")
        )
        image = docker_client.api.inspect_image(snap.image)
        assert token and token not in json.dumps(image["Config"])
        assert f"{TOKEN_ENV}=" in image["Config"]["Env"]
        assert image["Config"]["Labels"]["rock.sandbox_id"] == ""

        child = Sandbox(SandboxConfig(**small, snapshot=name))
        await child.start()
        assert await _sh(child, CHECK) == EXPECTED
        assert (await child.get_status()).image == snap.image
    finally:
        if child is not None:
            await child.stop()
        await parent.stop()
        if child is not None:
            await _delete_when_unused(parent, name)


async def _delete_when_unused(sandbox: Sandbox, name: str) -> None:
    """Delete the snapshot once the removal of the sandboxes started from it has gone through."""
    for _ in range(300):
        try:
            await sandbox.delete_snapshot(name)
            return
        except BadRequestRockError as exc:
            if "still used" not in str(exc):
                raise
            await asyncio.sleep(0.1)
    await sandbox.delete_snapshot(name)


async def test_fork_three_gives_three_independent_sandboxes_with_the_parents_files(
    engine: Any, small: dict[str, Any]
) -> None:
    parent = Sandbox(SandboxConfig(**small, priority=7))
    await parent.start()
    forks: list[Sandbox] = []
    try:
        await _sh(parent, PREPARE)
        forks = await parent.fork(3)
        assert len(forks) == 3 and len({f.sandbox_id for f in forks} | {parent.sandbox_id}) == 4
        for fork in forks:
            assert await _sh(fork, CHECK) == EXPECTED
            assert (await fork.get_status()).state == "running"
        await _sh(forks[0], "echo changed > /work/data.txt && touch /work/only-in-0")
        await _sh(parent, "echo parent > /work/data.txt")
        assert await _sh(forks[1], "cat /work/data.txt; ls /work") == "hello\ndata.txt\nlink\nowned"
        assert await _sh(forks[0], "cat /work/data.txt") == "changed"
        assert await _sh(parent, "test -e /work/only-in-0 || echo absent") == "absent"
        mine = [s for s in await parent.snapshots() if s.sandbox_id == parent.sandbox_id]
        assert len(mine) == 1 and mine[0].name.startswith("fork-")
    finally:
        await asyncio.gather(*(f.stop() for f in forks))
        await parent.stop()
        for snap in [s for s in await parent.snapshots() if s.sandbox_id == parent.sandbox_id]:
            await _delete_when_unused(parent, snap.name)


async def test_snapshots_are_listed_with_size_and_time_and_deleted(
    engine: Any, small: dict[str, Any]
) -> None:
    sandbox = Sandbox(SandboxConfig(**small))
    await sandbox.start()
    name = _name()
    try:
        await _sh(sandbox, "head -c 3000000 /dev/urandom > /tmp/blob")
        made = await sandbox.snapshot(name=name)
        listed = {s.name: s for s in await sandbox.snapshots()}
        assert listed[name].size == made.size and made.size >= 3_000_000
        assert listed[name].created_at == made.created_at
        assert listed[name].frozen_seconds is None
        with pytest.raises(InvalidParameter, match=f"already has a snapshot '{name}'"):
            await sandbox.snapshot(name=name)
        # In use: refused, named; then deleted, and gone for good.
        user = Sandbox(SandboxConfig(**small, snapshot=name))
        await user.start()
        await user.stop()
        await _delete_when_unused(sandbox, name)
        assert name not in {s.name for s in await sandbox.snapshots()}
        with pytest.raises(InvalidParameter, match=f"unknown snapshot '{name}'"):
            await sandbox.delete_snapshot(name)
        with pytest.raises(RockError, match=f"unknown snapshot '{name}'"):
            await Sandbox(SandboxConfig(**small, snapshot=name)).start()
    finally:
        await sandbox.stop()


async def test_a_stopped_sandbox_kept_after_its_stop_can_be_snapshotted(
    engine: Any, small: dict[str, Any]
) -> None:
    sandbox = Sandbox(SandboxConfig(**small, auto_delete_seconds=600))
    await sandbox.start()
    name = _name()
    try:
        await _sh(sandbox, "echo kept > /kept.txt")
        await sandbox.stop()
        snap = await sandbox.snapshot(name=name)
        assert snap.frozen_seconds == 0
        child = Sandbox(SandboxConfig(**small, snapshot=name))
        await child.start()
        try:
            assert await _sh(child, "cat /kept.txt") == "kept"
        finally:
            await child.stop()
    finally:
        await sandbox.delete()
        await _delete_when_unused(sandbox, name)


async def test_a_warm_pool_of_a_snapshot_serves_starts_from_it(
    engine: Any, small: dict[str, Any]
) -> None:
    parent = Sandbox(SandboxConfig(**small))
    await parent.start()
    name = _name("pooled")
    config = SandboxConfig(**small, snapshot=name)
    try:
        await _sh(parent, "echo pooled > /pool.txt")
        await parent.snapshot(name=name)
        status = await warm_pool(config, size=1, wait=120)
        assert status is not None and (status.ready, status.last_error) == (1, None)
        async with Sandbox(config) as claimed:
            state = await claimed.get_status()
            assert state.status["docker_run"].message == f"claimed from warm pool {status.key}"
            assert await _sh(claimed, "cat /pool.txt") == "pooled"
    finally:
        assert await warm_pool(config, size=0) is None
        await parent.stop()
        await _delete_when_unused(parent, name)
