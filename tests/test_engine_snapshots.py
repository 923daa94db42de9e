"""The engine's snapshots and forks on real Docker (rock_core/engine/snapshots.py): what a fork's
sandboxes inherit, and the bad input each call names."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from rock_core.actions import Command, SandboxStartRequest
from rock_core.errors import BadRequestRockError, InvalidParameter, SandboxNotFound
from rock_core.testing import eventually_async

pytestmark = [pytest.mark.docker, pytest.mark.anyio]

SMALL = {"image": "python:3.11", "memory": "256m", "cpus": 0.5}


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
def engine(snapshot_engine):
    return snapshot_engine


async def test_a_forks_sandboxes_have_the_parents_settings_priority_and_identity(engine):
    parent = await engine.start(
        SandboxStartRequest(
            **SMALL,
            priority=8,
            env={"TASK": "t-1"},
            metadata={"episode": "e-1"},
            pids_limit=512,
            auto_delete_seconds=60,
        ),
        user_id="u-1",
        experiment_id="x-1",
    )
    snap, records = await engine.fork(parent.sandbox_id, 2)
    try:
        assert snap.sandbox_id == parent.sandbox_id and snap.source_image == "python:3.11"
        for record in records:
            await engine.wait_until_running(record.sandbox_id, timeout=120)
            spec = engine.get_record(record.sandbox_id).spec
            assert spec.image == snap.image and spec.pull.value == "never"
            assert (spec.priority, spec.env, spec.metadata) == (
                8,
                {"TASK": "t-1"},
                {"episode": "e-1"},
            )
            assert (spec.memory, spec.cpus, spec.pids_limit, spec.auto_delete_seconds) == (
                256 << 20,
                0.5,
                512,
                60,
            )
            assert (spec.user_id, spec.experiment_id, spec.tenant) == ("u-1", "x-1", engine.owner)
            answer = await engine.rocklet(record.sandbox_id).execute(
                Command(command=["sh", "-c", "echo $TASK"])
            )
            assert answer.stdout.strip() == "t-1"
    finally:
        for record in records:
            await engine.stop(record.sandbox_id)
            await engine.delete(record.sandbox_id)
        await engine.stop(parent.sandbox_id)
        await engine.delete(parent.sandbox_id)


async def test_bad_snapshot_and_fork_input_is_named(engine):
    with pytest.raises(SandboxNotFound, match="Sandbox no-such-sandbox not found"):
        await engine.snapshot("no-such-sandbox")
    with pytest.raises(SandboxNotFound):
        await engine.fork("no-such-sandbox", 2)
    parent = await engine.start(SandboxStartRequest(**SMALL))
    try:
        with pytest.raises(InvalidParameter, match="name: 'bad name!' is not a snapshot name"):
            await engine.snapshot(parent.sandbox_id, "bad name!")
        with pytest.raises(InvalidParameter, match="count: at least 1, got 0"):
            await engine.fork(parent.sandbox_id, 0)
        unknown = f"never-{uuid.uuid4().hex[:8]}"
        with pytest.raises(InvalidParameter, match=f"snapshot: unknown snapshot '{unknown}'"):
            await engine.start_async(SandboxStartRequest(**SMALL, snapshot=unknown))
    finally:
        await engine.stop(parent.sandbox_id)
    # Stopped with the default post-stop policy: its container is gone, nothing to snapshot.
    with pytest.raises(BadRequestRockError, match="cannot be snapshotted: current state is"):
        await engine.snapshot(parent.sandbox_id)


async def test_two_snapshots_of_one_name_at_once_make_one_and_other_names_go_on(engine):
    parent = await engine.start(SandboxStartRequest(**SMALL))
    name = f"same-{uuid.uuid4().hex[:8]}"
    try:
        results = await asyncio.gather(
            engine.snapshot(parent.sandbox_id, name),
            engine.snapshot(parent.sandbox_id, name),
            engine.snapshot(parent.sandbox_id, f"{name}-other"),
            return_exceptions=True,
        )
        refused = [r for r in results if isinstance(r, BaseException)]
        assert len(refused) == 1 and isinstance(refused[0], InvalidParameter), results
        assert f"already has a snapshot '{name}'" in str(refused[0])
        names = sorted(s.name for s in await engine.list_snapshots())
        assert names == [name, f"{name}-other"]
    finally:
        await engine.stop(parent.sandbox_id)


async def test_a_snapshot_with_snapshots_made_over_it_is_kept_until_they_are_deleted(engine):
    parent = await engine.start(SandboxStartRequest(**SMALL))
    base = f"base-{uuid.uuid4().hex[:8]}"
    try:
        await engine.rocklet(parent.sandbox_id).execute(
            Command(command=["sh", "-c", "echo one > /one.txt"])
        )
        await engine.snapshot(parent.sandbox_id, base)
    finally:
        await engine.stop(parent.sandbox_id)
    child = await engine.start(SandboxStartRequest(**SMALL, snapshot=base))
    try:
        await engine.rocklet(child.sandbox_id).execute(
            Command(command=["sh", "-c", "echo two > /two.txt"])
        )
        over = await engine.snapshot(child.sandbox_id, f"{base}-over")
        assert 0 < over.size < 1 << 20  # only the child's own change, not the base's files again
    finally:
        await engine.stop(child.sandbox_id)
    await eventually_async(
        lambda: engine.get_record(child.sandbox_id).state.value == "deleted", timeout=60
    )
    with pytest.raises(BadRequestRockError, match="snapshots of sandboxes started from it"):
        await engine.delete_snapshot(base)
    grandchild = await engine.start(SandboxStartRequest(**SMALL, snapshot=f"{base}-over"))
    try:
        answer = await engine.rocklet(grandchild.sandbox_id).execute(
            Command(command=["sh", "-c", "cat /one.txt /two.txt"])
        )
        assert answer.stdout.split() == ["one", "two"]
    finally:
        await engine.stop(grandchild.sandbox_id)
