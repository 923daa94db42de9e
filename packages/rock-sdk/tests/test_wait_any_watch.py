"""A trainer waiting for many starts sends each id to the admin once: its waits join a watch the
admin keeps (``wait_any``'s ``watch``), so the admin's work grows with the starts, not with the
seconds they take. The admin app over an engine on the scripted runtime, its starts held at a
gate and released one at a time; the remote driver reaches it through an ASGI transport that
reads the ids each request carries."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from starlette.requests import Request

from rock.admin import lifecycle
from rock.admin.app import create_app
from rock.admin.config import load_settings
from rock.admin.key_gate import _TENANT_SCOPE_KEY
from rock.sdk._drivers.remote import RemoteDriver
from rock_core.actions import SandboxStartRequest
from rock_core.engine.config import EngineConfig
from rock_core.engine.manager import SandboxManager
from rock_core.states import State
from rock_core.testing import ScriptedRuntime, rocklet_in_thread

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def rocklet() -> Iterator[tuple[str, int]]:
    with rocklet_in_thread() as address:
        yield address


class _Reading(httpx.AsyncBaseTransport):
    """An ASGI transport that keeps the body of every ``wait_any`` request; ``older``: the
    admin is made to look like one from before watches (their field renamed on the way, so the
    admin ignores it, or with ``strict_fields`` refuses it)."""

    def __init__(self, app: Any, *, older: bool = False) -> None:
        self._inner = httpx.ASGITransport(app=app)
        self.bodies: list[dict[str, Any]] = []
        self._older = older

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/sandboxes/wait_any"):
            body = json.loads(await request.aread())
            self.bodies.append(body)
            if self._older and "watch" in body:
                body["watch_unknown_here"] = body.pop("watch")
                request = httpx.Request(
                    request.method, request.url, headers=request.headers, json=body
                )
        response = await self._inner.handle_async_request(request)
        await response.aread()
        return response


@contextlib.asynccontextmanager
async def _admin(
    tmp_path: Path, runtime: ScriptedRuntime, *, older: bool = False, **settings: Any
) -> AsyncIterator[tuple[Any, RemoteDriver, _Reading]]:
    config = EngineConfig(
        timer_interval=3600, reconcile_interval=3600, store_path=str(tmp_path / "rock.db")
    )
    async with SandboxManager(config, runtime=runtime) as manager:
        try:
            app = create_app(load_settings(None, state_dir=str(tmp_path), **settings), manager)
            transport = _Reading(app, older=older)
            driver = RemoteDriver("http://127.0.0.1", transport=transport)
            try:
                yield app, driver, transport
            finally:
                await driver.aclose()
        finally:
            runtime.open_gates()


async def _wait_one_by_one(driver: RemoteDriver, runtime: ScriptedRuntime, count: int, during):
    start = runtime.hold("start")
    ids = []
    for _ in range(count):
        started = await driver.start_async(SandboxStartRequest(image="scripted:1"))
        assert started.sandbox_id is not None
        ids.append(started.sandbox_id)
    statuses: dict[str, Any] = {}

    async def wait(sandbox_id: str) -> None:
        statuses[sandbox_id] = await driver.wait_until_running(sandbox_id)

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            for sandbox_id in ids:
                tg.start_soon(wait, sandbox_id)
            for index in range(count):
                sandbox_id = (await start.arrivals(index + 1))[index]
                during(index)
                start.release(sandbox_id)
                while sandbox_id not in statuses:
                    await anyio.sleep(0.01)
    assert sorted(statuses) == sorted(ids)
    assert {status.state for status in statuses.values()} == {State.RUNNING}
    return ids


async def test_each_waited_sandbox_is_sent_to_the_admin_once_however_long_the_starts_take(
    tmp_path: Path, rocklet: tuple[str, int]
) -> None:
    runtime = ScriptedRuntime(rocklet)
    async with _admin(tmp_path, runtime) as (_app, driver, reading):
        ids = await _wait_one_by_one(driver, runtime, 12, lambda _index: None)
    sent = [sandbox_id for body in reading.bodies for sandbox_id in body["sandbox_ids"]]
    assert sorted(sent) == sorted(ids)  # each once, though many requests were answered
    assert len(reading.bodies) > len({body.get("watch") for body in reading.bodies})


async def test_waits_go_on_when_the_admin_forgot_their_watch(
    tmp_path: Path, rocklet: tuple[str, int]
) -> None:
    runtime = ScriptedRuntime(rocklet)
    async with _admin(tmp_path, runtime) as (app, driver, reading):

        def forget(index: int) -> None:
            if index == 2:  # as an admin restarted, or one that dropped a long-unused watch
                app.wait_watches.clear()

        ids = await _wait_one_by_one(driver, runtime, 5, forget)
    sent = [sandbox_id for body in reading.bodies for sandbox_id in body["sandbox_ids"]]
    assert set(sent) == set(ids)
    assert len(sent) > len(ids)  # the ids still waited for were sent again


async def test_another_tenants_watch_is_not_theirs_to_read(
    tmp_path: Path, rocklet: tuple[str, int]
) -> None:
    runtime = ScriptedRuntime(rocklet)
    async with _admin(tmp_path, runtime) as (app, _driver, _reading):

        def asking(tenant: str | None) -> Request:
            return Request({"type": "http", _TENANT_SCOPE_KEY: tenant})

        name, watch = lifecycle._watch(app, asking("t1"), "")
        watch.pending["sb-1"] = None
        assert lifecycle._watch(app, asking("t1"), name) == (name, watch)
        other_name, other = lifecycle._watch(app, asking("t2"), name)
        assert other_name != name and other is not watch and not other.pending


@pytest.mark.parametrize("strict_fields", [False, True], ids=["ignoring", "strict"])
async def test_an_admin_from_before_watches_is_asked_about_every_id_as_before(
    tmp_path: Path, rocklet: tuple[str, int], strict_fields: bool
) -> None:
    runtime = ScriptedRuntime(rocklet)
    async with _admin(tmp_path, runtime, older=True, strict_fields=strict_fields) as (
        _app,
        driver,
        reading,
    ):
        ids = await _wait_one_by_one(driver, runtime, 4, lambda _index: None)
    later = [body for body in reading.bodies if "watch" not in body]
    assert later  # the watch was dropped after the admin showed it has none
    assert set(later[0]["sandbox_ids"]) <= set(ids)


async def test_a_tenant_opening_watches_without_end_keeps_a_bounded_number(
    tmp_path: Path, rocklet: tuple[str, int]
) -> None:
    runtime = ScriptedRuntime(rocklet)
    async with _admin(tmp_path, runtime) as (app, _driver, _reading):
        request = Request({"type": "http", _TENANT_SCOPE_KEY: "greedy"})
        other = Request({"type": "http", _TENANT_SCOPE_KEY: "calm"})
        kept_name, kept = lifecycle._watch(app, other, "")
        names = [lifecycle._watch(app, request, "")[0] for _ in range(3 * 256)]
        watches = app.wait_watches
        greedy = [w for w in watches.values() if w.tenant == "greedy"]
        assert len(greedy) == 256  # the least recently used went
        assert names[-1] in watches and names[0] not in watches
        assert watches[kept_name] is kept  # another tenant's watch stays
