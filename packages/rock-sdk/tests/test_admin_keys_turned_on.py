"""Keys turned on after sandboxes were started (issue #30 point 4): a sandbox of no tenant, from
before the admin had keys, is the operator's to see and stop; a tenant's key still cannot reach
it. A real admin restarted with keys on the same state directory, real containers."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from rock.admin.auth import hash_key

pytestmark = [pytest.mark.docker]

PREFIX = "/apis/envs/sandbox/v1"
KEY_OPS = "key-ops-" + uuid.uuid4().hex
KEY_A = "key-a-" + uuid.uuid4().hex


def test_a_sandbox_from_before_the_keys_is_the_operators_to_stop(
    tmp_path_factory: pytest.TempPathFactory, admin_launcher: Any, docker_client: Any
) -> None:
    launch_admin, stop_admin = admin_launcher
    state = tmp_path_factory.mktemp("keys-later")
    before = launch_admin(state)
    try:
        started = httpx.post(
            f"{before.url}{PREFIX}/start",
            json={"image": "python:3.11", "memory": "128m"},
            timeout=120,
        ).json()
        assert started["status"] == "Success", started
        sandbox_id = started["result"]["sandbox_id"]
    finally:
        before.process.terminate()  # the sandbox keeps running: admins leave them
        before.process.wait(60)
    keys = (
        "[admin]\napi_keys = [\n"
        f'  {{ tenant = "ops", sha256 = "{hash_key(KEY_OPS)}", operator = true }},\n'
        f'  {{ tenant = "team-a", sha256 = "{hash_key(KEY_A)}" }},\n'
        "]\n"
    )
    after = launch_admin(state, config=keys)
    try:

        def call(key: str, route: str) -> dict[str, Any]:
            answer = httpx.post(
                f"{after.url}{PREFIX}/{route}",
                json={"sandbox_id": sandbox_id},
                headers={"X-API-Key": key},
                timeout=120,
            )
            return dict(answer.json())

        def state_seen(key: str) -> Any:
            answer = httpx.get(
                f"{after.url}{PREFIX}/get_status",
                params={"sandbox_id": sandbox_id, "include_all_states": "true"},
                headers={"X-API-Key": key},
                timeout=60,
            ).json()
            return (answer.get("result") or {}).get("state")

        assert state_seen(KEY_A) is None  # a tenant's key: unknown to it
        call(KEY_A, "stop")  # answered as for an unknown id; stops nothing
        assert state_seen(KEY_OPS) == "running"
        assert call(KEY_OPS, "stop")["status"] == "Success"
        assert state_seen(KEY_OPS) in ("stopped", "deleted")
    finally:
        stop_admin(after, docker_client)
