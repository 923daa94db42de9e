"""One wait serves many starting sandboxes: ``POST /sandboxes/wait_any`` and the SDK's waits.

A trainer starting hundreds of sandboxes from one process waits for all of them; each start's
``wait_until_running`` joins one held ``wait_any`` request of its event loop instead of holding a
``get_status`` of its own. The admin app over an engine on the scripted runtime
(``rock_core.testing``; the ``scripted_admin`` fixture), its starts held at a gate so the order of
events is forced; the remote driver reaches it through an ASGI transport that counts the requests
it sends.
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest

from rock.sdk._drivers.embedded import EmbeddedDriver
from rock_core.actions import SandboxStartRequest
from rock_core.engine.config import EngineConfig
from rock_core.engine.manager import SandboxManager
from rock_core.errors import SandboxNotFound
from rock_core.states import State
from rock_core.testing import ScriptedRuntime

pytestmark = pytest.mark.anyio


class _Counting(httpx.AsyncBaseTransport):
    """An ASGI transport that counts the requests of each path, and the most in flight at once."""

    def __init__(self, app: Any) -> None:
        self._inner = httpx.ASGITransport(app=app)
        self.sent: dict[str, int] = {}
        self.in_flight: dict[str, int] = {}
        self.most_in_flight: dict[str, int] = {}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path.rsplit("/v1", 1)[-1]
        self.sent[path] = self.sent.get(path, 0) + 1
        self.in_flight[path] = self.in_flight.get(path, 0) + 1
        self.most_in_flight[path] = max(self.most_in_flight.get(path, 0), self.in_flight[path])
        try:
            response = await self._inner.handle_async_request(request)
            await response.aread()
            return response
        finally:
            self.in_flight[path] -= 1


async def test_many_starts_are_waited_for_with_a_few_held_requests_not_one_each(
    scripted_admin: Any, scripted_runtime: ScriptedRuntime
) -> None:
    start = scripted_runtime.hold("start")
    async with scripted_admin(_Counting) as admin:
        driver, counted = admin.driver, admin.transport
        ids = await admin.start(40)
        statuses: dict[str, Any] = {}

        async def wait(sandbox_id: str) -> None:
            statuses[sandbox_id] = await driver.wait_until_running(sandbox_id)

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                for sandbox_id in ids:
                    tg.start_soon(wait, sandbox_id)
                await start.arrivals(1)
                start.open()
    assert sorted(statuses) == sorted(ids)
    assert {status.state for status in statuses.values()} == {State.RUNNING}
    assert counted.sent.get("/get_status", 0) == 0  # no start held a request of its own
    assert 1 <= counted.most_in_flight["/sandboxes/wait_any"] <= 4
    assert counted.sent["/sandboxes/wait_any"] < len(ids)


async def test_a_start_stopped_while_others_wait_fails_alone(
    scripted_admin: Any, scripted_runtime: ScriptedRuntime
) -> None:
    start = scripted_runtime.hold("start")
    async with scripted_admin() as admin:
        manager, driver = admin.manager, admin.driver
        ids = await admin.start(3)
        outcomes: dict[str, Any] = {}

        async def wait(sandbox_id: str) -> None:
            try:
                outcomes[sandbox_id] = (await driver.wait_until_running(sandbox_id)).state
            except SandboxNotFound as exc:
                outcomes[sandbox_id] = exc

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                for sandbox_id in ids:
                    tg.start_soon(wait, sandbox_id)
                await start.arrivals(1)
                await manager.stop(ids[0])
                assert not outcomes  # the others still wait
                start.open()
    assert isinstance(outcomes[ids[0]], SandboxNotFound)
    assert "is not running" in str(outcomes[ids[0]])
    assert outcomes[ids[1]] is State.RUNNING and outcomes[ids[2]] is State.RUNNING


async def test_wait_any_answers_the_settled_and_names_the_unknown(
    scripted_admin: Any, scripted_runtime: ScriptedRuntime
) -> None:
    start = scripted_runtime.hold("start")
    async with scripted_admin() as admin:
        driver = admin.driver
        ids = await admin.start(2)
        with anyio.fail_after(60):
            await start.arrivals(2)
            # Nothing settled yet: a wait of no time answers at once, empty.
            nothing = await driver.wait_any([*ids, "no-such-sandbox"], 0)
            assert nothing.statuses == [] and nothing.unknown == ["no-such-sandbox"]
            async with anyio.create_task_group() as tg:
                answers = []

                async def ask() -> None:
                    answers.append(await driver.wait_any(ids, 20))

                tg.start_soon(ask)
                await anyio.wait_all_tasks_blocked()
                assert not answers  # held while both start
                start.release(ids[1])
        [answer] = answers
        assert [status.sandbox_id for status in answer.statuses] == [ids[1]]
        assert answer.statuses[0].state is State.RUNNING and answer.unknown == []


def test_the_embedded_engine_waits_for_any_of_many_starts(
    scripted_config: EngineConfig, scripted_runtime: ScriptedRuntime
) -> None:
    driver = EmbeddedDriver(
        scripted_config, manager_factory=lambda c: SandboxManager(c, runtime=scripted_runtime)
    )

    async def main() -> None:
        ids = []
        for _ in range(3):
            started = await driver.start_async(SandboxStartRequest(image="scripted:1"))
            assert started.sandbox_id is not None
            ids.append(started.sandbox_id)
        settled: set[str] = set()
        with anyio.fail_after(60):
            while len(settled) < len(ids):
                answer = await driver.wait_any([i for i in ids if i not in settled], 20)
                assert answer.unknown == []
                for status in answer.statuses:
                    assert status.state is State.RUNNING
                    assert status.sandbox_id is not None
                    settled.add(status.sandbox_id)

    try:
        anyio.run(main)
    finally:
        driver.close()
