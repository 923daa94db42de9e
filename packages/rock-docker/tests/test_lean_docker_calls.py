"""A start's create and start go over rock-docker's lean client (rock_docker._raw_api), not the
docker SDK; Docker's refusals must reach rock exactly as the SDK's did: the same exception
class, status and Docker's own words, so a user sees the same rock errors (no such image, a
name in use, settings refused, no such container)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import docker
import docker.errors
import pytest

from rock_core.errors import (
    InvalidParameter,
    RuntimeFailure,
    SandboxAlreadyExists,
    SandboxNotFound,
)
from rock_docker._errors import translate
from rock_docker._raw_api import RawDocker, close_client, lean

from .conftest import IMAGE

pytestmark = [pytest.mark.docker]


def _refusal(call: Callable[[], Any]) -> docker.errors.APIError:
    with pytest.raises(docker.errors.APIError) as caught:
        call()
    return caught.value


def _same(sdk: docker.errors.APIError, raw: docker.errors.APIError) -> None:
    assert type(raw) is type(sdk)
    assert raw.status_code == sdk.status_code
    assert raw.explanation == sdk.explanation


@pytest.fixture
def api(docker_client):
    api = docker_client.api
    assert lean(api) is not None, "the test engine is on a unix socket"
    return api


def test_a_missing_image_is_refused_as_the_docker_sdk_refuses_it(api, run_labels):
    image = f"rock-test/absent-{uuid.uuid4().hex[:8]}:1"
    kwargs = {"image": image, "command": ["true"], "labels": run_labels}
    sdk = _refusal(lambda: api.create_container(name=f"rock-lean-{uuid.uuid4().hex}", **kwargs))
    raw = _refusal(
        lambda: lean(api).create_container(
            api,
            name=f"rock-lean-{uuid.uuid4().hex}",
            host_config=api.create_host_config(),
            **kwargs,
        )
    )
    _same(sdk, raw)
    assert isinstance(raw, docker.errors.ImageNotFound)


def test_a_name_in_use_is_a_sandbox_that_already_exists(api, run_labels):
    name = f"rock-lean-{uuid.uuid4().hex}"
    kwargs = {"image": IMAGE, "command": ["true"], "labels": run_labels}
    raw = lean(api)
    first = raw.create_container(api, name=name, host_config=api.create_host_config(), **kwargs)
    try:
        sdk_error = _refusal(lambda: api.create_container(name=name, **kwargs))
        raw_error = _refusal(
            lambda: raw.create_container(
                api, name=name, host_config=api.create_host_config(), **kwargs
            )
        )
        _same(sdk_error, raw_error)
        error = translate(raw_error, sandbox_id=name, attempted="create")
        assert isinstance(error, SandboxAlreadyExists)
    finally:
        api.remove_container(first["Id"], force=True, v=True)


def test_settings_docker_refuses_are_an_invalid_parameter(api, run_labels):
    kwargs = {"image": IMAGE, "command": ["true"], "labels": run_labels}
    host = api.create_host_config(mem_limit=1024)  # below Docker's 6 MiB minimum
    raw = _refusal(
        lambda: lean(api).create_container(
            api, name=f"rock-lean-{uuid.uuid4().hex}", host_config=host, **kwargs
        )
    )
    sdk = _refusal(
        lambda: api.create_container(
            name=f"rock-lean-{uuid.uuid4().hex}", host_config=host, **kwargs
        )
    )
    _same(sdk, raw)
    assert isinstance(translate(raw, sandbox_id="x", attempted="create"), InvalidParameter)


def test_starting_a_missing_container_is_a_sandbox_not_found(api):
    sdk = _refusal(lambda: api.start("rock-lean-no-such-container"))
    raw = _refusal(lambda: lean(api).start("rock-lean-no-such-container"))
    _same(sdk, raw)
    error = translate(raw, sandbox_id="rock-lean-no-such-container", attempted="start")
    assert isinstance(error, SandboxNotFound)


def test_a_created_container_starts_and_its_connection_serves_the_next_calls(api, run_labels):
    raw = lean(api)
    made = [
        raw.create_container(
            api,
            name=f"rock-lean-{uuid.uuid4().hex}",
            host_config=api.create_host_config(mem_limit="64m"),
            image=IMAGE,
            command=["sleep", "30"],
            labels=run_labels,
            environment={"ROCK_LEAN": "1"},
        )["Id"]
        for _ in range(3)
    ]
    try:
        for container in made:
            raw.start(container)
            info = api.inspect_container(container)
            assert info["State"]["Running"]
            assert "ROCK_LEAN=1" in info["Config"]["Env"]
            assert info["HostConfig"]["Memory"] == 64 * 1024 * 1024
    finally:
        for container in made:
            api.remove_container(container, force=True, v=True)


def test_an_engine_that_cannot_be_reached_is_a_runtime_failure(tmp_path):
    raw = RawDocker(str(tmp_path / "no-docker.sock"), "1.41", 5)
    with pytest.raises(Exception) as caught:
        raw.start("anything")
    error = translate(caught.value, sandbox_id="s", attempted="start")
    assert isinstance(error, RuntimeFailure)
    assert "cannot reach the Docker engine" in error.message


def test_closing_the_client_closes_the_lean_connections():
    client = docker.from_env()
    raw = lean(client.api)
    assert raw is not None
    with pytest.raises(docker.errors.NotFound):
        raw.start("rock-lean-no-such-container")
    assert raw._idle
    close_client(client)
    assert not raw._idle


def test_docker_py_still_has_the_proxy_settings_the_lean_create_applies(api):
    """The lean create puts docker-py's proxy settings (``~/.docker/config.json``'s proxies) in
    the container's environment as the SDK's create does, through the SDK's private
    ``_proxy_configs`` (only ``_raw_api`` uses it). A docker-py without it is called the SDK's
    way; this test names the release that dropped it."""
    assert hasattr(api, "_proxy_configs") and hasattr(
        api._proxy_configs, "inject_proxy_environment"
    ), f"docker-py {docker.__version__} has no APIClient._proxy_configs.inject_proxy_environment"
