"""rock-core's runtime conformance suite, run against NomadRuntime on a 3-node stand-in Nomad.

The outside hand: the stand-in's fault injection kills a task (``exit_task``), and a plain
``DELETE /v1/job/:id?purge=true`` removes a job behind the runtime's back.
"""

from __future__ import annotations

import io

import anyio
import httpx
import pytest

from rock_core.rocklet_delivery import prepare_rocklet
from rock_core.runtime import UnitHandle
from rock_core.testing import RuntimeConformance
from rock_nomad.runtime import NomadRuntime
from rock_nomad.testing import StandInNomad
from rock_nomad.testing.contract import ArtifactServer

from .conftest import IMAGE

NO_PYTHON_IMAGE = "rock-test/no-python:nomad"

pytestmark = pytest.mark.docker


class TestNomadRuntimeConformance(RuntimeConformance):
    """Every check of the suite that a Nomad unit can pass (no restart of a stopped unit, no
    assign, no snapshot, no watch: the suite skips them, saying so)."""

    pytestmark = [pytest.mark.anyio, pytest.mark.docker]
    #: The rocklet answers on its node's loopback address (127.0.0.2, ...), not 127.0.0.1.
    rocklet_host = None

    @pytest.fixture(scope="class")
    @classmethod
    def nomad(cls, docker_client):
        with StandInNomad(nodes=3) as nomad:
            yield nomad

    @pytest.fixture(scope="class")
    @classmethod
    async def runtime(cls, nomad, tmp_path_factory):
        served = tmp_path_factory.mktemp("rocklet")
        artifacts = ArtifactServer(served, "127.0.0.1")
        try:
            delivery = await anyio.to_thread.run_sync(lambda: prepare_rocklet(served, url=None))
            # Serve the file where the delivery says: <served>/<hash>/rocklet.pyz.
            url = f"{artifacts.url}/{delivery.path.parent.name}/{delivery.path.name}"
            async with NomadRuntime(address=nomad.address) as runtime:
                runtime.use_rocklet(
                    type(delivery)(path=delivery.path, sha256=delivery.sha256, url=url)
                )
                yield runtime
        finally:
            artifacts.close()

    @pytest.fixture(scope="class")
    @classmethod
    def image(cls, docker_client):
        return IMAGE

    @pytest.fixture(scope="class")
    @classmethod
    def image_without_python(cls, docker_client):
        dockerfile = f"FROM {IMAGE}\nRUN rm -f /usr/bin/python3* /usr/local/bin/python3* /usr/bin/python /usr/local/bin/python\n"
        docker_client.images.build(
            fileobj=io.BytesIO(dockerfile.encode()), tag=NO_PYTHON_IMAGE, rm=True, pull=False
        )
        return NO_PYTHON_IMAGE

    @pytest.fixture(autouse=True)
    def _nomad(self, nomad):
        self.nomad = nomad

    async def _alloc_id(self, handle: UnitHandle) -> str:
        async with httpx.AsyncClient(base_url=self.nomad.address) as http:
            allocs = (await http.get(f"/v1/job/{handle.unit_id}/allocations")).json()
        return max(allocs, key=lambda a: a["CreateIndex"])["ID"]

    async def kill_behind_back(self, handle: UnitHandle) -> None:
        alloc_id = await self._alloc_id(handle)
        await anyio.to_thread.run_sync(lambda: self.nomad.exit_task(alloc_id, 137))

    async def remove_behind_back(self, handle: UnitHandle) -> None:
        async with httpx.AsyncClient(base_url=self.nomad.address) as http:
            response = await http.delete(f"/v1/job/{handle.unit_id}", params={"purge": "true"})
            response.raise_for_status()


class TestNomadRuntimePollingConformance(TestNomadRuntimeConformance):
    """The same checks with ``event_stream = false``: each start follows its evaluation and
    allocation with blocking queries of its own instead of the shared event stream."""

    @pytest.fixture(scope="class")
    @classmethod
    async def runtime(cls, nomad, tmp_path_factory):
        served = tmp_path_factory.mktemp("rocklet")
        artifacts = ArtifactServer(served, "127.0.0.1")
        try:
            delivery = await anyio.to_thread.run_sync(lambda: prepare_rocklet(served, url=None))
            url = f"{artifacts.url}/{delivery.path.parent.name}/{delivery.path.name}"
            async with NomadRuntime(address=nomad.address, event_stream=False) as runtime:
                runtime.use_rocklet(
                    type(delivery)(path=delivery.path, sha256=delivery.sha256, url=url)
                )
                yield runtime
                assert runtime._feed is None or runtime._feed.frames == 0
        finally:
            artifacts.close()
