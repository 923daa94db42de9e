"""Several admin URLs (issue #24 point 4): the SDK moves to the next admin when one cannot be
reached, and repeats on another admin only the calls that are safe to repeat (a start, with its
Idempotency-Key, is).

Real parts: the suite's ``rock admin serve`` process, a closed port on 127.0.0.1 (a connection
that is never made), and a small TCP server that reads a request and drops the connection in the
middle of its answer (a request that may have reached an admin).
"""

from __future__ import annotations

import json
import socket
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from rock.sdk._drivers.remote import RemoteDriver, get_remote_driver
from rock.sdk.sandbox.client import Sandbox
from rock.sdk.sandbox.config import InvalidConfig, SandboxConfig
from rock_core.actions import Command
from rock_core.actions.commands import EXECUTE
from rock_core.errors import InternalServerRockError, InvalidParameter
from rock_core.states import State
from rock_core.testing.faulty_http import DroppingServer

from .conftest import SMALL, _rock_command, unique_id

pytestmark = pytest.mark.anyio


def _closed_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    return f"http://127.0.0.1:{port}"  # nothing listens there once the socket is closed


@pytest.fixture
def dropping() -> Iterator[DroppingServer]:
    server = DroppingServer()
    yield server
    server.close()


# -- reading the URLs ---------------------------------------------------------------------------


def test_one_url_a_comma_separated_string_or_a_list(monkeypatch: pytest.MonkeyPatch) -> None:
    assert SandboxConfig(base_url="http://127.0.0.1:8080").base_url == "http://127.0.0.1:8080"
    config = SandboxConfig(base_url=["http://a:8080/", "https://b:8080"])
    assert config.base_url == ["http://a:8080", "https://b:8080"]
    monkeypatch.setenv("ROCK_BASE_URL", "http://a:8080,http://b:8080")
    assert SandboxConfig().base_url == "http://a:8080,http://b:8080"
    driver = RemoteDriver(SandboxConfig().base_url or "")
    assert driver.base_urls == ("http://a:8080", "http://b:8080")
    assert driver.base_url == "http://a:8080"  # tried first until another answers
    assert get_remote_driver("http://a:8080,http://b:8080/") is get_remote_driver(
        ["http://a:8080", "http://b:8080"]
    )


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("http://a:8080,,http://b:8080", "an empty admin URL"),
        (["http://a:8080", ""], "an empty admin URL"),
        (["http://a:8080", "ftp://b:21"], "'ftp://b:21' is no http:// or https:// URL"),
        ("a:8080", "'a:8080' is no http:// or https:// URL"),
        (["http://a:8080", "http://a:8080/"], "'http://a:8080' is named twice"),
        ([], "expected at least one admin URL"),
        (5, "expected a URL or a list of URLs"),
    ],
)
def test_bad_values_are_refused_naming_the_field_and_value(value: Any, reason: str) -> None:
    with pytest.raises(InvalidConfig, match=f"^base_url: {reason}") as info:
        SandboxConfig(base_url=value)
    assert isinstance(info.value, InvalidParameter)
    assert (info.value.field, info.value.value) == ("base_url", value)


def test_a_bad_rock_base_url_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROCK_BASE_URL", "http://a:8080,http://a:8080")
    with pytest.raises(InvalidConfig, match="'http://a:8080' is named twice"):
        SandboxConfig()
    with pytest.raises(InvalidParameter, match="^base_url: an empty admin URL"):
        RemoteDriver("http://a:8080,")


async def test_when_every_admin_fails_the_error_lists_each() -> None:
    first, second = _closed_url(), _closed_url()
    driver = RemoteDriver([first, second])
    with pytest.raises(InternalServerRockError, match="no rock admin answered get_status") as info:
        await driver.get_status("sb1")
    assert f"{first}: rock admin at {first} is unreachable" in str(info.value)
    assert f"{second}: rock admin at {second} is unreachable" in str(info.value)


# -- against a real admin -----------------------------------------------------------------------


