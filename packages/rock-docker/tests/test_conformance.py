"""rock-core's runtime conformance suite, run against DockerRuntime on the local engine."""

from __future__ import annotations

import anyio
import pytest

from rock_core.runtime import UnitHandle
from rock_core.testing import RuntimeConformance
from rock_docker import DockerRuntime

from .conftest import IMAGE


class TestDockerRuntimeConformance(RuntimeConformance):
    """Every check of the suite, with ``docker kill`` / ``docker rm -f`` as the outside hand."""

    pytestmark = [pytest.mark.anyio, pytest.mark.docker]

    @pytest.fixture(scope="class")
    @classmethod
    async def runtime(cls, tmp_path_factory):
        async with DockerRuntime(
            rocklet_dir=tmp_path_factory.mktemp("rocklet"), publish_ports=False
        ) as runtime:
            yield runtime

    @pytest.fixture(scope="class")
    @classmethod
    def image(cls, docker_client):
        return IMAGE

    @pytest.fixture(scope="class")
    @classmethod
    def image_without_python(cls, no_python_image):
        return no_python_image

    @pytest.fixture(autouse=True)
    def _docker(self, docker_client):
        self.docker = docker_client

    async def kill_behind_back(self, handle: UnitHandle) -> None:
        await anyio.to_thread.run_sync(self.docker.api.kill, handle.unit_id)

    async def remove_behind_back(self, handle: UnitHandle) -> None:
        await anyio.to_thread.run_sync(
            lambda: self.docker.api.remove_container(handle.unit_id, force=True)
        )


class TestDockerRuntimePublishingConformance(TestDockerRuntimeConformance):
    """The same checks with ``publish_ports=True``: ports published by Docker, the rocklet on TCP."""

    @pytest.fixture(scope="class")
    @classmethod
    async def runtime(cls, tmp_path_factory):
        async with DockerRuntime(
            rocklet_dir=tmp_path_factory.mktemp("rocklet"), publish_ports=True
        ) as runtime:
            yield runtime
