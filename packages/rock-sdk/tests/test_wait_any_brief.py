"""A start's wait is answered in brief: ``wait_any``'s ``brief`` gives a sandbox that runs by its
id, state and address (all ``Sandbox.start()`` reads), and any other outcome in full, so a
burst of starts does not cost the admin a whole status per start, nor the trainer reading it.
The admin app over an engine on the scripted runtime (the ``scripted_admin`` fixture), its
starts held at a gate; the remote driver reaches it through an ASGI transport that keeps each
``wait_any`` request and answer."""

from __future__ import annotations

import functools
import json
from typing import Any

import anyio
import httpx
import pytest

from rock_core.errors import SandboxNotFound
from rock_core.states import State
from rock_core.testing import ScriptedRuntime

pytestmark = pytest.mark.anyio

BRIEF_KEYS = {"sandbox_id", "state", "is_alive", "host_name", "host_ip"}


class _Recording(httpx.AsyncBaseTransport):
    """An ASGI transport that keeps each ``wait_any`` request's body and answer's result;
    ``older``: the admin is made to look like one from before ``brief`` (the field renamed on
    the way, so the admin ignores it, or with ``strict_fields`` refuses it)."""

    def __init__(self, app: Any, *, older: bool = False) -> None:
        self._inner = httpx.ASGITransport(app=app)
        self.asked: list[dict[str, Any]] = []
        self.answers: list[Any] = []
        self._older = older

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        waits = request.url.path.endswith("/sandboxes/wait_any")
        if waits:
            body = json.loads(await request.aread())
            self.asked.append(dict(body))
            if self._older and "brief" in body:
                body["brief_unknown_here"] = body.pop("brief")
                request = httpx.Request(
                    request.method, request.url, headers=request.headers, json=body
                )
        response = await self._inner.handle_async_request(request)
        await response.aread()
        if waits:
            self.answers.append(json.loads(response.content)["result"])
        return response


async def _start_and_wait(admin: Any, runtime: ScriptedRuntime, count: int, stop_first: bool):
    """Start ``count`` sandboxes, wait for all of them with ``wait_until_running`` (the first
    stopped while it starts when ``stop_first``); each id's status or error."""
    start = runtime.hold("start")
    ids = await admin.start(count)
    outcomes: dict[str, Any] = {}

    async def wait(sandbox_id: str) -> None:
        try:
            outcomes[sandbox_id] = await admin.driver.wait_until_running(sandbox_id)
        except SandboxNotFound as exc:
            outcomes[sandbox_id] = exc

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            for sandbox_id in ids:
                tg.start_soon(wait, sandbox_id)
            await start.arrivals(1)
            if stop_first:
                await admin.manager.stop(ids[0])
            start.open()
    return ids, outcomes


async def test_a_running_start_is_answered_in_brief_and_the_wait_reads_its_address(
    scripted_admin: Any, scripted_runtime: ScriptedRuntime
) -> None:
    async with scripted_admin(_Recording) as admin:
        ids, outcomes = await _start_and_wait(admin, scripted_runtime, 6, stop_first=False)
        full = {i: await admin.driver.get_status(i, True) for i in ids}
    recording = admin.transport
    assert recording.asked and all(body.get("brief") is True for body in recording.asked)
    answered = [status for result in recording.answers for status in result["statuses"]]
    assert sorted(status["sandbox_id"] for status in answered) == sorted(ids)
    for status in answered:
        assert set(status) == BRIEF_KEYS  # nothing else is made, sent or read
        assert status["state"] == "running" and status["is_alive"] is True
    for sandbox_id, status in outcomes.items():
        assert status.state is State.RUNNING
        assert (status.host_name, status.host_ip) == (
            full[sandbox_id].host_name,
            full[sandbox_id].host_ip,
        )
        assert full[sandbox_id].image == "scripted:1"  # get_status still answers in full


async def test_a_start_that_did_not_run_is_answered_in_full_with_its_reason(
    scripted_admin: Any, scripted_runtime: ScriptedRuntime
) -> None:
    async with scripted_admin(_Recording) as admin:
        ids, outcomes = await _start_and_wait(admin, scripted_runtime, 3, stop_first=True)
    answered = {
        status["sandbox_id"]: status
        for result in admin.transport.answers
        for status in result["statuses"]
    }
    stopped = answered[ids[0]]
    assert stopped["state"] != "running"
    assert {"status", "reason", "state_history", "image"} <= set(stopped)  # the whole status
    assert isinstance(outcomes[ids[0]], SandboxNotFound)
    assert "is not running" in str(outcomes[ids[0]])
    assert all(set(answered[i]) == BRIEF_KEYS for i in ids[1:])


async def test_a_wait_any_without_brief_answers_whole_statuses(
    scripted_admin: Any, scripted_runtime: ScriptedRuntime
) -> None:
    start = scripted_runtime.hold("start")
    async with scripted_admin() as admin:
        [sandbox_id] = await admin.start(1)
        with anyio.fail_after(60):
            await start.arrivals(1)
            start.open()
            answer = await admin.driver.wait_any([sandbox_id], 20)
    [status] = answer.statuses
    assert status.state is State.RUNNING and status.image == "scripted:1"
    assert status.create_time is not None and status.status


@pytest.mark.parametrize("strict_fields", [False, True], ids=["ignoring", "strict"])
async def test_an_admin_from_before_brief_still_serves_the_waits(
    scripted_admin: Any, scripted_runtime: ScriptedRuntime, strict_fields: bool
) -> None:
    older = functools.partial(_Recording, older=True)
    async with scripted_admin(older, strict_fields=strict_fields) as admin:
        ids, outcomes = await _start_and_wait(admin, scripted_runtime, 4, stop_first=False)
    assert {status.state for status in outcomes.values()} == {State.RUNNING}
    assert sorted(outcomes) == sorted(ids)
    answers = admin.transport.answers
    answered = [
        status for result in answers if "statuses" in result for status in result["statuses"]
    ]
    assert sorted(status["sandbox_id"] for status in answered) == sorted(ids)
    assert all("image" in status for status in answered)  # whole statuses, as before
    if strict_fields:  # refused once, then asked without it
        assert answers[0]["rock_code"] and "brief" not in admin.transport.asked[-1]
