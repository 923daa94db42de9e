"""Pause and resume in a cluster of two real admins on one PostgreSQL database: both calls are
the leader's (a follower forwards them), and the follower, which serves calls from the shared
store, sees the pause at once: its status says paused, and a command sent to it is refused
naming the pause until the sandbox is resumed."""

from __future__ import annotations

import pytest

from rock.sdk.sandbox.client import Sandbox
from rock_core.errors import BadRequestRockError

pytestmark = [pytest.mark.anyio, pytest.mark.docker]


async def test_a_pause_through_the_follower_holds_on_both_admins(
    through_both: tuple[Sandbox, Sandbox],
) -> None:
    through_follower, through_leader = through_both
    await through_follower.arun("echo before")  # the follower holds a client of it now
    paused = await through_follower.pause()  # forwarded to the leader
    assert paused.paused and paused.state.value == "running"
    for handle in (through_follower, through_leader):
        assert (await handle.get_status()).paused
        with pytest.raises(
            BadRequestRockError, match=f"{through_follower.sandbox_id} is paused; resume it"
        ):
            await handle.arun("echo hi")
    resumed = await through_follower.resume()
    assert not resumed.paused
    for handle in (through_follower, through_leader):
        assert (await handle.arun("echo after")).output.strip() == "after"
