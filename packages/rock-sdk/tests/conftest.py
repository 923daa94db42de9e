"""Fixtures of the SDK's tests: the real embedded engine on the local Docker engine, ``python:3.11``.

Sandboxes are small (``memory="512m", cpus=0.5``) and shared per module where a test does not
change the sandbox's lifecycle. At the end of the session the process-wide engine is closed and
no container made by this process may remain.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from rock.actions import CloseBashSessionRequest, CreateBashSessionRequest
from rock.sdk import close_embedded_engine, get_embedded_engine
from rock.sdk.sandbox.client import Sandbox
from rock.sdk.sandbox.config import SandboxConfig
from rock_core.engine.manager import LABEL_OWNER, process_owner
from rock_core.errors import SessionNotFound

IMAGE = "python:3.11"
SMALL: dict[str, Any] = {"image": IMAGE, "memory": "512m", "cpus": 0.5}


def unique_id(prefix: str = "rock-sdk") -> str:
    """A sandbox id no other test run will use."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def containers_of(docker_client: Any, sandbox_id: str) -> list[Any]:
    """Every container (running or not) of ``sandbox_id``, found by rock's label."""
    return docker_client.containers.list(all=True, filters={"label": f"rock.sandbox_id={sandbox_id}"})


def wait_for(predicate: Any, timeout: float = 30.0, interval: float = 0.1) -> None:
    """Poll ``predicate()`` until it is true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met within {timeout}s: {predicate}")
        time.sleep(interval)


@pytest.fixture(scope="session")
def small() -> dict[str, Any]:
    """The config fields of a small test sandbox (a fresh dict)."""
    return dict(SMALL)


@pytest.fixture(scope="session")
def new_id() -> Any:
    """``new_id(prefix)``: a unique sandbox id."""
    return unique_id


class _Containers:
    """``containers(sandbox_id)``: the containers of a sandbox, as Docker reports them;
    ``containers.gone(sandbox_id)``: wait until there are none (a stop removes the container
    in the background, so it may linger a moment); ``False`` after 30 s."""

    def __init__(self, docker_client: Any) -> None:
        self.docker_client = docker_client

    def __call__(self, sandbox_id: str) -> list[Any]:
        return containers_of(self.docker_client, sandbox_id)

    def gone(self, sandbox_id: str, timeout: float = 30.0) -> bool:
        deadline = time.monotonic() + timeout
        while self(sandbox_id):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True


@pytest.fixture(scope="session")
def containers(docker_client: Any) -> Any:
    """The sandbox's containers as Docker reports them (see :class:`_Containers`)."""
    return _Containers(docker_client)


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    """The SDK is asyncio code, as ROCK's is."""
    return "asyncio"


@pytest.fixture(scope="session")
def docker_client() -> Iterator[Any]:
    """A docker SDK client for the local engine (to check what really runs)."""
    docker = pytest.importorskip("docker", reason="the docker SDK is a dev dependency")
    client = docker.from_env()
    try:
        client.images.get(IMAGE)
    except docker.errors.ImageNotFound:
        pytest.fail(f"image {IMAGE} is missing; `make test` builds it (scripts/ensure-test-images.sh)")
    yield client
    client.close()


@pytest.fixture(scope="session")
def engine(docker_client: Any) -> Iterator[Any]:
    """The process-wide embedded engine; closed at the end, which must leave no container behind."""
    yield get_embedded_engine()
    close_embedded_engine()
    left = docker_client.containers.list(all=True, filters={"label": f"{LABEL_OWNER}={process_owner()}"})
    assert left == [], f"containers left behind by the SDK tests: {[c.name for c in left]}"


@pytest.fixture(scope="module")
async def sandbox(engine: Any) -> AsyncIterator[Any]:
    """A started small sandbox shared by the tests of one module."""
    sb = Sandbox(SandboxConfig(**SMALL))
    await sb.start()
    yield sb
    await sb.stop()


@pytest.fixture
async def session(sandbox: Any, request: pytest.FixtureRequest) -> AsyncIterator[str]:
    """A fresh bash session in the shared sandbox for one test."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    await sandbox.create_session(CreateBashSessionRequest(session=name))
    yield name
    try:
        await sandbox.close_session(CloseBashSessionRequest(session=name))
    except SessionNotFound:
        pass  # the test closed it itself
