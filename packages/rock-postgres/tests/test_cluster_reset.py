"""Reset in a cluster of two real admins on one PostgreSQL database: the call is the leader's (a
follower forwards it), and the follower, which serves calls from the shared store, reaches the
sandbox's new container after it: the files are the image's, and commands run."""

from __future__ import annotations

import pytest

from rock.sdk.sandbox.client import Sandbox

pytestmark = [pytest.mark.anyio, pytest.mark.docker]


async def test_a_reset_through_the_follower_is_seen_on_both_admins(
    through_both: tuple[Sandbox, Sandbox],
) -> None:
    through_follower, through_leader = through_both
    # The follower holds a client of the sandbox's first container now.
    await through_follower.arun("echo dirty > /dirty")
    before = await through_leader.get_status()
    status = await through_follower.reset()  # forwarded to the leader
    assert status.status is not None and "reset to image" in status.status["reset"].message
    for handle in (through_follower, through_leader):
        done = await handle.arun("test -e /dirty && echo kept || echo gone")
        assert done.output.strip() == "gone"
        after = await handle.get_status()
        assert after.is_alive and after.port_mapping == before.port_mapping
