"""A start is never duplicated (issue #24 point 4): the engine (rock-core's SandboxManager) on
real containers through rock-docker, starts carrying an idempotency key.

A start with a key the tenant used before answers the first start's sandbox (its record, whatever
its state) instead of making another; two tenants' equal keys never meet.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from rock_core.actions import SandboxStartRequest
from rock_core.engine.config import EngineConfig
from rock_core.engine.manager import LABEL_SANDBOX_ID, SandboxManager
from rock_core.engine.starting import idempotency_digest
from rock_core.errors import InvalidParameter, SandboxAlreadyExists
from rock_core.models import SandboxRecord
from rock_core.states import State
from rock_core.testing import eventually_empty

pytestmark = [pytest.mark.docker, pytest.mark.anyio]

IMAGE = "python:3.11"
SMALL = {"image": IMAGE, "memory": "256m", "cpus": 0.5}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def containers_of(docker_client: Any, sandbox_id: str) -> list[Any]:
    return docker_client.containers.list(
        all=True, filters={"label": f"{LABEL_SANDBOX_ID}={sandbox_id}"}, ignore_removed=True
    )


def _config(tmp_path: Path) -> EngineConfig:
    return EngineConfig(
        timer_interval=0.2, reconcile_interval=1.0, store_path=str(tmp_path / "records.db")
    )


@pytest.fixture
async def engine(docker_client: Any, tmp_path: Path) -> Any:
    async with SandboxManager(_config(tmp_path)) as manager:
        yield manager
    leftovers = eventually_empty(
        lambda: docker_client.containers.list(
            all=True, filters={"label": f"rock.engine_id={manager.engine_id}"}, ignore_removed=True
        )
    )
    assert leftovers == [], "closing the engine must remove its containers"


async def test_concurrent_starts_with_one_key_make_one_sandbox(
    engine: SandboxManager, docker_client: Any
) -> None:
    request = SandboxStartRequest(**SMALL)
    answers: list[SandboxRecord] = []

    async def start() -> None:
        answers.append(await engine.start_async(request, tenant="team-a", idempotency_key="k-1"))

    async with anyio.create_task_group() as tg:
        for _ in range(8):
            tg.start_soon(start)
    ids = {record.sandbox_id for record in answers}
    assert ids == {idempotency_digest("team-a", "k-1")}
    (sandbox_id,) = ids
    status = await engine.wait_until_running(sandbox_id, timeout=120)
    assert status.state is State.RUNNING
    assert len(containers_of(docker_client, sandbox_id)) == 1
    # A start repeated after the sandbox runs answers it as it is now.
    again = await engine.start(request, tenant="team-a", idempotency_key="k-1")
    assert (again.sandbox_id, again.state) == (sandbox_id, State.RUNNING)
    # Another tenant's key of the same text, or another key: other sandboxes.
    other = await engine.start_async(request, tenant="team-b", idempotency_key="k-1")
    fresh = await engine.start_async(request, tenant="team-a", idempotency_key="k-2")
    assert len({sandbox_id, other.sandbox_id, fresh.sandbox_id}) == 3
    assert len(engine.list_records(states=[State.PENDING, State.RUNNING])) == 3


async def test_a_start_naming_its_id_with_a_key_is_answered_by_the_first_one(
    engine: SandboxManager, docker_client: Any
) -> None:
    request = SandboxStartRequest(**SMALL, sandbox_id="idem-named-1")
    first = await engine.start_async(request, idempotency_key="k-named")
    second = await engine.start_async(request, idempotency_key="k-named")
    assert first.sandbox_id == second.sandbox_id == "idem-named-1"
    await engine.wait_until_running("idem-named-1", timeout=120)
    assert len(containers_of(docker_client, "idem-named-1")) == 1
    # The same id with another key, or with none, is another start: refused as before.
    with pytest.raises(SandboxAlreadyExists, match="idem-named-1 already exists"):
        await engine.start_async(request, idempotency_key="k-other")
    with pytest.raises(SandboxAlreadyExists, match="idem-named-1 already exists"):
        await engine.start_async(request)
    # ... and so is another tenant's start with the same id and key.
    with pytest.raises(SandboxAlreadyExists, match="idem-named-1 already exists"):
        await engine.start_async(request, tenant="someone-else", idempotency_key="k-named")


async def test_a_key_that_made_a_sandbox_refuses_a_request_naming_another_id(
    engine: SandboxManager,
) -> None:
    made = await engine.start_async(SandboxStartRequest(**SMALL), idempotency_key="k-derived")
    with pytest.raises(InvalidParameter, match="differs from sandbox") as info:
        await engine.start_async(
            SandboxStartRequest(**SMALL, sandbox_id="idem-other-id"), idempotency_key="k-derived"
        )
    assert (info.value.field, info.value.value) == ("sandbox_id", "idem-other-id")
    await engine.stop(made.sandbox_id)


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        ("", "a blank key"),
        ("   ", "a blank key"),
        ("x" * 201, "at most 200 characters, got 201"),
        ("tab\there", "printable ASCII characters only"),
        ("é", "printable ASCII characters only"),
    ],
)
async def test_a_bad_key_is_refused_naming_it(
    engine: SandboxManager, key: str, reason: str
) -> None:
    with pytest.raises(InvalidParameter, match=f"^idempotency_key: {reason}") as info:
        await engine.start_async(SandboxStartRequest(**SMALL), idempotency_key=key)
    assert (info.value.field, info.value.value) == ("idempotency_key", key)
    assert engine.list_records() == []


async def test_the_engine_keeps_the_reserved_metadata_key_for_itself(
    engine: SandboxManager,
) -> None:
    request = SandboxStartRequest(**SMALL, metadata={"rock.idempotency_key": "forged"})
    with pytest.raises(InvalidParameter, match="'rock.idempotency_key' is reserved") as info:
        await engine.start_async(request)
    assert info.value.field == "metadata"


async def test_a_key_is_answered_from_the_record_store_after_the_engine_reopens(
    tmp_path: Path, docker_client: Any
) -> None:
    """The reopened engine knows the first start only by its record (an embedded engine's
    sandboxes end with it): the repeated start answers that record, and starts nothing."""
    request = SandboxStartRequest(**SMALL)
    async with SandboxManager(_config(tmp_path)) as first_engine:
        made = await first_engine.start_async(request, idempotency_key="k-stored")
        await first_engine.wait_until_running(made.sandbox_id, timeout=120)
    before = {c.id for c in containers_of(docker_client, made.sandbox_id)}
    try:
        async with SandboxManager(_config(tmp_path)) as second_engine:
            assert second_engine.get_record(made.sandbox_id).state is State.DELETED
            again = await second_engine.start_async(request, idempotency_key="k-stored")
            assert (again.sandbox_id, again.state) == (made.sandbox_id, State.DELETED)
            assert [r.sandbox_id for r in second_engine.list_records()] == [made.sandbox_id]
            assert {c.id for c in containers_of(docker_client, made.sandbox_id)} <= before
    finally:
        for container in containers_of(docker_client, made.sandbox_id):
            container.remove(force=True)
