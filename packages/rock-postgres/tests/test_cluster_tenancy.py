"""Tenancy holds in a cluster (issue #24 with #22): a follower checks the key's tenant against the
record it reads from the store, and a call it forwards to the leader carries the client's own key,
which the leader checks again. Two real admins with two tenants' API keys on one PostgreSQL."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from rock.admin.auth import hash_key
from rock_postgres.testing import AdminProcess, postgres_url, two_admins  # noqa: F401

HANG = 90
PREFIX = "/apis/envs/sandbox/v1"
KEY_A = "key-a-" + uuid.uuid4().hex
KEY_B = "key-b-" + uuid.uuid4().hex


@pytest.fixture
def admins(tmp_path: Path, postgres_url: str) -> Iterator[tuple[AdminProcess, AdminProcess]]:
    keys = (
        "[admin]\napi_keys = [\n"
        f'  {{ tenant = "team-a", sha256 = "{hash_key(KEY_A)}" }},\n'
        f'  {{ tenant = "team-b", sha256 = "{hash_key(KEY_B)}" }},\n'
        "]\n"
    )
    with two_admins(tmp_path, postgres_url, extra=keys) as admins:
        yield admins


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
