"""The resource sampling waits while sandboxes start: on Docker a sample lists every container
(and every twelfth sizes their writable layers), work dockerd would otherwise do in the middle
of a burst of starts. Once no start is in flight the sandboxes are sampled again."""

from __future__ import annotations

from collections.abc import Mapping

import anyio
import pytest

from rock_core.actions import SandboxStartRequest
from rock_core.engine.config import EngineConfig
from rock_core.engine.manager import SandboxManager
from rock_core.models import UnitStats
from rock_core.states import State
from rock_core.testing import ScriptedRuntime

pytestmark = pytest.mark.anyio

# A guard against a test hanging (the engine regressed): it fails the test; nothing waits for it.
HANG = 30

REQUEST = SandboxStartRequest(image="scripted:1")


class _Measured(ScriptedRuntime):
    """A scripted runtime that can measure: it counts the samples asked of it."""

    def __init__(self, address: tuple[str, int]) -> None:
        super().__init__(address)
        self.samples = 0
        self.sampled = anyio.Event()

    async def stats(self, labels: Mapping[str, str]) -> Mapping[str, UnitStats]:
        self.samples += 1
        self.sampled.set()
        return {}


async def test_no_sample_is_taken_while_a_sandbox_starts_and_sampling_resumes_after(
    rocklet: tuple[str, int],
) -> None:
    runtime = _Measured(rocklet)
    config = EngineConfig(timer_interval=3600, reconcile_interval=3600, stats_interval=0.01)
    async with SandboxManager(config, runtime=runtime) as engine:
        try:
            with anyio.fail_after(HANG):
                first = (await engine.start_async(REQUEST)).sandbox_id
                await engine.wait_until_running(first)
                await runtime.sampled.wait()  # a running sandbox is sampled

                start = runtime.hold("start")
                second = (await engine.start_async(REQUEST)).sandbox_id
                await start.arrivals(1)
                runtime.sampled = anyio.Event()
                before = runtime.samples
                await anyio.sleep(0.3)  # thirty intervals: each would have sampled
                assert runtime.samples == before
                assert engine.get_record(second).state is State.PENDING

                start.release()
                await engine.wait_until_running(second)
                await runtime.sampled.wait()  # sampled again once the start settled
                assert runtime.samples > before
        finally:
            runtime.open_gates()
