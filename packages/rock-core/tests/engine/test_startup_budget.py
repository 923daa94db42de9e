"""A start's budget (``startup_timeout``): a start that outlives it fails as a timeout (the
phase it was in marked timed out, the sandbox stopped with why), and a stop during a start is
told apart from it (no timeout, no start error)."""

from __future__ import annotations

import anyio
import pytest

from rock_core.actions import SandboxStartRequest
from rock_core.engine.manager import SandboxManager
from rock_core.errors import RockError, StartupTimeout
from rock_core.models import PhaseStatus
from rock_core.states import State
from rock_core.testing import ScriptedRuntime

pytestmark = pytest.mark.anyio

# A guard against a test hanging (the engine regressed): it fails the test; nothing waits for it.
HANG = 30


async def test_a_start_held_past_its_budget_fails_as_a_timeout(
    engine: SandboxManager, runtime: ScriptedRuntime
) -> None:
    runtime.hold("create")  # never let through: the budget runs out
    with anyio.fail_after(HANG):
        request = SandboxStartRequest(image="scripted:1", startup_timeout=0.2)
        sandbox_id = (await engine.start_async(request)).sandbox_id
        with pytest.raises(StartupTimeout, match="did not finish within 0.2s"):
            await engine.wait_until_running(sandbox_id)
    record = engine.get_record(sandbox_id)
    assert record.state is State.STOPPED
    assert record.reason is not None and "within 0.2s" in record.reason
    assert record.phases["image_pull"].status is PhaseStatus.TIMEOUT


async def test_a_stop_during_a_start_is_no_timeout(
    engine: SandboxManager, runtime: ScriptedRuntime
) -> None:
    create = runtime.hold("create")
    with anyio.fail_after(HANG):
        request = SandboxStartRequest(image="scripted:1", startup_timeout=HANG)
        sandbox_id = (await engine.start_async(request)).sandbox_id
        await create.arrivals(1)
        await engine.stop(sandbox_id)
        with pytest.raises(RockError) as raised:
            await engine.wait_until_running(sandbox_id)
    assert not isinstance(raised.value, StartupTimeout)
    record = engine.get_record(sandbox_id)
    assert record.state in (State.STOPPED, State.DELETED)
    assert all(p.status is not PhaseStatus.TIMEOUT for p in record.phases.values())
