"""Fixtures for rock-nomad's tests: the local Docker engine and the test image.

The stand-in Nomad server runs every task as a real container, so these tests need a Docker
engine and ``rock-test/python:3.11`` (``make test`` provides both: scripts/ensure-docker.sh,
scripts/ensure-test-images.sh).
"""

from __future__ import annotations

import docker
import docker.errors
import pytest

IMAGE = "rock-test/python:3.11"


@pytest.fixture(scope="session")
def docker_client():
    """A docker SDK client for the local engine; fails with the fix when no engine answers."""
    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        pytest.fail(f"no Docker engine answers ({exc}); `make test` starts one (scripts/ensure-docker.sh)")
    try:
        client.images.get(IMAGE)
    except docker.errors.ImageNotFound:
        pytest.fail(f"image {IMAGE} is missing; `make test` builds it (scripts/ensure-test-images.sh)")
    yield client
    client.close()
