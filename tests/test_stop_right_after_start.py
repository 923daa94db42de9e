"""A stop straight after ``start_async`` (no checkpoint between), against the real Docker engine.

``start_async`` returns before its start task has run; a stop called at once must end that task
before it creates a container or claims a warm-pool member: the record stopped, no container of
the sandbox left running, and (with a pool) the member still the pool's.
"""

from __future__ import annotations

import anyio
import pytest

from rock_core.actions import SandboxStartRequest
from rock_core.engine.config import EngineConfig
from rock_core.engine.manager import LABEL_ENGINE_ID, LABEL_SANDBOX_ID, SandboxManager
from rock_core.engine.pool import LABEL_POOL_MEMBER
from rock_core.states import State
from rock_core.testing import eventually_async

pytestmark = [pytest.mark.docker, pytest.mark.anyio]

KIND = {"image": "python:3.11", "memory": "256m", "cpus": 0.5}


@pytest.fixture
def anyio_backend():
    return "asyncio"


def _spy(monkeypatch, runtime, method, seen):
    """Note which sandbox every call of ``runtime.method`` is for (then make the real call):
    ``create(spec, ...)`` is for ``spec.sandbox_id``, ``assign(member, sandbox_id)`` for
    ``sandbox_id``."""
    real = getattr(runtime, method)

    async def noted(*args, **kwargs):
        seen.append((method, args[1] if method == "assign" else args[0].sandbox_id))
        return await real(*args, **kwargs)

    monkeypatch.setattr(runtime, method, noted)


@pytest.mark.parametrize("pool", [0, 1], ids=["no-pool", "warm-pool"])
async def test_a_stop_at_once_after_start_async_leaves_no_container(
    docker_client, monkeypatch, pool
):
    config = EngineConfig(warm_pools=[{**KIND, "size": pool}] if pool else [])
    async with SandboxManager(config) as engine:
        if pool:
            (status,) = await engine.wait_warm(timeout=120)
            assert (status.ready, status.last_error) == (1, None)
        members_before = {c.id for c in _members(docker_client, engine)}
        seen: list[tuple[str, str]] = []
        for method in ("create", "assign"):
            _spy(monkeypatch, engine.runtime, method, seen)
        started = await engine.start_async(SandboxStartRequest(**KIND))
        sandbox_id = started.sandbox_id
        await engine.stop(sandbox_id)
        await anyio.wait_all_tasks_blocked()  # a start task still going has reached the runtime
        assert [call for call in seen if call[1] == sandbox_id] == []
        assert engine.get_record(sandbox_id).state in (State.STOPPED, State.DELETED)

        def of_sandbox():
            by_label = docker_client.containers.list(
                all=True, filters={"label": f"{LABEL_SANDBOX_ID}={sandbox_id}"}, ignore_removed=True
            )
            by_name = docker_client.containers.list(
                all=True, filters={"name": f"^/{sandbox_id}$"}, ignore_removed=True
            )
            return by_label + by_name

        await eventually_async(of_sandbox, until=lambda found: found == [], what="no container")
        if pool:
            assert {c.id for c in _members(docker_client, engine)} == members_before
            [status] = engine.warm_pools()
            assert (status.ready, status.claimed) == (1, 0)


def _members(docker_client, engine):
    """The unclaimed pool members of ``engine``."""
    found = docker_client.containers.list(
        all=True,
        filters={"label": [f"{LABEL_ENGINE_ID}={engine.engine_id}", LABEL_POOL_MEMBER]},
        ignore_removed=True,
    )
    return [c for c in found if c.name == c.labels.get(LABEL_POOL_MEMBER)]
