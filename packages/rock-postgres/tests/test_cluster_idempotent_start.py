"""A start is never duplicated across a cluster's admins (issue #24 point 4): two real admins of
one cluster on one PostgreSQL database, and the SDK naming both. A small proxy in front of one
admin forwards the start, reads the admin's answer and drops the client's connection: the SDK
sends the start again, with the same Idempotency-Key, to the other admin, which hands it to the
leader (or is the leader), and the caller gets the one sandbox the first start made."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from rock.sdk.sandbox.client import Sandbox
from rock.sdk.sandbox.config import SandboxConfig
from rock_core.testing.faulty_http import LosingProxy
from rock_postgres.testing import AdminProcess, postgres_url, two_admins  # noqa: F401

pytestmark = pytest.mark.anyio

HANG = 90  # a guard against a hang; nothing waits for it to pass


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def admins(tmp_path: Path, postgres_url: str) -> Iterator[tuple[AdminProcess, AdminProcess]]:
    """The cluster's (leader, follower), both serving, in a cluster of its own."""
    with two_admins(tmp_path, postgres_url) as admins:
        yield admins


def _containers(sandbox_id: str) -> list[str]:
    out = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=rock.sandbox_id={sandbox_id}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return out.split()


@pytest.mark.parametrize("lost_at", ["leader", "follower"])
async def test_a_start_whose_answer_is_lost_makes_one_sandbox_in_the_cluster(
    admins: tuple[AdminProcess, AdminProcess], lost_at: str
) -> None:
    leader, follower = admins
    first, second = (leader, follower) if lost_at == "leader" else (follower, leader)
    proxy = LosingProxy(first.url)
    sandbox = Sandbox(
        SandboxConfig(
            image="python:3.11", memory="512m", cpus=0.5, base_url=[proxy.url, second.url]
        )
    )
    try:
        await sandbox.start()
        sandbox_id = sandbox.sandbox_id
        assert sandbox_id is not None
        # The first admin took the start (through the proxy), the answer was lost, and the
        # second admin answered the same sandbox for the same key.
        assert proxy.answers and {a["result"]["sandbox_id"] for a in proxy.answers} == {sandbox_id}
        keys = {r.headers.get("idempotency-key") for r in proxy.seen}
        assert len(keys) == 1 and None not in keys
        assert len(_containers(sandbox_id)) == 1
        assert (await sandbox.arun("echo one")).output.strip() == "one"
        await sandbox.stop()
    finally:
        proxy.close()
        await sandbox.close()
