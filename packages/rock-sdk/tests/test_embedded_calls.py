"""Calls from a caller's event loop into the embedded engine's loop (``DriverThread._call``).

The caller's loop serves every sandbox of the caller (a rollout's episodes); handing a call to the
engine must not stop it until the engine's loop takes the call. The engine runs on the scripted
runtime (``rock_core.testing``), no Docker.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from rock.sdk._drivers.embedded import EmbeddedDriver
from rock_core.engine.config import EngineConfig
from rock_core.engine.manager import SandboxManager
from rock_core.errors import InternalServerRockError
from rock_core.testing import ScriptedRuntime


def _driver(config: EngineConfig, runtime: ScriptedRuntime) -> EmbeddedDriver:
    return EmbeddedDriver(config, manager_factory=lambda c: SandboxManager(c, runtime=runtime))


def test_the_callers_loop_runs_on_while_the_engines_loop_has_not_taken_a_call(
    scripted_config: EngineConfig, scripted_runtime: ScriptedRuntime
) -> None:
    driver = _driver(scripted_config, scripted_runtime)
    driver.start()
    caller_ran = threading.Event()
    engine_held = threading.Event()
    seen: list[bool] = []

    async def hold_the_engine() -> None:
        # Blocks the engine's loop (not just this task) until the caller's loop has run on, or
        # gives up after a while: then the caller's loop stood still, which is the failure.
        engine_held.set()
        seen.append(caller_ran.wait(timeout=10))

    async def answer() -> str:
        return "answered"

    async def main() -> None:
        holder = threading.Thread(target=driver.call_blocking, args=(hold_the_engine,))
        holder.start()
        engine_held.wait()
        call = asyncio.create_task(driver._call(answer))
        await asyncio.sleep(0)  # the call is handed over here
        caller_ran.set()  # this runs only if handing it over did not stop the loop
        assert await call == "answered"
        holder.join()

    try:
        asyncio.run(main())
    finally:
        driver.close()
    assert seen == [True]


def test_a_call_in_flight_is_cancelled_when_the_engine_closes_before_its_manager_closes(
    scripted_config: EngineConfig, scripted_runtime: ScriptedRuntime
) -> None:
    closed: list[bool] = []

    def make(config: EngineConfig) -> SandboxManager:
        manager = SandboxManager(config, runtime=scripted_runtime)
        aclose = manager.aclose

        async def closing() -> None:
            await aclose()
            closed.append(True)

        manager.aclose = closing  # type: ignore[method-assign]
        return manager

    driver = EmbeddedDriver(scripted_config, manager_factory=make)
    driver.start()
    entered = threading.Event()
    cancelled_with_the_manager_closed: list[bool] = []

    async def forever() -> None:
        entered.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled_with_the_manager_closed.append(bool(closed))
            raise

    async def main() -> None:
        call = asyncio.create_task(driver._call(forever))
        await asyncio.get_running_loop().run_in_executor(None, entered.wait)
        await asyncio.get_running_loop().run_in_executor(None, driver.close)
        with pytest.raises(asyncio.CancelledError):
            await call

    asyncio.run(main())
    assert cancelled_with_the_manager_closed == [False]
    assert closed == [True]


def test_a_call_handed_over_as_the_engines_loop_ends_fails_instead_of_waiting_forever(
    scripted_config: EngineConfig, scripted_runtime: ScriptedRuntime
) -> None:
    # The window: the caller saw the engine running, and hands its call over after the engine's
    # loop took its last turn but before the loop is closed. The call is queued on a loop that
    # never runs again. Made here by stopping the engine and handing the call to a loop that
    # never runs, as the engine's thread ends.
    driver = _driver(scripted_config, scripted_runtime)
    driver.start()
    portal = driver._portal
    driver.close()
    idle = asyncio.new_event_loop()  # never run: the loop after its last turn
    driver._portal, driver._engine_loop = portal, idle
    driver._loop_ended = False  # the engine's thread has not yet seen its loop end

    async def answer() -> str:
        return "answered"

    async def main() -> None:
        call = asyncio.create_task(driver._call(answer))
        await asyncio.sleep(0.05)  # handed over, and waiting
        assert not call.done()
        ending = threading.Thread(target=driver._fail_handoffs)  # the engine's thread ends
        ending.start()
        ending.join()
        with pytest.raises(InternalServerRockError, match="embedded engine is closed"):
            await asyncio.wait_for(call, timeout=10)

    try:
        asyncio.run(main())
    finally:
        driver._portal = None
        idle.close()
    assert driver._handoffs == {}
