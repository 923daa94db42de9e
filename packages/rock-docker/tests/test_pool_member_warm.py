"""A warm pool's member has its rocklet's endpoints loaded and warmed up before it can be
claimed: a fresh rocklet answers the readiness probe from its lean front and loads the rest only
at its first real request, and a claimed sandbox's first command must not pay for that.
A sandbox started the ordinary way loads them at its first command, which works at once."""

from __future__ import annotations

from typing import Any

import pytest

from rock_core.actions import Command, SandboxStartRequest
from rock_core.engine.config import EngineConfig
from rock_core.engine.live import LABEL_ENGINE_ID, LABEL_SANDBOX_ID
from rock_core.engine.manager import SandboxManager
from rock_core.engine.pool import LABEL_POOL_MEMBER
from rock_core.states import State
from rock_core.testing import eventually, unique_sandbox_id
from rock_docker.runtime import DockerRuntime

from .conftest import IMAGE, RUN_LABEL

pytestmark = [pytest.mark.anyio, pytest.mark.docker]

WARMED = "rocklet: endpoints warmed up"


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


def _log(container: Any) -> str:
    container.reload()
    return container.logs(stdout=False, stderr=True).decode("utf-8", "replace")


async def test_a_pool_member_is_warmed_up_before_a_claim_and_a_cold_start_at_its_first_command(
    tmp_path: Any, run_labels: dict[str, str], docker_client: Any
) -> None:
    config = EngineConfig(
        runtime_options={"socket_dir": str(tmp_path / "sockets")},
        engine_label=f"pool-warm-{run_labels[RUN_LABEL][:8]}",
        reap_orphans=False,
    )
    runtime = DockerRuntime(rocklet_dir=tmp_path / "rocklet", socket_dir=tmp_path / "s")
    pooled = {"image": IMAGE, "memory": "256m", "cpus": 0.5}
    async with SandboxManager(config, runtime=runtime) as engine:
        # Cold: running once the probe is answered, warmed up only after its first command.
        cold_id = unique_sandbox_id("cold")
        status = await engine.start(
            SandboxStartRequest(image=IMAGE, memory="256m", cpus=0.4, sandbox_id=cold_id)
        )
        assert status.state is State.RUNNING
        (cold,) = docker_client.containers.list(
            all=True, filters={"label": f"{LABEL_SANDBOX_ID}={cold_id}"}
        )
        assert "listening on" in _log(cold) and WARMED not in _log(cold)
        seen = await engine.rocklet(cold_id).execute(Command(command=["echo", "first"]))
        assert seen.stdout == "first\n"
        eventually(lambda: WARMED in _log(cold), what="the cold sandbox warmed up", timeout=60)
        await engine.stop(cold_id)

        await engine.set_warm_pool(SandboxStartRequest(**pooled), 1)
        (pool,) = await engine.wait_warm(timeout=120)
        assert (pool.ready, pool.last_error) == (1, None)
        found = docker_client.containers.list(
            all=True, filters={"label": f"{LABEL_ENGINE_ID}={engine.engine_id}"}
        )
        (member,) = [c for c in found if c.name == c.labels.get(LABEL_POOL_MEMBER)]
        assert WARMED in _log(member)  # ready in the pool means warm

        sandbox_id = unique_sandbox_id("claim")
        status = await engine.start(SandboxStartRequest(**pooled, sandbox_id=sandbox_id))
        assert status.state is State.RUNNING
        assert status.phases["docker_run"].message.startswith("claimed")
        seen = await engine.rocklet(sandbox_id).execute(Command(command=["echo", "claimed"]))
        assert seen.stdout == "claimed\n"
        await engine.stop(sandbox_id)
