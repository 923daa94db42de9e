"""Fixtures shared by rock's cross-package tests."""

from __future__ import annotations

import pytest

TEST_IMAGE = "python:3.11"


@pytest.fixture(scope="session")
def docker_client():
    """A docker SDK client for the local engine; fails with the fix when no engine answers."""
    docker = pytest.importorskip("docker", reason="the docker SDK is a dev dependency: run `make test`")
    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        pytest.fail(f"no Docker engine answers ({exc}); `make test` starts one (scripts/ensure-docker.sh)")
    try:
        client.images.get(TEST_IMAGE)
    except docker.errors.ImageNotFound:
        pytest.fail(f"image {TEST_IMAGE} is missing; `make test` builds it (scripts/ensure-test-images.sh)")
    yield client
    client.close()
