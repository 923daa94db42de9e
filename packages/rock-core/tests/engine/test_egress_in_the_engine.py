"""The engine puts a sandbox's egress policy on every unit that serves it before the unit is
asked anything: at its start, on a unit a reset makes or takes (its spare), after an update
(in force before the call returns, then saved), and hands the running ones to the runtime's
reconcile (``Runtime.sync_egress``). A runtime that records what it is told stands in for the
host's firewall (rock-docker's own tests check the firewall on real sandboxes)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import anyio
import pytest

from rock_core.actions import SandboxStartRequest
from rock_core.egress import EgressPolicy, EgressRule
from rock_core.engine import reconcile
from rock_core.engine.config import EngineConfig
from rock_core.engine.manager import SandboxManager
from rock_core.runtime import UnitHandle
from rock_core.testing import ScriptedRuntime

pytestmark = pytest.mark.anyio

POLICY = EgressPolicy.deny_all([EgressRule.allow("198.51.100.5", [443], "tcp")])


class PolicedRuntime(ScriptedRuntime):
    """A scripted runtime that keeps what each unit was told (``policies``) and notes, for each
    ``set_egress``, whether the unit's rocklet had been asked anything yet."""

    def __init__(self, rocklet: tuple[str, int]) -> None:
        super().__init__(rocklet)
        self.policies: dict[str, EgressPolicy | None] = {}
        self.synced: list[dict[str, EgressPolicy]] = []

    async def set_egress(self, handle: UnitHandle, policy: EgressPolicy | None) -> None:
        self.policies[handle.unit_id] = policy

    async def sync_egress(self, wanted: Mapping[str, tuple[UnitHandle, EgressPolicy]]) -> None:
        self.synced.append({unit: policy for unit, (_h, policy) in wanted.items()})


@pytest.fixture
def policed(rocklet: tuple[str, int]) -> PolicedRuntime:
    return PolicedRuntime(rocklet)


@pytest.fixture
async def engine(policed: PolicedRuntime) -> AsyncIterator[SandboxManager]:
    config = EngineConfig(timer_interval=3600, reconcile_interval=3600)
    async with SandboxManager(config, runtime=policed) as engine:
        yield engine


def _unit(engine: SandboxManager, sandbox_id: str) -> str:
    unit = engine.get_record(sandbox_id).unit_id
    assert unit is not None
    return unit


async def test_a_started_sandbox_has_its_policy_and_a_reset_unit_gets_it_too(
    engine: SandboxManager, policed: PolicedRuntime
):
    started = await engine.start(SandboxStartRequest(image="scripted:1", egress=POLICY.to_dict()))
    first = _unit(engine, started.sandbox_id)
    assert policed.policies == {first: POLICY}
    for _ in range(2):  # a new unit, then the spare the first reset started
        await engine.reset(started.sandbox_id)
        unit = _unit(engine, started.sandbox_id)
        assert policed.policies[unit] == POLICY
    assert len(policed.policies) == 3
    await engine.stop(started.sandbox_id)


async def test_an_update_is_in_force_before_it_returns_and_saved(
    engine: SandboxManager, policed: PolicedRuntime
):
    started = await engine.start(SandboxStartRequest(image="scripted:1"))
    unit = _unit(engine, started.sandbox_id)
    assert policed.policies == {}
    record = await engine.update_egress(started.sandbox_id, POLICY.to_dict())
    assert policed.policies == {unit: POLICY}
    assert record.spec.egress == POLICY
    assert engine.get_record(started.sandbox_id).spec.egress == POLICY
    await engine.update_egress(started.sandbox_id, None)
    assert policed.policies == {unit: None}
    await engine.stop(started.sandbox_id)


async def test_reconcile_hands_the_running_sandboxes_policies_to_the_runtime(
    engine: SandboxManager, policed: PolicedRuntime
):
    with_policy = await engine.start(
        SandboxStartRequest(image="scripted:1", egress=POLICY.to_dict())
    )
    await engine.start(SandboxStartRequest(image="scripted:1"))
    core: Any = engine._core
    await reconcile.egress.sync(core)
    assert policed.synced[-1] == {_unit(engine, with_policy.sandbox_id): POLICY}


class SlowFirewall(PolicedRuntime):
    """Takes its time as the host's firewall does, and puts back, as rock-docker's reconcile
    does, the policy it is handed for a unit whose rules differ."""

    async def set_egress(self, handle: UnitHandle, policy: EgressPolicy | None) -> None:
        await anyio.sleep(0.1)
        self.policies[handle.unit_id] = policy

    async def sync_egress(self, wanted: Mapping[str, tuple[UnitHandle, EgressPolicy]]) -> None:
        await anyio.sleep(0.2)
        for unit, (_handle, policy) in wanted.items():
            if self.policies.get(unit) != policy:
                self.policies[unit] = policy


async def test_a_reconcile_during_an_update_does_not_put_the_old_policy_back(
    rocklet: tuple[str, int],
):
    firewall = SlowFirewall(rocklet)
    config = EngineConfig(timer_interval=3600, reconcile_interval=3600)
    opened = EgressPolicy.deny_all([*POLICY.rules, EgressRule.allow("198.51.100.6", [80], "tcp")])
    async with SandboxManager(config, runtime=firewall) as engine:
        started = await engine.start(
            SandboxStartRequest(image="scripted:1", egress=POLICY.to_dict())
        )
        unit = _unit(engine, started.sandbox_id)
        core: Any = engine._core
        async with anyio.create_task_group() as tg:
            tg.start_soon(engine.update_egress, started.sandbox_id, opened.to_dict())
            await anyio.sleep(0.01)  # the update is under way, its record not saved yet
            tg.start_soon(reconcile.egress.sync, core)
        assert engine.get_record(started.sandbox_id).spec.egress == opened
        assert firewall.policies[unit] == opened
        await engine.stop(started.sandbox_id)
