"""Nothing is lost when the admin crashes (``kill -9`` while 5 sandboxes run and 3 start) or
stops gracefully (SIGTERM while 4 run) and a new admin starts on the same store.

A real ``rock admin serve`` process with its own state directory (SQLite store). After the
SIGKILL a new admin on the same store lists the 5 as running and they answer commands; the 3
that were starting end running or stopped with a reason; nothing is pending, unknown or leaked.
After the SIGTERM the 4 are listed running again, answer commands, and keep their host ports
(the engine reopens the recorded ``port_mapping``), a web server in one still reachable there.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from rock_core.testing import eventually

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
    return _result(
        client.get(
            PREFIX + "/get_status", params={"sandbox_id": sandbox_id, "include_all_states": "true"}
        )
    )


def _start_running(client: httpx.Client, count: int) -> list[str]:
    """Start ``count`` sandboxes at once; return their ids once all run."""
    ids = [
        _result(client.post(PREFIX + "/start_async", json=SMALL))["sandbox_id"]
        for _ in range(count)
    ]
    eventually(
        lambda: all(_status(client, s)["state"] == "running" for s in ids),
        what=f"the {count} sandboxes running",
        timeout=120,
        interval=0.2,
    )
    return ids


def test_kill_9_while_sandboxes_run_and_start_loses_nothing(
    tmp_path: Path, docker_client: Any, admin_launcher: Any
) -> None:
    launch_admin, stop_admin = admin_launcher
    owner = f"admin:{tmp_path / 'rock.db'}"
    first = launch_admin(tmp_path)
    admin = first.process
    second = None
    try:
        with httpx.Client(base_url=first.url, timeout=60) as client:
            running = _start_running(client, 5)
            starting = [
                _result(client.post(PREFIX + "/start_async", json=SMALL))["sandbox_id"]
                for _ in range(3)
            ]
        admin.send_signal(signal.SIGKILL)
        admin.wait()

        second = launch_admin(tmp_path)
        with httpx.Client(base_url=second.url, timeout=60) as client:
            listed = {
                item["sandbox_id"]: item
                for item in _result(client.get(PREFIX + "/sandboxes"))["items"]
            }
            for sandbox_id in running:
                assert listed[sandbox_id]["state"] == "running"
                answer = _result(
                    client.post(
                        PREFIX + "/execute",
                        json={"sandbox_id": sandbox_id, "command": ["echo", "back"]},
                    )
                )
                assert answer["stdout"].strip() == "back"
            for sandbox_id in starting:
                status = _status(client, sandbox_id)
                assert status["state"] == "running" or (
                    status["state"] in ("stopped", "deleted") and status["reason"]
                ), status
            assert all(item["state"] in ("pending", "running") for item in listed.values())
            assert not any(item["state"] == "pending" for item in listed.values())
            # Every container of this admin belongs to a sandbox it knows.
            containers = docker_client.containers.list(
                all=True, sparse=True, filters={"label": f"rock.owner={owner}"}
            )
            known = set(running) | {s for s in starting if _status(client, s)["state"] != "deleted"}
            assert {c.attrs["Labels"]["rock.sandbox_id"] for c in containers} <= known
            for sandbox_id in running + starting:
                _result(client.post(PREFIX + "/stop", json={"sandbox_id": sandbox_id}))
                if _status(client, sandbox_id)["state"] == "stopped":
                    _result(client.post(PREFIX + "/delete", json={"sandbox_id": sandbox_id}))
            eventually(
                lambda: (
                    not docker_client.containers.list(
                        all=True, sparse=True, filters={"label": f"rock.owner={owner}"}
                    )
                ),
                what="no container left after stop and delete",
                timeout=60,
                interval=0.2,
            )
    finally:
        for server in (first, second):
            if server is not None:
                stop_admin(server, docker_client)


def _stored(state_dir: Path, sandbox_id: str) -> dict[str, Any] | None:
    """The record of ``sandbox_id`` in the admin's store file (what a restart reads)."""
    with contextlib.closing(sqlite3.connect(state_dir / "rock.db")) as db:
        row = db.execute(
            "SELECT record FROM sandbox WHERE sandbox_id = ?", (sandbox_id,)
        ).fetchone()
    return None if row is None else json.loads(row[0])


