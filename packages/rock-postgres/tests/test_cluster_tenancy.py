"""Tenancy holds in a cluster (issue #24 with #22): a follower checks the key's tenant against the
record it reads from the store, and a call it forwards to the leader carries the client's own key,
which the leader checks again. Two real admins with two tenants' API keys on one PostgreSQL."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from rock.admin.auth import hash_key
from rock_core.testing import eventually
from rock_postgres.testing import AdminProcess, postgres_url  # noqa: F401

HANG = 90
PREFIX = "/apis/envs/sandbox/v1"
KEY_A = "key-a-" + uuid.uuid4().hex
KEY_B = "key-b-" + uuid.uuid4().hex
CLUSTER = f"tenancy-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def admins(tmp_path: Path, postgres_url: str) -> Iterator[tuple[AdminProcess, AdminProcess]]:
    keys = (
        "[admin]\napi_keys = [\n"
        f'  {{ tenant = "team-a", sha256 = "{hash_key(KEY_A)}" }},\n'
        f'  {{ tenant = "team-b", sha256 = "{hash_key(KEY_B)}" }},\n'
        "]\n"
    )
    started = [
        AdminProcess(tmp_path / name, postgres_url, cluster=CLUSTER, extra=keys)
        for name in ("a", "b")
    ]
    try:
        for admin in started:
            admin.wait_serving()
        leader = eventually(
            lambda: next((a for a in started if a.epochs_led()), None),
            what="a leader",
            timeout=HANG,
        )
        yield leader, started[1] if leader is started[0] else started[0]
    finally:
        for admin in started:
            admin.end()
        found = subprocess.run(
            ["docker", "ps", "-aq", "--filter", f"label=rock.owner=cluster:{CLUSTER}"],
            capture_output=True, text=True, check=False,
        ).stdout.split()  # fmt: skip
        if found:
            subprocess.run(["docker", "rm", "-f", *found], capture_output=True, check=False)


def _call(url: str, key: str | None, method: str, route: str, **kwargs: object) -> httpx.Response:
    headers = {"X-API-Key": key} if key else {}
    return httpx.request(method, f"{url}{PREFIX}{route}", headers=headers, timeout=120, **kwargs)


def test_a_tenant_cannot_reach_anothers_sandbox_through_either_admin(
    admins: tuple[AdminProcess, AdminProcess],
) -> None:
    leader, follower = admins
    # Team A starts through the follower (forwarded with A's key): A's sandbox.
    started = _call(
        follower.url, KEY_A, "POST", "/start", json={"image": "python:3.11", "memory": "128m"}
    ).json()
    assert started["status"] == "Success", started
    sandbox_id = started["result"]["sandbox_id"]
    command = {"sandbox_id": sandbox_id, "command": ["echo", "mine"]}
    for url in (follower.url, leader.url):
        # Team B, through either admin: not found, for a command and a status.
        answer = _call(url, KEY_B, "POST", "/execute", json=command).json()
        assert answer["status"] == "Failed" and sandbox_id in answer["error"], answer
        assert "mine" not in str(answer)
        answer = _call(url, KEY_B, "GET", "/get_status", params={"sandbox_id": sandbox_id}).json()
        assert answer["status"] == "Failed", answer
        # A stop is answered as for an unknown id (ROCK: not an error), and stops nothing.
        _call(url, KEY_B, "POST", "/stop", json={"sandbox_id": sandbox_id})
        mine = _call(url, KEY_A, "GET", "/get_status", params={"sandbox_id": sandbox_id}).json()
        assert mine["result"]["state"] == "running", mine
        # No key at all: refused before anything is read or forwarded.
        assert _call(url, None, "POST", "/execute", json=command).status_code == 401
        assert _call(url, None, "POST", "/stop", json={"sandbox_id": sandbox_id}).status_code == 401
    # Team A's sandbox ran on and answers A through both admins.
    for url in (follower.url, leader.url):
        answer = _call(url, KEY_A, "POST", "/execute", json=command).json()
        assert answer["status"] == "Success" and answer["result"]["stdout"].strip() == "mine"
    answer = _call(follower.url, KEY_A, "POST", "/stop", json={"sandbox_id": sandbox_id}).json()
    assert answer["status"] == "Success", answer
