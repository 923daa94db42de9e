"""``rock.sdk.warm_pool``: a warm pool set from the SDK serves the starts of its kind (embedded,
and with ``ROCK_TEST_REMOTE=1`` through the admin's warm-up route)."""

from __future__ import annotations

from typing import Any

import pytest

from rock.actions import Command
from rock.sdk import warm_pool
from rock.sdk.sandbox.client import Sandbox
from rock.sdk.sandbox.config import SandboxConfig
from rock_core.errors import InvalidParameter
from rock_core.testing import eventually_async

pytestmark = [pytest.mark.docker, pytest.mark.anyio]


def _members(docker_client: Any) -> list[Any]:
    found = docker_client.containers.list(
        all=True, filters={"label": "rock.pool"}, ignore_removed=True
    )
    return [c for c in found if c.name == c.labels.get("rock.pool_member")]


async def test_a_pool_set_from_the_sdk_serves_starts_of_its_kind(
    engine: Any, small: dict[str, Any], docker_client: Any
) -> None:
    # A kind no other test starts (its own environment), so the pool serves only this test.
    config = SandboxConfig(**small, env={"ROCK_TEST": "warm-pool"})
    try:
        status = await warm_pool(config, size=1, wait=120)
        assert status is not None and (status.ready, status.size, status.last_error) == (1, 1, None)
        async with Sandbox(config) as sandbox:
            state = await sandbox.get_status()
            assert state.status["docker_run"].message == f"claimed from warm pool {status.key}"
            echoed = await sandbox.execute(Command(command=["sh", "-c", "echo $ROCK_TEST"]))
            assert echoed.stdout.strip() == "warm-pool"
        other = SandboxConfig(**small, env={"ROCK_TEST": "another-kind"})
        async with Sandbox(other) as cold:
            assert (await cold.get_status()).status["docker_run"].message == "docker run success"
    finally:
        assert await warm_pool(config, size=0) is None
    await eventually_async(
        lambda: (
            not [
                c
                for c in _members(docker_client)
                if c.attrs["Config"]["Env"] and "ROCK_TEST=warm-pool" in c.attrs["Config"]["Env"]
            ]
        ),
        what="size 0 removes the pool's members",
        timeout=60,
        interval=0.2,
    )


async def test_a_bad_size_is_refused_naming_it(engine: Any, small: dict[str, Any]) -> None:
    with pytest.raises(InvalidParameter, match="size"):
        await warm_pool(SandboxConfig(**small), size=-1)
