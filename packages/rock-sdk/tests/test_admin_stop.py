"""``rock admin stop`` says how many sandboxes keep running, and ``--remove-sandboxes`` removes
them before the admin exits.

A real ``rock admin serve`` process with its own state directory, real sandboxes on Docker, and
``rock admin stop`` run as a command, as a user runs it.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from rock_core.engine.live import LABEL_OWNER
from rock_core.engine.owners import LABEL_OWNER_HOST, host_identity
from rock_core.testing import eventually

from .conftest import _rock_command

PREFIX = "/apis/envs/sandbox/v1"
SMALL = {"image": "python:3.11", "memory": "256m", "cpus": 0.5}

pytestmark = pytest.mark.skipif(
    os.environ.get("ROCK_TEST_REMOTE", "") not in ("", "0"),
    reason="starts its own admin; it already ran in the embedded pass",
)


def _result(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text
    envelope = response.json()
    assert envelope["status"] == "Success", envelope
    return envelope["result"]


def _start_running(url: str, count: int) -> list[str]:
    with httpx.Client(base_url=url, timeout=60) as client:
        ids = [
            _result(client.post(PREFIX + "/start_async", json=SMALL))["sandbox_id"]
            for _ in range(count)
        ]

        def running() -> bool:
            return all(
                _result(client.get(PREFIX + "/get_status", params={"sandbox_id": s}))["state"]
                == "running"
                for s in ids
            )

        eventually(running, what=f"the {count} sandboxes running", timeout=120, interval=0.2)
    return ids


def _admin_stop(state_dir: Path, *args: str) -> str:
    environ = {**os.environ, "ROCK_ADMIN_STATE_DIR": str(state_dir)}
    done = subprocess.run(
        [*_rock_command(), "admin", "stop", *args],
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _containers(docker_client: Any, state_dir: Path) -> list[Any]:
    owner = f"admin:{state_dir / 'rock.db'}"
    return list(
        docker_client.containers.list(
            all=True, filters={"label": f"{LABEL_OWNER}={owner}"}, ignore_removed=True
        )
    )


def test_admin_stop_says_how_many_sandboxes_keep_running_and_remove_sandboxes_removes_them(
    tmp_path: Path, docker_client: Any, admin_launcher: Any
) -> None:
    launch_admin, stop_admin = admin_launcher
    server = launch_admin(tmp_path)
    try:
        _start_running(server.url, 2)
        held = _containers(docker_client, tmp_path)
        assert len(held) == 2
        # the host whose files the owner's path names, so an engine here can judge the folder
        assert {c.labels.get(LABEL_OWNER_HOST) for c in held} == {host_identity()}

        said = _admin_stop(tmp_path)
        assert "its 2 sandbox(es) keep running" in said, said
        assert "--remove-sandboxes" in said
        server.process.wait(60)  # it ended (uvicorn ends by the SIGTERM it handled)
        assert [c.status for c in _containers(docker_client, tmp_path)] == ["running"] * 2

        server = launch_admin(tmp_path)  # takes the 2 back
        _start_running(server.url, 1)
        said = _admin_stop(tmp_path, "--remove-sandboxes")
        assert "its 3 sandbox(es) were stopped and removed" in said, said
        server.process.wait(60)  # it ended (uvicorn ends by the SIGTERM it handled)
        eventually(
            lambda: _containers(docker_client, tmp_path) == [],
            what="the admin's containers removed",
            timeout=60,
            interval=0.2,
        )
        assert not (tmp_path / "admin.remove-sandboxes").exists()
        assert "removing its sandboxes (--remove-sandboxes)" in server.log_tail()
        server = launch_admin(tmp_path)  # its records say so too: nothing holds a container
        said = _admin_stop(tmp_path)  # none left: the line the README shows, no count
        assert said.startswith("rock admin stopped (pid ") and "(es)" not in said, said
    finally:
        stop_admin(server, docker_client)
