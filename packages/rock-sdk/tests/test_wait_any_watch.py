"""A trainer waiting for many starts sends each id to the admin once: its waits join a watch the
admin keeps (``wait_any``'s ``watch``), so the admin's work grows with the starts, not with the
seconds they take. The admin app over an engine on the scripted runtime, its starts held at a
gate and released one at a time (the ``scripted_admin`` fixture); the remote driver reaches it
through an ASGI transport that reads the ids each request carries."""

from __future__ import annotations

import functools
import json
from typing import Any

import anyio
import httpx
import pytest
from starlette.requests import Request

from rock.admin import start_waits
from rock.admin.key_gate import _TENANT_SCOPE_KEY
from rock_core.states import State
from rock_core.testing import ScriptedRuntime

pytestmark = pytest.mark.anyio


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
                body.pop("brief", None)  # newer than watches
                request = httpx.Request(
                    request.method, request.url, headers=request.headers, json=body
                )
        response = await self._inner.handle_async_request(request)
        await response.aread()
        return response


async def _wait_one_by_one(admin: Any, runtime: ScriptedRuntime, count: int, during):
    start = runtime.hold("start")
    driver = admin.driver
    ids = await admin.start(count)
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
    scripted_admin: Any, scripted_runtime: ScriptedRuntime
) -> None:
    async with scripted_admin(_Reading) as admin:
        ids = await _wait_one_by_one(admin, scripted_runtime, 12, lambda _index: None)
    reading = admin.transport
    sent = [sandbox_id for body in reading.bodies for sandbox_id in body["sandbox_ids"]]
    assert sorted(sent) == sorted(ids)  # each once, though many requests were answered
    assert len(reading.bodies) > len({body.get("watch") for body in reading.bodies})


async def test_waits_go_on_when_the_admin_forgot_their_watch(
    scripted_admin: Any, scripted_runtime: ScriptedRuntime
) -> None:
    async with scripted_admin(_Reading) as admin:

        def forget(index: int) -> None:
            if index == 2:  # as an admin restarted, or one that dropped a long-unused watch
                admin.app.wait_watches.clear()

        ids = await _wait_one_by_one(admin, scripted_runtime, 5, forget)
    sent = [sandbox_id for body in admin.transport.bodies for sandbox_id in body["sandbox_ids"]]
    assert set(sent) == set(ids)
    assert len(sent) > len(ids)  # the ids still waited for were sent again


async def test_another_tenants_watch_is_not_theirs_to_read(scripted_admin: Any) -> None:
    async with scripted_admin() as admin:
        app = admin.app

        def asking(tenant: str | None) -> Request:
            return Request({"type": "http", _TENANT_SCOPE_KEY: tenant})

        name, watch = start_waits._watch(app, asking("t1"), "")
        watch.settles.add(["sb-1"])
        assert start_waits._watch(app, asking("t1"), name) == (name, watch)
        other_name, other = start_waits._watch(app, asking("t2"), name)
        assert other_name != name and other is not watch and not other.pending


@pytest.mark.parametrize("strict_fields", [False, True], ids=["ignoring", "strict"])
async def test_an_admin_from_before_watches_is_asked_about_every_id_as_before(
    scripted_admin: Any, scripted_runtime: ScriptedRuntime, strict_fields: bool
) -> None:
    older = functools.partial(_Reading, older=True)
    async with scripted_admin(older, strict_fields=strict_fields) as admin:
        ids = await _wait_one_by_one(admin, scripted_runtime, 4, lambda _index: None)
    later = [body for body in admin.transport.bodies if "watch" not in body]
    assert later  # the watch was dropped after the admin showed it has none
    assert set(later[0]["sandbox_ids"]) <= set(ids)


async def test_a_tenant_opening_watches_without_end_keeps_a_bounded_number(
    scripted_admin: Any,
) -> None:
    async with scripted_admin() as admin:
        app = admin.app
        request = Request({"type": "http", _TENANT_SCOPE_KEY: "greedy"})
        other = Request({"type": "http", _TENANT_SCOPE_KEY: "calm"})
        kept_name, kept = start_waits._watch(app, other, "")
        names = [start_waits._watch(app, request, "")[0] for _ in range(3 * 256)]
        watches = app.wait_watches
        greedy = [w for w in watches.values() if w.tenant == "greedy"]
        assert len(greedy) == 256  # the least recently used went
        assert names[-1] in watches and names[0] not in watches
        assert watches[kept_name] is kept  # another tenant's watch stays
