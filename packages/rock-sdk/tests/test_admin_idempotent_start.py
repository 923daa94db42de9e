"""A start is never duplicated (issue #24 point 4): the admin's ``Idempotency-Key`` header, over a
real socket with real Docker sandboxes, and the SDK sending a start again to the next admin URL.

A start with a key the tenant used before answers the first start's sandbox instead of making
another; two tenants' equal keys never meet; a bad key is refused naming the header. The SDK's
RemoteDriver sends a fresh key with each start, so a start whose answer was lost (the connection
dropped after the admin took it) moves on to the next URL and still makes one sandbox: a small
proxy in front of the real admin forwards each request, reads the admin's answer, and closes the
client's connection without passing it on.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from rock.admin.auth import hash_key
from rock.sdk._drivers.remote import RemoteDriver
from rock.sdk.sandbox.client import Sandbox
from rock.sdk.sandbox.config import SandboxConfig
from rock_core.actions import SandboxStartRequest
from rock_core.testing.faulty_http import LosingProxy

from .conftest import SMALL, containers_of, unique_id

pytestmark = [pytest.mark.docker]

PREFIX = "/apis/envs/sandbox/v1"
WIRE_SMALL = {"image": "python:3.11", "memory": "256m", "cpus": 0.5}
KEY_A = "key-a-" + uuid.uuid4().hex
KEY_B = "key-b-" + uuid.uuid4().hex


@pytest.fixture(scope="module")
def keyed_admin(
    tmp_path_factory: pytest.TempPathFactory, docker_client: Any, admin_launcher: Any
) -> Iterator[Any]:
    """An admin with two tenants' keys, ``team-a`` and ``team-b``."""
    launch_admin, stop_admin = admin_launcher
    config = (
        "[admin]\napi_keys = [\n"
        f'  {{ tenant = "team-a", sha256 = "{hash_key(KEY_A)}" }},\n'
        f'  {{ tenant = "team-b", sha256 = "{hash_key(KEY_B)}" }},\n'
        "]\n"
    )
    server = launch_admin(tmp_path_factory.mktemp("admin-idempotent"), config=config)
    try:
        yield server
    finally:
        stop_admin(server, docker_client)


def _client(admin: Any, key: str) -> httpx.Client:
    return httpx.Client(base_url=admin.url, timeout=180, headers={"X-API-Key": key})


def _start(http: httpx.Client, route: str, key: str | None, **body: Any) -> dict[str, Any]:
    headers = {} if key is None else {"Idempotency-Key": key.encode("latin-1")}
    response = http.post(f"{PREFIX}/{route}", json={**WIRE_SMALL, **body}, headers=headers)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def _started(http: httpx.Client, route: str, key: str | None, **body: Any) -> dict[str, Any]:
    answer = _start(http, route, key, **body)
    assert answer["status"] == "Success", answer
    result: dict[str, Any] = answer["result"]
    return result


def _stop(http: httpx.Client, *sandbox_ids: str) -> None:
    for sandbox_id in sandbox_ids:
        http.post(f"{PREFIX}/stop", json={"sandbox_id": sandbox_id})


def test_two_starts_with_one_key_make_one_sandbox_and_the_same_answer(
    keyed_admin: Any, docker_client: Any
) -> None:
    key = "job-7-" + uuid.uuid4().hex
    with _client(keyed_admin, KEY_A) as http_a, _client(keyed_admin, KEY_B) as http_b:
        plain: list[str] = []
        other: dict[str, Any] = {}
        first = _started(http_a, "start", key)
        second = _started(http_a, "start", key)
        third = _started(http_a, "start_async", key)
        assert first == second == third
        sandbox_id = first["sandbox_id"]
        try:
            assert len(containers_of(docker_client, sandbox_id)) == 1
            # Another tenant's key of the same text: its own sandbox.
            other = {"sandbox_id": _started(http_b, "start_async", key)["sandbox_id"]}
            assert other["sandbox_id"] != sandbox_id
            # Without the header nothing changes: each start is a new sandbox.
            plain += [_started(http_a, "start_async", None)["sandbox_id"] for _ in range(2)]
            assert len({sandbox_id, other["sandbox_id"], *plain}) == 4
            listed = http_a.get(f"{PREFIX}/sandboxes").json()["result"]["items"]
            assert sorted(item["sandbox_id"] for item in listed) == sorted([sandbox_id, *plain])
        finally:
            _stop(http_a, sandbox_id, *plain)
            _stop(http_b, *other.values())


