"""A commit (``Sandbox.commit``) is an image tag on the node, labelled with its tenant: under API
keys another tenant naming that tag as its image is refused as an unknown image (not told
whose), where it could start a sandbox from the commit and read its files; the tenant that made
it starts from it as before. A real admin with keys on Docker."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from rock_core.testing import eventually

from .test_e2b_sdk import KEY_A, KEY_B, keyed_admin  # noqa: F401 - fixture

pytestmark = [pytest.mark.docker]

P = "/apis/envs/sandbox/v1"


def _start(http: httpx.Client, image: str) -> dict[str, Any]:
    answer: dict[str, Any] = http.post(
        f"{P}/start_async", json={"image": image, "memory": "256m", "cpus": 0.5}
    ).json()
    return answer


def _running(http: httpx.Client, sandbox_id: str) -> dict[str, Any]:
    def status() -> dict[str, Any]:
        found: dict[str, Any] = http.get(f"{P}/get_status", params={"sandbox_id": sandbox_id})
        return found.json()["result"]

    return eventually(
        status,
        until=lambda s: s.get("state") in ("running", "failed", "stopped") or s.get("is_alive"),
        what="the sandbox running",
        timeout=120,
        interval=0.2,
    )


def test_a_tenant_cannot_start_another_tenants_commit_and_its_own_tenant_can(
    keyed_admin: Any, docker_client: Any
) -> None:
    tag = f"rock-commit-tenancy:{uuid.uuid4().hex[:12]}"
    a = httpx.Client(base_url=keyed_admin.url, headers={"X-API-Key": KEY_A}, timeout=60)
    b = httpx.Client(base_url=keyed_admin.url, headers={"X-API-Key": KEY_B}, timeout=60)
    started: list[tuple[httpx.Client, str]] = []
    try:
        parent = _start(a, "python:3.11")
        assert parent["status"] == "Success", parent
        started.append((a, parent["result"]["sandbox_id"]))
        _running(a, parent["result"]["sandbox_id"])
        body = {"sandbox_id": parent["result"]["sandbox_id"], "image_tag": tag}
        assert (
            a.post(f"{P}/commit", json={**body, "username": "", "password": ""}).json()["status"]
            == "Success"
        )
        done = eventually(
            lambda: a.get(f"{P}/commit/{parent['result']['sandbox_id']}").json()["result"],
            until=lambda s: s["phase"] != "RUNNING",
            what="the commit done",
            timeout=120,
            interval=0.2,
        )
        assert done["phase"] == "SUCCEEDED", done

        other = _start(b, tag)
        if other["status"] == "Success":
            started.append((b, other["result"]["sandbox_id"]))
        assert other["status"] == "Failed", other
        assert "no such image" in str(other["error"]), other
        assert "'a'" not in str(other["error"]), other  # not saying whose

        own = _start(a, tag)
        assert own["status"] == "Success", own
        started.append((a, own["result"]["sandbox_id"]))
        assert _running(a, own["result"]["sandbox_id"])["state"] == "running"
    finally:
        for http, sandbox_id in started:
            http.post(f"{P}/stop", json={"sandbox_id": sandbox_id})
        a.close()
        b.close()
        try:
            docker_client.images.remove(tag, force=True)
        except Exception:  # noqa: BLE001 - not made
            pass
