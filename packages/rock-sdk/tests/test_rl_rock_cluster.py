"""ROCK's own SDK (rl-rock 1.11, unmodified) with one URL works against any one admin of a
cluster (issue #24 point 4): pointed at the follower, it starts, runs a command, reads its
status and stops; the leader makes the start and the stop. Two real admins on PostgreSQL."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from rock_postgres.testing import AdminProcess, postgres_url, two_admins  # noqa: F401

from .conftest import no_python_env

pytestmark = [
    pytest.mark.docker,
    # It starts admins of its own: the remote pass would only repeat it.
    pytest.mark.skipif(
        os.environ.get("ROCK_TEST_REMOTE", "") not in ("", "0"),
        reason="starts its own admins; it already ran in the embedded pass",
    ),
]

SCRIPT = r"""
import asyncio, sys
from rock.actions import Command
from rock.sdk.sandbox.client import Sandbox
from rock.sdk.sandbox.config import SandboxConfig

async def main():
    sandbox = Sandbox(SandboxConfig(image="python:3.11", base_url=sys.argv[1], cpus=0.5, memory="256m"))
    await sandbox.start()
    try:
        done = await sandbox.execute(Command(command=["echo", "through-the-follower"]))
        print("stdout", done.stdout.strip())
        print("state", (await sandbox.get_status()).state)
    finally:
        await sandbox.stop()
    print("stopped")

asyncio.run(main())
"""


@pytest.fixture
def admins(tmp_path: Path, postgres_url: str) -> Iterator[tuple[AdminProcess, AdminProcess]]:
    with two_admins(tmp_path, postgres_url) as admins:
        yield admins


def test_rl_rocks_own_sdk_with_one_url_works_against_the_follower(
    rl_rock_python: str, admins: tuple[AdminProcess, AdminProcess]
) -> None:
    _leader, follower = admins
    done = subprocess.run(
        [rl_rock_python, "-c", SCRIPT, follower.url],
        capture_output=True,
        text=True,
        timeout=300,
        env=no_python_env(),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert "stdout through-the-follower" in lines and "stopped" in lines, done.stdout
    assert any(line.startswith("state ") and "running" in line.lower() for line in lines), (
        done.stdout
    )