def test_a_start_naming_its_id_is_answered_once_per_key(
    keyed_admin: Any, docker_client: Any
) -> None:
    sandbox_id = unique_id("idem")
    with _client(keyed_admin, KEY_A) as http_a, _client(keyed_admin, KEY_B) as http_b:
        first = _started(http_a, "start_async", "k-1", sandbox_id=sandbox_id)
        try:
            # The repeat through /start waits until the one sandbox runs.
            assert _started(http_a, "start", "k-1", sandbox_id=sandbox_id) == first
            # Another key, or none: another start, refused as before; another tenant learns only
            # that the id is taken (the admin's tenancy rule), with or without the key.
            cases = [
                (http_a, "k-2", f"Sandbox {sandbox_id} already exists"),
                (http_a, None, f"Sandbox {sandbox_id} already exists"),
                (http_b, "k-1", f"sandbox id {sandbox_id!r} is taken"),
            ]
            for http, key, why in cases:
                refused = _start(http, "start_async", key, sandbox_id=sandbox_id)
                assert refused["status"] == "Failed"
                assert why in refused["error"] and "team-a" not in refused["error"]
            assert len(containers_of(docker_client, sandbox_id)) == 1
        finally:
            _stop(http_a, sandbox_id)


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        ("", "a blank key"),
        ("k" * 201, "at most 200 characters, got 201"),
        ("clé", "printable ASCII characters only"),
    ],
)
def test_a_bad_idempotency_key_is_refused_naming_the_header(
    keyed_admin: Any, key: str, reason: str
) -> None:
    with _client(keyed_admin, KEY_A) as http_a:
        for route in ("start", "start_async"):
            refused = _start(http_a, route, key)
            assert refused["status"] == "Failed", refused
            assert refused["message"] == "invalid parameter"
            assert refused["error"].startswith(f"invalid parameter: Idempotency-Key: {reason}")
        assert http_a.get(f"{PREFIX}/sandboxes").json()["result"]["items"] == []


# -- the SDK: a start whose answer was lost moves on to the next admin ----------------------------


@pytest.fixture
def losing(admin: Any) -> Iterator[LosingProxy]:
    proxy = LosingProxy(admin.url)
    yield proxy
    proxy.close()


@pytest.mark.anyio
async def test_a_start_whose_answer_is_lost_moves_on_and_makes_one_sandbox(
    admin: Any, losing: LosingProxy, docker_client: Any
) -> None:
    sandbox = Sandbox(SandboxConfig(**SMALL, base_url=[losing.url, admin.url]))
    await sandbox.start()
    try:
        # The admin took the start through the proxy; the SDK sent it again, with the same key,
        # and the second URL (the same admin) answered the first start's sandbox.
        assert losing.seen, "the start went through the proxy first"
        assert len({r.headers["idempotency-key"] for r in losing.seen}) == 1
        assert {answer["result"]["sandbox_id"] for answer in losing.answers} == {sandbox.sandbox_id}
        assert sandbox._get_driver().base_url == admin.url
        assert len(containers_of(docker_client, sandbox.sandbox_id)) == 1
        assert (await sandbox.arun("echo one")).output.strip() == "one"
    finally:
        await sandbox.stop()


@pytest.mark.anyio
async def test_a_start_naming_no_id_whose_answer_is_lost_makes_one_sandbox(
    admin: Any, losing: LosingProxy, docker_client: Any
) -> None:
    driver = RemoteDriver([losing.url, admin.url])
    started = await driver.start_async(SandboxStartRequest(**WIRE_SMALL))
    sandbox_id = started.sandbox_id
    assert sandbox_id is not None
    try:
        assert len(losing.answers) >= 1
        assert {answer["result"]["sandbox_id"] for answer in losing.answers} == {sandbox_id}
        await driver.wait_until_running(sandbox_id, timeout=120)
        assert len(containers_of(docker_client, sandbox_id)) == 1
        # A second start is another start: a new key, a new sandbox.
        other = await driver.start_async(SandboxStartRequest(**WIRE_SMALL))
        assert other.sandbox_id != sandbox_id
        await driver.stop(str(other.sandbox_id))
    finally:
        await driver.stop(sandbox_id)
        await driver.aclose()
