"""A tenant names the image it starts by name, never by Docker's image id: Docker takes any
unique prefix of an id (two hex digits may do), so a key could otherwise start a sandbox from an
image only another tenant has, such as its snapshots (``rock-snapshot:<hex>``, whose ids are
there to be guessed), and read its files. A real admin with API keys on Docker."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from .test_e2b_sdk import KEY_B, keyed_admin  # noqa: F401 - fixture

pytestmark = [pytest.mark.docker]


@pytest.mark.parametrize("form", ["prefix", "sha256", "snapshot repository"])
def test_a_tenant_cannot_start_an_image_named_by_its_id_or_rocks_snapshot_repository(
    keyed_admin: Any, docker_client: Any, form: str
) -> None:
    image_id = docker_client.images.get("python:3.11").id  # sha256:<64 hex>
    image = {
        "prefix": image_id.removeprefix("sha256:")[:8],
        "sha256": image_id,
        "snapshot repository": "rock-snapshot:0123456789abcdef0123456789abcdef",
    }[form]
    with httpx.Client(base_url=keyed_admin.url, headers={"X-API-Key": KEY_B}) as http:
        answer = http.post(
            "/apis/envs/sandbox/v1/start_async",
            json={"image": image, "memory": "256m", "cpus": 0.5},
        ).json()
        if answer["status"] == "Success":
            sandbox_id = answer["result"]["sandbox_id"]
            http.post("/apis/envs/sandbox/v1/stop", json={"sandbox_id": sandbox_id})
    assert answer["status"] == "Failed", answer
    assert "by name" in str(answer["error"]), answer
