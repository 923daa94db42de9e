"""What an admin that died in the middle of a reset leaves on Docker, and the next one removes.

A reset renames the sandbox's old container out of the way (``rock-reset-<hex>``, every label of
the sandbox's kept) and removes it in the background once the new one runs. An admin that dies
before that removal leaves it running; the admin that starts next on the same records must
remove it, and still take back the sandbox's own container.
"""

from __future__ import annotations

import secrets
from pathlib import Path

import anyio
import pytest

from rock_core.actions import Command, SandboxStartRequest
from rock_core.engine.config import EngineConfig
from rock_core.engine.manager import SandboxManager
from rock_core.engine.resetting import RESET_PREFIX
from rock_core.states import State
from rock_core.testing import eventually_async, unique_sandbox_id
from rock_docker._container import ROCKLET_SOCKET_LABEL

from .conftest import IMAGE, RUN_LABEL

pytestmark = [pytest.mark.anyio, pytest.mark.docker]


@pytest.fixture(scope="module")
def anyio_backend():
    return "asyncio"


def _config(tmp_path, run_labels) -> EngineConfig:
    return EngineConfig(
        runtime_options={"socket_dir": str(tmp_path / "sockets")},
        engine_label=f"leftover-{run_labels[RUN_LABEL][:8]}",
        reap_orphans=False,
        store_path=str(tmp_path / "rock.db"),
        remove_on_close=False,
    )


def _leave_a_renamed_old_container(docker_client, unit_id: str, run_labels) -> str:
    """The old container as the dying admin's reset left it: renamed ``rock-reset-*``, running,
    with the sandbox's labels (made here from the sandbox's own, as Docker's rename keeps them),
    its rocklet socket a folder of its own, as the old unit's was (the new unit of a reset gets
    a new folder; the leftover's removal takes its own away, never the running unit's)."""
    labels = {**docker_client.api.inspect_container(unit_id)["Config"]["Labels"], **run_labels}
    own = Path(labels[ROCKLET_SOCKET_LABEL])
    labels[ROCKLET_SOCKET_LABEL] = str(own.parent.parent / f"old{secrets.token_hex(4)}" / own.name)
    left = docker_client.containers.run(
        IMAGE,
        ["sleep", "600"],
        name=f"{RESET_PREFIX}{secrets.token_hex(8)}",
        labels=labels,
        detach=True,
    )
    return str(left.id)


async def test_an_old_container_left_by_an_admin_that_died_mid_reset_is_removed_at_the_next_start(
    tmp_path, run_labels, docker_client
):
    config = _config(tmp_path, run_labels)
    request = SandboxStartRequest(
        image=IMAGE, memory="256m", cpus=0.5, sandbox_id=unique_sandbox_id("leftover")
    )
    async with SandboxManager(config) as first:
        sandbox_id = str((await first.start(request)).sandbox_id)
        unit_id = first.get_record(sandbox_id).unit_id
        assert unit_id
    left = await anyio.to_thread.run_sync(
        _leave_a_renamed_old_container, docker_client, unit_id, run_labels
    )

    def exists(container_id: str) -> bool:
        # The low-level listing: docker-py's containers.list() inspects each container it listed,
        # and fails with NotFound when one is removed in between (here, the very removal awaited).
        return bool(docker_client.api.containers(all=True, filters={"id": container_id}))

    async with SandboxManager(config) as second:
        try:
            await eventually_async(
                lambda: anyio.to_thread.run_sync(exists, left), until=lambda there: not there
            )
            # The sandbox itself was taken back on its own container, not the leftover.
            record = second.get_record(sandbox_id)
            assert record.state is State.RUNNING and record.unit_id == unit_id
            assert await anyio.to_thread.run_sync(exists, unit_id)
            result = await second.rocklet(sandbox_id).execute(Command(command=["echo", "still"]))
            assert result.stdout.strip() == "still"
        finally:
            await second.stop(sandbox_id)
