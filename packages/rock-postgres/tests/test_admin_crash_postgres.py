"""A start the admin answered survives a ``kill -9`` of the admin, on PostgreSQL: the admin
writes the records of a loop turn together (group commits) and before every answer.

A real admin process (rock's scripted runtime: units that take 5 s to start, no containers) on a
fresh database; 12 starts answered, the admin killed with SIGKILL while they are under way, then
every answered sandbox's record is read from the database.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from rock_core.ports import listen_port
from rock_core.states import State
from rock_postgres.store import PostgresRecordStore
from rock_postgres.testing import postgres_url  # noqa: F401

PREFIX = "/apis/envs/sandbox/v1"


def test_every_start_the_admin_answered_is_in_postgresql_after_a_kill_9(
    tmp_path: Path,
    postgres_url: str,  # noqa: F811 - the fixture
) -> None:
    port = listen_port()
    url = f"http://127.0.0.1:{port}"
    environ = {
        **os.environ,
        "ROCK_ADMIN_STATE_DIR": str(tmp_path),
        "ROCK_ENGINE_STORE": postgres_url,
    }
    environ.pop("ROCK_BASE_URL", None)
    with open(tmp_path / "admin.log", "wb") as log:
        admin = subprocess.Popen(
            [sys.executable, "-m", "rock.bench.scripted_admin", "--start-seconds", "5"]
            + ["--host", "127.0.0.1", "--port", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=environ,
            start_new_session=True,
        )
    try:
        with httpx.Client(base_url=url, timeout=30, trust_env=False) as client:
            for _ in range(600):
                try:
                    if client.get("/healthz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert admin.poll() is None, (tmp_path / "admin.log").read_text()
                time.sleep(0.1)
            answered = []
            for _ in range(12):
                response = client.post(PREFIX + "/start_async", json={"image": "python:3.11"})
                assert response.status_code == 200, response.text
                answered.append(response.json()["result"]["sandbox_id"])
        admin.send_signal(signal.SIGKILL)
        admin.wait()
    finally:
        if admin.poll() is None:
            admin.kill()
            admin.wait()
    store = PostgresRecordStore(postgres_url)
    store.open()
    try:
        found = {sandbox_id: store.get(sandbox_id) for sandbox_id in answered}
    finally:
        store.close()
    missing = [sandbox_id for sandbox_id, record in found.items() if record is None]
    assert missing == [], f"answered starts lost in the kill: {missing}"
    assert {record.state for record in found.values() if record is not None} <= {
        State.PENDING,
        State.RUNNING,
    }
