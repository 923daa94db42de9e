"""A tenant's start served from a warm pool is checked against another tenant's commit too: a
member made while the pool's image tag named another tenant's commit is not handed to the
tenant (it is removed, and the start goes on as for any member that cannot be claimed).

An embedded engine on the local Docker engine. The race is made to happen every time: the
runtime (Docker's, unchanged) is wrapped so that the pool's tag names tenant ``a``'s commit (an
image labelled ``rock.commit.tenant=a``, as ``Sandbox.commit`` leaves one) for the pool's first
member's create; the tag names the base image again before tenant ``b``'s start, which is
accepted (the tag is a base image then) and would claim that member.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from rock_core.actions import Command, SandboxStartRequest
from rock_core.engine.config import EngineConfig
from rock_core.engine.live import LABEL_ENGINE_ID
from rock_core.engine.manager import SandboxManager
from rock_core.engine.pool import LABEL_POOL_MEMBER
from rock_core.states import State
from rock_core.testing import eventually_empty, unique_sandbox_id
from rock_docker.runtime import DockerRuntime

from .conftest import IMAGE, RUN_LABEL

pytestmark = [pytest.mark.anyio, pytest.mark.docker]


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


class _TagNamesACommitForTheFirstMember(DockerRuntime):
    """Docker's runtime; the tag names ``a``'s commit for the first pool member's create."""

    def __init__(self, docker_client: Any, tag: str, commit: str, **settings: Any) -> None:
        super().__init__(**settings)
        self._moves: tuple[Any, str, str] | None = (docker_client, tag, commit)
        self.member_from_commit: str | None = None

    async def create(self, spec: Any, **kwargs: Any) -> Any:
        moves, self._moves = self._moves, None
        if moves is None or spec.image != moves[1]:
            self._moves = moves
            return await super().create(spec, **kwargs)
        client, tag, commit = moves
        await anyio.to_thread.run_sync(lambda: client.images.get(commit).tag(tag))
        try:
            handle = await super().create(spec, **kwargs)
        finally:
            await anyio.to_thread.run_sync(lambda: client.images.get(IMAGE).tag(tag))
        self.member_from_commit = handle.unit_id
        return handle


def _members(docker_client: Any, engine: SandboxManager) -> list[Any]:
    found = docker_client.containers.list(
        all=True, filters={"label": f"{LABEL_ENGINE_ID}={engine.engine_id}"}, ignore_removed=True
    )
    return [c for c in found if c.name == c.labels.get(LABEL_POOL_MEMBER)]


async def test_a_tenant_never_claims_a_pool_member_made_from_another_tenants_commit(
    tmp_path: Any, run_labels: dict[str, str], docker_client: Any, tag_and_a_commit: tuple[str, str]
) -> None:
    tag, commit = tag_and_a_commit
    config = EngineConfig(
        runtime_options={"socket_dir": str(tmp_path / "sockets")},
        engine_label=f"claim-race-{run_labels[RUN_LABEL][:8]}",
        reap_orphans=False,
    )
    runtime = _TagNamesACommitForTheFirstMember(
        docker_client, tag, commit, rocklet_dir=tmp_path / "rocklet", socket_dir=tmp_path / "s"
    )
    kind = {"image": tag, "memory": "256m", "cpus": 0.5}
    async with SandboxManager(config, runtime=runtime) as engine:
        await engine.set_warm_pool(SandboxStartRequest(**kind), 1)
        (pool,) = await engine.wait_warm(timeout=120)
        assert (pool.ready, pool.last_error) == (1, None)
        tainted = runtime.member_from_commit
        assert tainted is not None
        assert [c.id for c in _members(docker_client, engine)] == [tainted]

        sandbox_id = unique_sandbox_id("claim")
        status = await engine.start(
            SandboxStartRequest(**kind, sandbox_id=sandbox_id), tenant="b"
        )  # accepted: the tag names the base image again
        assert status.state is State.RUNNING
        assert not status.phases["docker_run"].message.startswith("claimed"), (
            "b was handed the member holding a's commit"
        )
        seen = await engine.rocklet(sandbox_id).execute(
            Command(command=["sh", "-c", "cat /a-secret || echo none"])
        )
        assert "a-secret" not in seen.stdout and "none" in seen.stdout

        # The member made from a's commit is removed, not kept for the next claim.
        def left() -> list[Any]:
            return docker_client.containers.list(
                all=True, filters={"id": tainted}, ignore_removed=True
            )

        assert eventually_empty(left) == []
        await engine.stop(sandbox_id)
