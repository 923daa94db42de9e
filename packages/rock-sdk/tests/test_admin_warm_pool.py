"""A warm pool in a real admin: configured in its TOML file, claimed by the SDK, shown in /metrics.

When the admin stops, its idle members go with it; the claimed sandbox keeps running (the admin
never removes sandboxes when it stops).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from rock.actions import Command
from rock.sdk.sandbox.client import Sandbox
from rock.sdk.sandbox.config import SandboxConfig
from rock_core.testing import eventually

pytestmark = pytest.mark.skipif(
    os.environ.get("ROCK_TEST_REMOTE", "") not in ("", "0"),
    reason="starts its own admin; it already ran in the embedded pass",
)

CONFIG = """
[[engine.warm_pools]]
image = "python:3.11"
memory = "256m"
cpus = 0.5
size = 2
"""


def _metric(text: str, name: str) -> int:
    """The value of the first sample named ``name`` in the Prometheus text ``text``."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                return int(sample.value)
    raise AssertionError(f"{name} missing from /metrics:\n{text}")


def _wait_ready(url: str, count: int, timeout: float = 120.0) -> str:
    return eventually(
        lambda: httpx.get(url + "/metrics").text,
        until=lambda text: _metric(text, "rock_warm_pool_ready") == count,
        what=f"the pool reaching {count} ready",
        timeout=timeout,
        interval=0.2,
    )


def _members(docker_client: Any, owner: str) -> list[Any]:
    found = docker_client.containers.list(
        all=True, filters={"label": [f"rock.owner={owner}", "rock.pool"]}, ignore_removed=True
    )
    return [c for c in found if c.name == c.labels.get("rock.pool_member")]


def test_the_sdk_claims_from_the_admins_warm_pool(
    tmp_path: Path, docker_client: Any, admin_launcher: Any
) -> None:
    launch_admin, stop_admin = admin_launcher
    owner = f"admin:{tmp_path / 'rock.db'}"
    server = launch_admin(tmp_path, config=CONFIG)
    try:
        text = _wait_ready(server.url, 2)
        assert (
            _metric(text, "rock_warm_pool_size") == 2
            and _metric(text, "rock_warm_pool_claimed_total") == 0
        )
        shown = subprocess.run(
            [str(Path(sys.executable).with_name("rock")), "admin", "status"],
            env={**os.environ, "ROCK_ADMIN_STATE_DIR": str(tmp_path)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert re.search(r"warm pool: pool-\w+ \(python:3\.11\) 2/2 ready", shown.stdout), (
            shown.stdout + shown.stderr
        )

        async def use() -> str:
            sandbox = Sandbox(
                SandboxConfig(base_url=server.url, image="python:3.11", memory="256m", cpus=0.5)
            )
            await sandbox.start()
            status = await sandbox.get_status()
            assert status.status["docker_run"].message.startswith("claimed from warm pool"), (
                status.status
            )
            assert (
                await sandbox.execute(Command(command=["echo", "warm"]))
            ).stdout.strip() == "warm"
            return sandbox.sandbox_id

        sandbox_id = anyio.run(use)
        text = _wait_ready(server.url, 2)  # refilled
        assert _metric(text, "rock_warm_pool_claimed_total") == 1
        assert len(_members(docker_client, owner)) == 2

        assert server.process is not None
        server.process.terminate()
        server.process.wait(60)
        assert _members(docker_client, owner) == [], "idle members end with the admin"
        assert docker_client.containers.get(sandbox_id).status == "running", (
            "the claimed sandbox is a sandbox: it stays"
        )
    finally:
        stop_admin(server, docker_client)


PREFIX = "/apis/envs/sandbox/v1"


def test_rocks_warmup_route_pulls_and_sizes_warm_pools(
    tmp_path: Path, docker_client: Any, admin_launcher: Any
) -> None:
    """``POST /warmup/tasks``: ROCK's ``{"image"}`` answers as ROCK and pulls in the background; a
    failed pull is logged; rock's ``size`` sets a warm pool, within ``max_warm_pool_members``."""
    launch_admin, stop_admin = admin_launcher
    server = launch_admin(tmp_path, config="[engine]\nmax_warm_pool_members = 4\n")
    try:
        with httpx.Client(base_url=server.url + PREFIX, timeout=60) as client:
            answer = client.post("/warmup/tasks", json={"image": "python:3.11"}).json()
            assert answer == {
                "status": "Success",
                "message": "warmup task started",
                "error": None,
                "result": None,
            }

            client.post("/warmup/tasks", json={"image": "rock-test/not-pullable:1"})
            eventually(
                lambda: server.log_tail(200),
                until=lambda log: (
                    "warm-up of image rock-test/not-pullable:1 failed: Failed to pull image" in log
                ),
                what="the failed warm-up in the admin's log",
                timeout=60,
                interval=0.2,
            )

            kind = {"image": "python:3.11", "memory": "256m", "cpus": 0.5}
            sized = client.post("/warmup/tasks", json={**kind, "size": 2}).json()
            assert sized["status"] == "Success" and sized["message"].endswith("set to 2"), sized
            _wait_ready(server.url, 2)

            too_many = client.post(
                "/warmup/tasks", json={**kind, "memory": "300m", "size": 3}
            ).json()
            assert (
                too_many["status"] == "Failed" and "max_warm_pool_members" in too_many["error"]
            ), too_many
            no_image = client.post("/warmup/tasks", json={"size": 1}).json()
            assert no_image["status"] == "Failed" and "image" in no_image["error"], no_image

            removed = client.post("/warmup/tasks", json={**kind, "size": 0}).json()
            assert removed["status"] == "Success", removed
        owner = f"admin:{tmp_path / 'rock.db'}"
        eventually(
            lambda: not _members(docker_client, owner),
            what="size 0 removes the pool's members",
            timeout=60,
            interval=0.2,
        )
    finally:
        stop_admin(server, docker_client)
