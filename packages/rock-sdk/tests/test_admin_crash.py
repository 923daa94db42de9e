"""Nothing is lost when the admin crashes: ``kill -9`` while 5 sandboxes run and 3 start.

A real ``rock admin serve`` process with its own state directory (SQLite store). After the
SIGKILL a new admin on the same store lists the 5 as running and they answer commands; the 3
that were starting end running or stopped with a reason; nothing is pending, unknown or leaked.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

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


def _status(client: httpx.Client, sandbox_id: str) -> dict[str, Any]:
    return _result(client.get(PREFIX + "/get_status", params={"sandbox_id": sandbox_id, "include_all_states": "true"}))


def test_kill_9_while_sandboxes_run_and_start_loses_nothing(tmp_path: Path, docker_client: Any, admin_launcher: Any) -> None:
    launch_admin, stop_admin = admin_launcher
    owner = f"admin:{tmp_path / 'rock.db'}"
    first = launch_admin(tmp_path)
    admin = first.process
    second = None
    try:
        with httpx.Client(base_url=first.url, timeout=60) as client:
            running = [_result(client.post(PREFIX + "/start_async", json=SMALL))["sandbox_id"] for _ in range(5)]
            deadline = time.monotonic() + 120
            while not all(_status(client, s)["state"] == "running" for s in running):
                assert time.monotonic() < deadline, "the 5 sandboxes did not start"
                time.sleep(0.2)
            starting = [_result(client.post(PREFIX + "/start_async", json=SMALL))["sandbox_id"] for _ in range(3)]
        admin.send_signal(signal.SIGKILL)
        admin.wait()

        second = launch_admin(tmp_path)
        with httpx.Client(base_url=second.url, timeout=60) as client:
            listed = {item["sandbox_id"]: item for item in _result(client.get(PREFIX + "/sandboxes"))["items"]}
            for sandbox_id in running:
                assert listed[sandbox_id]["state"] == "running"
                answer = _result(client.post(PREFIX + "/execute", json={"sandbox_id": sandbox_id, "command": ["echo", "back"]}))
                assert answer["stdout"].strip() == "back"
            for sandbox_id in starting:
                status = _status(client, sandbox_id)
                assert status["state"] == "running" or (status["state"] in ("stopped", "deleted") and status["reason"]), status
            assert all(item["state"] in ("pending", "running") for item in listed.values())
            assert not any(item["state"] == "pending" for item in listed.values())
            # Every container of this admin belongs to a sandbox it knows.
            containers = docker_client.containers.list(all=True, sparse=True, filters={"label": f"rock.owner={owner}"})
            known = set(running) | {s for s in starting if _status(client, s)["state"] != "deleted"}
            assert {c.attrs["Labels"]["rock.sandbox_id"] for c in containers} <= known
            for sandbox_id in running + starting:
                _result(client.post(PREFIX + "/stop", json={"sandbox_id": sandbox_id}))
                if _status(client, sandbox_id)["state"] == "stopped":
                    _result(client.post(PREFIX + "/delete", json={"sandbox_id": sandbox_id}))
            deadline = time.monotonic() + 60
            while docker_client.containers.list(all=True, sparse=True, filters={"label": f"rock.owner={owner}"}):
                assert time.monotonic() < deadline, "containers left after stop and delete"
                time.sleep(0.2)
    finally:
        for server in (first, second):
            if server is not None:
                stop_admin(server, docker_client)