def test_kill_9_at_any_point_of_a_start_leaves_no_sandbox_unaccounted_for(
    tmp_path: Path, docker_client: Any, admin_launcher: Any
) -> None:
    """A start's steps within pending (the image looked at, the container made, started) are
    kept in the admin's memory only until the sandbox runs: a crash at any of them still leaves
    every sandbox running or stopped with a reason after a restart, and no container that no
    sandbox holds."""
    launch_admin, stop_admin = admin_launcher
    owner = f"admin:{tmp_path / 'rock.db'}"
    admins = [launch_admin(tmp_path)]

    def containers(sandbox_id: str) -> list[Any]:
        return docker_client.containers.list(
            all=True, filters={"label": f"rock.sandbox_id={sandbox_id}"}, ignore_removed=True
        )

    def answered(client: httpx.Client, sandbox_id: str) -> bool:
        return True

    def made(client: httpx.Client, sandbox_id: str) -> bool:
        return bool(containers(sandbox_id))

    def started_not_ready(client: httpx.Client, sandbox_id: str) -> bool:
        running = [c for c in containers(sandbox_id) if c.status == "running"]
        return bool(running) and _status(client, sandbox_id)["state"] == "pending"

    started: list[str] = []
    try:
        for point in (answered, made, started_not_ready):
            with httpx.Client(base_url=admins[-1].url, timeout=60) as client:
                # A point is a window of a start (started_not_ready: the rocklet starting in a
                # running container) that a fast start may pass between two looks: another
                # start is made then, until one is seen in it (the missed ones run on, and are
                # checked as the others after the restart).
                for _ in range(WINDOW_ATTEMPTS):
                    sandbox_id = _result(client.post(PREFIX + "/start_async", json=SMALL))[
                        "sandbox_id"
                    ]
                    started.append(sandbox_id)
                    seen = eventually(
                        lambda: _at_or_past(point, client, sandbox_id),  # noqa: B023 - this iteration's
                        until=lambda outcome: outcome is not None,
                        what=f"sandbox {sandbox_id} at {point.__name__} or past it",
                        timeout=120,
                        interval=0.02,
                    )
                    if seen == "at":
                        break
                else:
                    pytest.fail(f"no start seen at {point.__name__} in {WINDOW_ATTEMPTS} tries")
            admins[-1].process.send_signal(signal.SIGKILL)
            admins[-1].process.wait()
            stored = _stored(tmp_path, sandbox_id)
            assert stored is not None and stored["state"] in ("pending", "running"), stored
            admins.append(launch_admin(tmp_path))
            with httpx.Client(base_url=admins[-1].url, timeout=60) as client:
                for earlier in started:
                    status = _status(client, earlier)
                    assert status["state"] == "running" or (
                        status["state"] in ("stopped", "deleted") and status["reason"]
                    ), (point.__name__, status)
                known = {s for s in started if _status(client, s)["state"] != "deleted"}
                left = docker_client.containers.list(
                    all=True, sparse=True, filters={"label": f"rock.owner={owner}"}
                )
                assert {c.attrs["Labels"]["rock.sandbox_id"] for c in left} <= known, point.__name__
        with httpx.Client(base_url=admins[-1].url, timeout=60) as client:
            for sandbox_id in started:
                _result(client.post(PREFIX + "/stop", json={"sandbox_id": sandbox_id}))
    finally:
        for server in admins:
            stop_admin(server, docker_client)


#: Starts made at most to see one in a point's window (see the kill -9 test).
WINDOW_ATTEMPTS = 10


def _at_or_past(
    point: Callable[[httpx.Client, str], bool], client: httpx.Client, sandbox_id: str
) -> str | None:
    """``"at"`` while ``sandbox_id``'s start is at ``point``, ``"past"`` once it left
    ``pending`` without being seen there, else ``None`` (still before it)."""
    if point(client, sandbox_id):
        return "at"
    return "past" if _status(client, sandbox_id)["state"] != "pending" else None


def _web_page(port: int, timeout: float = 30.0) -> str:
    def page() -> str | None:
        try:
            response = httpx.get(f"http://127.0.0.1:{port}/", timeout=10, trust_env=False)
        except httpx.TransportError:
            return None
        return response.text if response.status_code == 200 else None

    text = eventually(
        page,
        until=lambda text: text is not None,
        what=f"a page answered on 127.0.0.1:{port}",
        timeout=timeout,
        interval=0.1,
    )
    assert text is not None
    return text


def test_graceful_stop_and_start_with_sandboxes_running_loses_none(
    tmp_path: Path, docker_client: Any, admin_launcher: Any
) -> None:
    launch_admin, stop_admin = admin_launcher
    first = launch_admin(tmp_path)
    second = None
    try:
        with httpx.Client(base_url=first.url, timeout=60) as client:
            running = _start_running(client, 4)
            ports = {s: _status(client, s)["port_mapping"] for s in running}
            assert all("8080" in mapping for mapping in ports.values()), ports
            web = running[0]
            serve = "mkdir -p /srv && echo kept > /srv/index.html && (nohup python3 -m http.server 8080 -d /srv >/dev/null 2>&1 &)"
            _result(
                client.post(
                    PREFIX + "/execute", json={"sandbox_id": web, "command": ["bash", "-c", serve]}
                )
            )
            assert _web_page(ports[web]["8080"]).strip() == "kept"
        first.process.send_signal(signal.SIGTERM)
        # uvicorn ends by re-raising the SIGTERM it handled: -15, after its graceful shutdown.
        assert first.process.wait(60) in (0, -signal.SIGTERM)
        assert "Application shutdown complete" in first.log_file.read_text()  # graceful, not killed
        for sandbox_id in running:
            containers = docker_client.containers.list(
                filters={"label": f"rock.sandbox_id={sandbox_id}"}, ignore_removed=True
            )
            assert [c.status for c in containers] == ["running"], sandbox_id

        second = launch_admin(tmp_path)
        with httpx.Client(base_url=second.url, timeout=60) as client:
            listed = {
                item["sandbox_id"]: item
                for item in _result(client.get(PREFIX + "/sandboxes"))["items"]
            }
            assert {s: listed[s]["state"] for s in running} == {s: "running" for s in running}
            for sandbox_id in running:
                assert _status(client, sandbox_id)["port_mapping"] == ports[sandbox_id]
                answer = _result(
                    client.post(
                        PREFIX + "/execute",
                        json={"sandbox_id": sandbox_id, "command": ["echo", "back"]},
                    )
                )
                assert answer["stdout"].strip() == "back"
            assert _web_page(ports[web]["8080"]).strip() == "kept"  # the same host port, reopened
            for sandbox_id in running:
                _result(client.post(PREFIX + "/stop", json={"sandbox_id": sandbox_id}))
    finally:
        for server in (first, second):
            if server is not None:
                stop_admin(server, docker_client)
