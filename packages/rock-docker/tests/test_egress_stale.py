"""A container's egress rules are keyed by its address; a container removed in the background
(or by another process) can leave them on the host for a moment, and Docker hands its address
to the next container. That container must not be held to the old one's policy: its start
drops another unit's rules keyed by its address, before its rocklet is asked anything."""

from __future__ import annotations

import subprocess
import threading
from typing import Any

import pytest

from rock_core.egress import EgressPolicy
from rock_core.models import SandboxSpec
from rock_core.sizes import MiB
from rock_core.testing import unique_sandbox_id
from rock_docker import DockerRuntime
from rock_docker._firewall import Firewall

from .conftest import IMAGE

pytestmark = [pytest.mark.anyio, pytest.mark.docker]


@pytest.fixture
def anyio_backend():
    return "asyncio"


def _rules_of(key: str) -> list[str]:
    saved = subprocess.run(
        ["iptables-save", "-t", "filter"], capture_output=True, text=True, check=True
    ).stdout
    return [line for line in saved.splitlines() if key[:16] in line]


@pytest.fixture
def one_address_network(docker_client: Any, run_labels: Any) -> Any:
    """A bridge with room for one container: the next container gets the last one's address."""
    network = docker_client.networks.create(
        f"rock-test-one-{threading.get_native_id()}",
        ipam={"Config": [{"Subnet": "198.18.78.0/30"}]},
        labels=run_labels,
    )
    try:
        yield network
    finally:
        network.remove()


async def test_a_new_container_on_an_address_whose_old_rules_were_left_is_not_held_by_them(
    docker_client: Any, run_labels: Any, one_address_network: Any
) -> None:
    old = docker_client.containers.run(
        IMAGE, ["sleep", "300"], detach=True, labels=run_labels,
        network=one_address_network.name, cap_drop=["NET_RAW"],
    )  # fmt: skip
    old.reload()
    was = old.attrs["NetworkSettings"]["Networks"][one_address_network.name]["IPAddress"]
    Firewall((), 30.0).apply(docker_client.api, old.id, EgressPolicy.deny_all())  # old process
    old.remove(force=True)  # gone, its rules not yet: a removal still in the background
    assert _rules_of(old.id)
    runtime = DockerRuntime(network=one_address_network.name)  # a process knowing no rule
    spec = SandboxSpec(
        image=IMAGE, memory=256 * MiB, cpus=0.5, sandbox_id=unique_sandbox_id("stale")
    )
    handle = await runtime.create(
        spec, labels={**run_labels, "rock.sandbox_id": spec.sandbox_id}, rocklet_token="t"
    )
    try:
        await runtime.start(handle)
        new = docker_client.api.inspect_container(handle.unit_id)
        address = new["NetworkSettings"]["Networks"][one_address_network.name]["IPAddress"]
        assert address == was
        assert _rules_of(old.id) == []  # the new container is not refused as the old one was
        assert _rules_of(handle.unit_id) == []  # and has none of its own (no policy)
    finally:
        await runtime.remove(handle)
        await runtime.aclose()
        Firewall((), 30.0).drop(old.id)  # whatever the test left
