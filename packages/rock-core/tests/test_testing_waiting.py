"""rock_core.testing.waiting: the one ``eventually`` helper of rock's tests."""

from __future__ import annotations

import anyio
import pytest

from rock_core.testing import eventually, eventually_async


def test_eventually_returns_the_first_answer_that_holds() -> None:
    answers = iter([0, [], 3, 4])
    assert eventually(lambda: next(answers), interval=0) == 3
    answers = iter([{"state": "pending"}, {"state": "running"}])
    assert eventually(
        lambda: next(answers), until=lambda s: s["state"] != "pending", interval=0
    ) == {"state": "running"}


def test_eventually_fails_naming_what_it_waited_for_and_the_last_answer() -> None:
    with pytest.raises(
        AssertionError,
        match=r"the sandbox running did not happen within 0.05s \(last seen: \{'state': 'pending'\}\)",
    ):
        eventually(
            lambda: {"state": "pending"},
            until=lambda s: s["state"] == "running",
            what="the sandbox running",
            timeout=0.05,
        )


def test_eventually_lets_the_probes_exception_through_at_once() -> None:
    def probe() -> bool:
        raise KeyError("gone")

    with pytest.raises(KeyError, match="gone"):
        eventually(probe, timeout=3600)


@pytest.mark.anyio
async def test_eventually_async_awaits_an_awaitable_answer_and_lets_other_tasks_run() -> None:
    done = anyio.Event()

    async def probe() -> bool:
        return done.is_set()

    async def set_done() -> None:
        done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(set_done)  # runs only if the wait yields to it
        assert await eventually_async(probe, what="the other task", timeout=30) is True
    with pytest.raises(
        AssertionError, match=r"nothing did not happen within 0.05s \(last seen: None\)"
    ):
        await eventually_async(lambda: None, what="nothing", timeout=0.05)
