"""Snapshots kept in the archive store (issue #25 point 1): another node sharing the store starts
a sandbox from a snapshot it never had, with the parent's files as they were at the snapshot
(deletions, owners, modes, symlinks), on the filesystem store and on S3 (moto's real server).

Two engines on this Docker host with different engine labels stand for two nodes: neither sees
the other's snapshot images, only the store is shared.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import pytest

from rock_core.actions import Command, SandboxStartRequest
from rock_core.engine.config import EngineConfig
from rock_core.engine.manager import SandboxManager
from rock_core.errors import BadRequestRockError, InvalidParameter
from rock_core.testing import eventually_empty

pytestmark = [pytest.mark.docker, pytest.mark.anyio]

SMALL: dict[str, Any] = {"image": "python:3.11", "memory": "256m", "cpus": 0.5}
# What the parent does before its snapshot: every kind of change the archive keeps.
PREPARE = (
    "set -e; mkdir -p /work/sub && head -c 3M /dev/urandom > /work/sub/data.bin && "
    "echo task > /work/task.txt && chmod 640 /work/task.txt && chown nobody:nogroup /work/task.txt && "
    "ln -s /work/task.txt /work/link && rm /etc/debian_version && echo changed >> /etc/hostname.rock"
)
# What the files look like, for comparing the parent (at its snapshot) with a child.
LOOK = (
    "sha256sum /work/sub/data.bin | cut -d' ' -f1; stat -c '%a %U %G' /work/task.txt; "
    "readlink /work/link; cat /work/link; test -e /etc/debian_version && echo kept || echo deleted; "
    "cat /etc/hostname.rock; test -e /work/after.txt && echo after || echo before; "
    "test -e /.rock-restore && echo restore-dir || echo clean"
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def moto() -> Iterator[Any]:
    from rock_archive_s3.testing import MotoServer

    with MotoServer() as server:
        yield server


@pytest.fixture(params=["fs", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Any) -> dict[str, Any]:
    """The settings of an archive store both engines share."""
    if request.param == "fs":
        return {"archive_store": "fs", "plugin_options": {"archive-fs": {"root": str(tmp_path)}}}
    server = request.getfixturevalue("moto")
    bucket = server.create_bucket(f"snapshots-{uuid.uuid4().hex[:8]}")
    return {"archive_store": "s3", "plugin_options": {"archive-s3": server.settings(bucket)}}


async def _shell(engine: SandboxManager, sandbox_id: str, script: str) -> str:
    result = await engine.rocklet(sandbox_id).execute(
        Command(command=["bash", "-c", script], timeout=120)
    )
    assert result.exit_code == 0, (script, result.stdout, result.stderr)
    return result.stdout.strip()


async def _delete(engine: SandboxManager, name: str) -> None:
    for _ in range(300):  # its sandboxes' containers may still be being removed
        try:
            await engine.delete_snapshot(name)
            return
        except BadRequestRockError:
            await anyio.sleep(0.1)


@pytest.fixture
async def nodes(store: dict[str, Any], docker_client: Any) -> AsyncIterator[tuple[Any, Any]]:
    run = uuid.uuid4().hex[:8]
    async with (
        SandboxManager(EngineConfig(engine_label=f"node-a-{run}", **store)) as a,
        SandboxManager(EngineConfig(engine_label=f"node-b-{run}", **store)) as b,
    ):
        yield a, b
        for engine in (b, a):
            for snap in await engine.list_snapshots():
                await _delete(engine, snap.name)
    for engine in (a, b):
        assert (
            eventually_empty(
                lambda engine=engine: docker_client.containers.list(
                    all=True,
                    filters={"label": f"rock.engine_id={engine.engine_id}"},
                    ignore_removed=True,
                )
            )
            == []
        )


async def test_another_node_starts_from_a_snapshot_it_only_finds_in_the_archive_store(
    nodes: tuple[SandboxManager, SandboxManager], docker_client: Any
) -> None:
    a, b = nodes
    name = f"task-{uuid.uuid4().hex[:8]}"
    parent = str((await a.start(SandboxStartRequest(**SMALL))).sandbox_id)
    await _shell(a, parent, PREPARE)
    at_snapshot = await _shell(a, parent, LOOK)
    snap = await a.snapshot(parent, name, archive=True)
    assert snap.archived and snap.size >= 3 << 20
    await _shell(a, parent, "echo later > /work/after.txt")  # after the snapshot: not in it

    # Node b lists it as one only the store has, until a start makes it an image there.
    (listed_b,) = [s for s in await b.list_snapshots() if s.name == name]
    assert listed_b.archived and not listed_b.on_node and listed_b.image == ""
    assert listed_b.sandbox_id == parent and listed_b.size == snap.size
    child = str((await b.start(SandboxStartRequest(**SMALL, snapshot=name))).sandbox_id)
    assert await _shell(b, child, LOOK) == at_snapshot
    assert at_snapshot.splitlines()[1:] == [
        "640 nobody nogroup",
        "/work/task.txt",
        "task",
        "deleted",
        "changed",
        "before",
        "clean",
    ]
    # Made an image on node b once: a second start uses it, and node b now lists it.
    listed = [s for s in await b.list_snapshots() if s.name == name]
    assert len(listed) == 1 and listed[0].archived and listed[0].sandbox_id == parent
    assert listed[0].on_node
    second = str((await b.start(SandboxStartRequest(**SMALL, snapshot=name))).sandbox_id)
    assert await _shell(b, second, "cat /work/task.txt") == "task"
    assert len([s for s in await b.list_snapshots() if s.name == name]) == 1
    for engine, sandbox_id in ((b, child), (b, second), (a, parent)):
        await engine.stop(sandbox_id)

    # Deleted on node b: gone from the store too, so a third node could not start from it.
    await _delete(b, name)
    await _delete(a, name)
    with pytest.raises(InvalidParameter, match=f"unknown snapshot '{name}'"):
        await b.start(SandboxStartRequest(**SMALL, snapshot=name))
    assert not docker_client.containers.list(all=True, filters={"name": "rock-snapshot-io-"})


async def test_keeping_a_snapshot_in_the_archive_store_needs_one_and_a_name_not_stored_yet(
    nodes: tuple[SandboxManager, SandboxManager],
) -> None:
    a, b = nodes
    name = f"task-{uuid.uuid4().hex[:8]}"
    one = str((await a.start(SandboxStartRequest(**SMALL))).sandbox_id)
    other = str((await b.start(SandboxStartRequest(**SMALL))).sandbox_id)
    try:
        await a.snapshot(one, name, archive=True)
        # Node b has no image of that name, but the store has it: taken.
        with pytest.raises(InvalidParameter, match=f"already has a snapshot '{name}'"):
            await b.snapshot(other, name, archive=True)
    finally:
        await a.stop(one)
        await b.stop(other)
    async with SandboxManager(EngineConfig(engine_label=f"no-store-{name}")) as bare:
        sandbox_id = str((await bare.start(SandboxStartRequest(**SMALL))).sandbox_id)
        try:
            with pytest.raises(InvalidParameter, match="archive: this engine has no archive store"):
                await bare.snapshot(sandbox_id, archive=True)
            assert await bare.list_snapshots() == []
        finally:
            await bare.stop(sandbox_id)