@pytest.mark.docker
async def test_a_dead_admin_first_start_commands_and_status_go_through_the_live_one(
    admin: Any, dropping: DroppingServer
) -> None:
    dead = _closed_url()
    sandbox = Sandbox(SandboxConfig(**SMALL, base_url=[dead, admin.url]))
    await sandbox.start()  # start_async was sent to the dead URL first, then to the live admin
    try:
        driver = sandbox._get_driver()
        assert isinstance(driver, RemoteDriver) and driver.base_url == admin.url
        assert (await sandbox.arun("echo through the live one")).output.strip() == (
            "through the live one"
        )
        assert (await sandbox.get_status()).state is State.RUNNING
        # A status read whose request may have reached an admin (the connection dropped
        # mid-answer) is safe to repeat: it moves on to the live admin.
        reader = RemoteDriver([dropping.url, admin.url])
        status = await reader.get_status(sandbox.sandbox_id)
        assert status.state is State.RUNNING and reader.base_url == admin.url
        # (The transport sends a GET twice to one admin that drops it, as before several URLs.)
        assert dropping.requests and all(
            r.line.startswith("GET /apis/envs/sandbox/v1/get_status?") for r in dropping.requests
        )
    finally:
        await sandbox.stop()


@pytest.mark.docker
async def test_a_start_that_may_have_reached_an_admin_moves_on_with_its_key(
    admin: Any, dropping: DroppingServer
) -> None:
    """A start carries an Idempotency-Key: the admin answers a repeated key with the first
    start's sandbox, so a start that may have reached an admin is safe to send to the next
    (test_admin_idempotent_start.py: the first admin took it, and one sandbox results)."""
    sandbox_id = unique_id("several-admins")
    sandbox = Sandbox(
        SandboxConfig(**SMALL, sandbox_id=sandbox_id, base_url=[dropping.url, admin.url])
    )
    await sandbox.start()
    try:
        assert {r.path for r in dropping.requests} == {"/apis/envs/sandbox/v1/start_async"}
        keys = {r.headers.get("idempotency-key") for r in dropping.requests}
        assert len(keys) == 1 and None not in keys  # one start, one key
        assert (await sandbox.get_status()).state is State.RUNNING
        # A command that may have reached an admin is not repeated: it raises naming that URL.
        dropping.requests.clear()
        runner = RemoteDriver([dropping.url, admin.url])
        with pytest.raises(
            InternalServerRockError, match=f"rock admin at {dropping.url} is unreachable"
        ) as info:
            await runner.call(sandbox_id, EXECUTE, Command(command=["echo", "once"]))
        assert "no rock admin answered" not in str(info.value)
        assert [(r.method, r.path) for r in dropping.requests] == [
            ("POST", "/apis/envs/sandbox/v1/execute")
        ]
    finally:
        await sandbox.stop()


@pytest.mark.docker
def test_the_cli_takes_several_admins_in_base_url(admin: Any) -> None:
    dead = _closed_url()
    listed = subprocess.run(
        [*_rock_command(), "sandbox", "list", "--json", "--base-url", f"{dead},{admin.url}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert listed.returncode == 0, listed.stderr
    assert "items" in json.loads(listed.stdout)  # the live admin answered
    twice = subprocess.run(
        [*_rock_command(), "sandbox", "list", "--base-url", f"{admin.url},{admin.url}/"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert twice.returncode != 0
    assert f"base_url: {admin.url!r} is named twice" in twice.stderr


def test_env_calls_go_to_the_first_of_several_admins() -> None:
    """rock.make and its kin read several admins as sandboxes do, and send env calls to the
    first (a make or a step is not safe to send to a second admin)."""
    from rock.sdk.envs._backend import RemoteBackend, backend_for

    for named in (
        "http://127.0.0.1:1/,http://127.0.0.1:2",
        ["http://127.0.0.1:1", "http://127.0.0.1:2"],
    ):
        backend = backend_for(named, api_key="k-several")
        assert isinstance(backend, RemoteBackend)
        assert backend.base_url == "http://127.0.0.1:1"
    with pytest.raises(InvalidParameter, match="base_url"):
        backend_for("http://127.0.0.1:1,http://127.0.0.1:1")
