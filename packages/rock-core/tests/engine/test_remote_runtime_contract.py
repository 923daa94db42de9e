"""The runtime contract for runtimes that place units on other hosts (issue #12 point 1), driven
through the engine on a scripted runtime that behaves like a cluster: the image is pulled when
the unit is placed (at ``start``), and the unit's status names its node.

The Docker runtime keeps the same contract on one host (pull at create, no node): its tests and
the SDK's run unchanged.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from rock_core.actions import Command, SandboxStartRequest
from rock_core.engine.config import EngineConfig
from rock_core.engine.manager import SandboxManager
from rock_core.errors import ImagePullFailed, InternalServerRockError
from rock_core.models import Phase, PhaseStatus, RuntimeStatus
from rock_core.responses import status_response
from rock_core.runtime import PhaseCallback, Runtime, UnitHandle
from rock_core.states import State
from rock_core.testing import ScriptedRuntime, eventually_async

pytestmark = pytest.mark.anyio

MISSING = "registry.invalid/no-such-image:1"


class PlacingRuntime(ScriptedRuntime):
    """Places each unit on "node-2" (127.0.0.2 is its address), pulling the image there at start."""

    name = "placing"

    async def create(
        self, spec, *, labels, rocklet_token, on_phase: PhaseCallback | None = None
    ) -> UnitHandle:  # type: ignore[no-untyped-def]
        if on_phase is not None:
            on_phase(
                "image_pull",
                Phase(status=PhaseStatus.WAITING, message="pulled on the node it is placed on"),
            )
        self._images = getattr(self, "_images", {})
        handle = await super().create(
            spec, labels=labels, rocklet_token=rocklet_token, on_phase=on_phase
        )
        self._images[handle.unit_id] = spec.image
        return handle

    async def start(
        self, handle: UnitHandle, *, on_phase: PhaseCallback | None = None
    ) -> RuntimeStatus:
        assert on_phase is not None, "the engine must hear of a pull at start"
        on_phase("image_pull", Phase(status=PhaseStatus.RUNNING, message="pulling on node-2"))
        if self._images[handle.unit_id] == MISSING:
            raise ImagePullFailed(
                f"Failed to pull image {MISSING} on node-2: manifest unknown",
                sandbox_id=handle.sandbox_id,
            )
        on_phase("image_pull", Phase(status=PhaseStatus.SUCCESS, message="pulled on node-2"))
        await super().start(handle)
        status = await self.inspect(handle)
        return RuntimeStatus(
            state=status.state,
            rocklet_host=status.rocklet_host,
            rocklet_port=status.rocklet_port,
            node_name="node-2",
            node_address="127.0.0.2",
        )


@pytest.fixture
async def engine(rocklet: tuple[str, int]) -> AsyncIterator[SandboxManager]:
    config = EngineConfig(timer_interval=3600, reconcile_interval=3600)
    async with SandboxManager(config, runtime=PlacingRuntime(rocklet)) as engine:
        yield engine


async def test_the_record_shows_the_node_the_runtime_placed_it_on(engine: SandboxManager) -> None:
    status = await engine.start(SandboxStartRequest(image="scripted:1"))
    assert status.state is State.RUNNING
    assert (status.record.host_name, status.record.host_ip) == ("node-2", "127.0.0.2")
    shown = status_response(await engine.get_status(status.sandbox_id))
    assert (shown.host_name, shown.host_ip) == ("node-2", "127.0.0.2")
    assert shown.status["image_pull"].message == "pulled on node-2"


async def test_an_image_pull_that_fails_at_start_fails_the_image_pull_phase(
    engine: SandboxManager,
) -> None:
    started = await engine.start_async(SandboxStartRequest(image=MISSING))
    with pytest.raises(
        InternalServerRockError, match=r"because image_pull: Failed to pull image .* on node-2"
    ):
        await engine.wait_until_running(started.sandbox_id, timeout=30)
    record = engine.get_record(started.sandbox_id)
    assert record.phases["image_pull"].status is PhaseStatus.FAILED
    assert record.state is State.STOPPED and "manifest unknown" in (record.reason or "")


class FixedNameRuntime(ScriptedRuntime):
    """Cannot rename a unit (as Nomad, whose job ids are fixed): no ``assign``."""

    name = "fixed-names"
    assign = Runtime.assign  # type: ignore[assignment]


async def test_warm_pools_work_on_a_runtime_that_cannot_rename_and_survive_a_restart(
    rocklet: tuple[str, int], tmp_path: Path
) -> None:
    runtime = FixedNameRuntime(rocklet)
    assert not runtime.can_assign
    config = EngineConfig(
        timer_interval=3600,
        reconcile_interval=3600,
        store_path=str(tmp_path / "records.db"),
        remove_on_close=False,
    )
    request = SandboxStartRequest(image="scripted:1")
    with anyio.fail_after(30):
        async with SandboxManager(config, runtime=runtime, owner="trainer") as engine:
            await engine.set_warm_pool(request, 1)
            await engine.wait_warm()
            [member_unit] = list(runtime.units)
            status = await engine.start(request)
            assert status.phases["docker_run"].message.startswith("claimed from warm pool")
            # The unit kept its pool name; the record says which unit serves the sandbox.
            assert runtime.units[member_unit].sandbox_id != status.sandbox_id
            assert status.record.unit_id == member_unit
            sandbox_id = status.sandbox_id
            await engine.wait_warm()  # the pool refills with a second unit
            assert len(runtime.units) == 2
        # The engine closed without removing anything: its unclaimed member went, the claimed unit stayed.
        assert list(runtime.units) == [member_unit]

        async with SandboxManager(config, runtime=runtime, owner="trainer") as engine:
            await engine.reap_orphans()  # the sweep of stale pool members spares the claimed unit
            assert list(runtime.units) == [member_unit]
            recovered = await engine.get_status(sandbox_id)
            assert recovered.state is State.RUNNING  # found again by its unit id, not its name
            assert (
                await engine.rocklet(sandbox_id).execute(Command(command=["echo", "hi"]))
            ).stdout.strip() == "hi"
            await engine.stop(sandbox_id)
            await eventually_async(
                lambda: member_unit not in runtime.units, what="the member's unit removed"
            )
