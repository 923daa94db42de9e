"""Removals leave the network one container at a time (rock_docker._network_leave): the order
Docker 20.10 needs to avoid its network deadlock when many containers are removed at once.
Read from Docker's own event stream: each container's ``die`` is followed by its network
``disconnect`` before the next container dies, where ``docker rm -f`` of several running
containers at once gives every ``die`` first and the disconnects after."""

from __future__ import annotations

import time
import uuid
from typing import Any

import anyio
import pytest

from rock_core.models import SandboxSpec
from rock_core.sizes import MiB
from rock_core.testing import unique_sandbox_id
from rock_docker import DockerRuntime
from rock_docker.reaper import reap

from .conftest import IMAGE

pytestmark = [pytest.mark.anyio, pytest.mark.docker]


@pytest.fixture
def anyio_backend():
    return "asyncio"


def events_of(docker_client: Any, ids: set[str], since: float) -> list[tuple[str, str]]:
    """``(container id, "disconnect" | "die")`` in the order Docker reports them."""
    seen = []
    for event in docker_client.events(since=int(since), until=int(time.time()) + 1, decode=True):
        actor = event.get("Actor") or {}
        if event.get("Type") == "network" and event.get("Action") == "disconnect":
            unit = (actor.get("Attributes") or {}).get("container")
        elif event.get("Type") == "container" and event.get("Action") == "die":
            unit = actor.get("ID")
        else:
            continue
        if unit in ids:
            seen.append((unit, event["Action"]))
    return seen


def one_leave_at_a_time(seen: list[tuple[str, str]]) -> bool:
    """Whether the events come in pairs, a container's ``die`` then its ``disconnect``: no
    container dies while another is still leaving its network."""
    pairs = [seen[i : i + 2] for i in range(0, len(seen), 2)]
    return all(
        len(pair) == 2 and pair[0][1] == "die" and pair[1] == (pair[0][0], "disconnect")
        for pair in pairs
    )


async def test_sandboxes_removed_at_once_leave_their_network_one_at_a_time(
    tmp_path, run_labels, docker_client
):
    since = time.time() - 1
    async with DockerRuntime(rocklet_dir=tmp_path) as runtime:
        handles = []
        for _ in range(3):
            spec = SandboxSpec(
                image=IMAGE, memory=256 * MiB, cpus=0.5, sandbox_id=unique_sandbox_id("leave")
            )
            labels = {**run_labels, "rock.sandbox_id": spec.sandbox_id}
            handle = await runtime.create(spec, labels=labels, rocklet_token="t")
            await runtime.start(handle)
            handles.append(handle)
        async with anyio.create_task_group() as group:
            for handle in handles:
                group.start_soon(runtime.remove, handle)
    ids = {h.unit_id for h in handles}
    assert not {c.id for c in docker_client.containers.list(all=True, ignore_removed=True)} & ids
    seen = await anyio.to_thread.run_sync(events_of, docker_client, ids, since)
    assert {unit for unit, _ in seen} == ids, seen
    assert one_leave_at_a_time(seen), seen


def test_the_reaper_leaves_the_network_one_container_at_a_time(run_labels, docker_client):
    since = time.time() - 1
    name = f"leave-reap-{uuid.uuid4().hex[:8]}"
    ids = {
        docker_client.containers.run(
            IMAGE, ["sleep", "600"], detach=True, labels=run_labels, name=f"{name}-{n}", init=True
        ).id
        for n in range(3)
    }
    assert reap(sorted(ids)) == []
    assert docker_client.containers.list(all=True, filters={"name": name}) == []
    seen = events_of(docker_client, ids, since)
    assert {unit for unit, _ in seen} == ids, seen
    assert one_leave_at_a_time(seen), seen
