"""A crash restart in a cluster of two real admins on one PostgreSQL database: while the restart
policy's back-off runs, the follower (which reads the shared store) shows the sandbox as the
leader does, ``pending`` with the crash and the coming restart as the reason, not stopped; and a
leader that ends during the back-off leaves the restart to the next leader, which makes it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rock.sdk.sandbox.client import Sandbox
from rock.sdk.sandbox.config import SandboxConfig
from rock_core.testing import eventually_async
from rock_postgres.testing import AdminProcess, postgres_url, two_admins  # noqa: F401

pytestmark = [pytest.mark.anyio, pytest.mark.docker]

#: Long enough that the back-off is still running when the test looks, and that a leader ended
#: during it leaves the restart undone.
BACKOFF = "restart_backoff_seconds = 8\n"


@pytest.fixture
def admins(tmp_path: Path, postgres_url: str) -> Iterator[tuple[AdminProcess, AdminProcess]]:
    """The cluster's (leader, follower), crash restarts waiting :data:`BACKOFF`."""
    with two_admins(tmp_path, postgres_url, extra=BACKOFF) as admins:
        yield admins


def _sandbox(url: str) -> Sandbox:
    return Sandbox(
        SandboxConfig(
            image="python:3.11",
            base_url=url,
            memory="512m",
            cpus=0.5,
            restart_policy="on-failure",
            max_restarts=1,
            auto_delete_seconds=600,
        )
    )


async def _crashed(
    admins: tuple[AdminProcess, AdminProcess], docker_client: Any
) -> tuple[Sandbox, Sandbox, Any]:
    """A sandbox started through the leader, attached through the follower, and killed (exit
    137: a failure, restarted by on-failure): (through the leader, through the follower, the
    leader's status in the back-off)."""
    leader, follower = admins
    through_leader, through_follower = _sandbox(leader.url), _sandbox(follower.url)
    await through_leader.start()
    sandbox_id = through_leader.sandbox_id
    assert sandbox_id is not None
    await through_follower.attach(sandbox_id)
    label = f"rock.sandbox_id={sandbox_id}"
    (container,) = docker_client.containers.list(filters={"label": label})
    container.kill()
    on_leader = await eventually_async(
        through_leader.get_status,
        until=lambda s: s.state.value == "pending",
        what="the leader showing the back-off",
        timeout=60,
    )
    return through_leader, through_follower, on_leader


async def _running_again(handle: Sandbox) -> None:
    """Wait until ``handle``'s admin shows the sandbox running after its one restart."""
    running = await eventually_async(
        handle.get_status,
        until=lambda s: s.state.value == "running" and s.restart_count == 1,
        what="the restart running",
        timeout=120,
    )
    assert running.is_alive


async def test_the_follower_shows_a_crash_restarts_back_off_as_pending_like_the_leader(
    admins: tuple[AdminProcess, AdminProcess], docker_client: Any
) -> None:
    through_leader, through_follower, on_leader = await _crashed(admins, docker_client)
    try:
        assert "restarting after a crash (restart 1 of 1" in (on_leader.reason or "")
        # The follower, from the store: the same (get_status without include_all_states would
        # say "not found" of a stopped sandbox).
        on_follower = await through_follower.get_status()
        assert on_follower.state.value == "pending", on_follower
        assert on_follower.reason == on_leader.reason
        # After the back-off it runs again, on both.
        for handle in (through_leader, through_follower):
            await _running_again(handle)
    finally:
        await through_leader.stop()


async def test_a_restart_whose_leader_ended_during_the_back_off_is_made_by_the_next_leader(
    admins: tuple[AdminProcess, AdminProcess], docker_client: Any
) -> None:
    _, through_follower, _ = await _crashed(admins, docker_client)
    try:
        admins[0].end()  # the leader, during the back-off: its restart is never made by it
        await _running_again(through_follower)
        assert (await through_follower.arun("echo back")).output.strip() == "back"
    finally:
        await through_follower.stop()
