"""ROCK's own SDK (rl-rock 1.11, unmodified, in a venv of its own) meets rock's admin's failures
and raises the exception classes ROCK documents (issue #30 point 7). ROCK's ``codes`` enum holds
only 2000, 4000, 5000 and 6000 and its ``SandboxResponse.code`` reads nothing else: rock sends
ROCK's code in ``code`` and its finer one in ``rock_code``. Before, each path here ended in a
pydantic ``ValidationError``."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from .conftest import no_python_env

pytestmark = [pytest.mark.docker]

SCRIPT = r"""
import asyncio, sys
from rock.sdk.sandbox.client import Sandbox
from rock.sdk.sandbox.config import SandboxConfig
from rock.sdk.common.exceptions import BadRequestRockError

url = sys.argv[1]

async def refused(what, call):
    try:
        await call()
    except BadRequestRockError as exc:
        print(what, "BadRequestRockError", "ok" if str(exc) else "no message")
    except Exception as exc:
        print(what, type(exc).__name__, str(exc)[:200])
    else:
        print(what, "no error")

async def main():
    too_big = Sandbox(SandboxConfig(image="python:3.11", base_url=url, cpus=64, memory="1g"))
    await refused("start-over-the-maximum", too_big.start)
    sandbox = Sandbox(SandboxConfig(image="python:3.11", base_url=url, cpus=0.5, memory="256m"))
    await sandbox.start()
    try:
        await refused("delete-while-running", sandbox.delete)
        await refused("restart-while-running", sandbox.restart)
        await refused("archive-while-running", sandbox.archive)
    finally:
        await sandbox.stop()

asyncio.run(main())
"""


def test_rl_rocks_own_sdk_raises_its_documented_classes_on_the_admins_failures(
    rl_rock_python: str, admin: Any
) -> None:
    done = subprocess.run(
        [rl_rock_python, "-c", SCRIPT, admin.url],
        capture_output=True,
        text=True,
        timeout=300,
        env=no_python_env(),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    for what in (
        "start-over-the-maximum",
        "delete-while-running",
        "restart-while-running",
        "archive-while-running",
    ):
        assert lines.get(what) == "BadRequestRockError ok", (what, done.stdout)
