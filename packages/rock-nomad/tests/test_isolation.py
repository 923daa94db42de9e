"""Sandboxes on Nomad are kept apart as on Docker (issue #22 point 8), replayed as an attacker
would, through rock's engine on a stand-in Nomad whose tasks are real containers:

- from inside one sandbox, another sandbox's service on its node (its container's address,
  port 8080) cannot be reached, while that service answers inside its own sandbox;
- nothing of a sandbox is published on its node's address but the rocklet, which refuses a
  caller without the sandbox's secret: port 8080 is not there, and ``port_mapping[8080]`` is
  the engine's own forward on 127.0.0.1, through the rocklet;
- a node nobody prepared for rock (no isolated network) gets no sandbox, and says why;
- ``network_group`` is refused at start, naming the field and the runtime.

The stand-in gives each node Docker's stock ``bridge`` (containers on it may connect to each
other, as on a Nomad client with Docker's defaults) and the network ``deploy/nomad/`` makes
(``enable_icc=false``), each a real Docker network of that node.
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest

from rock_core.actions import Command, SandboxStartRequest
from rock_core.errors import InvalidParameter, RockError
from rock_core.rocklet.server import TOKEN_HEADER
from rock_core.states import State
from rock_nomad.testing import StandInNomad
from rock_nomad.testing.fixtures import stand_in_nomad_factory  # noqa: F401 - fixture

from .conftest import IMAGE

pytestmark = [pytest.mark.anyio, pytest.mark.docker]

SMALL = {"image": IMAGE, "memory": "256m", "cpus": 0.5, "disk": None}
#: A web server on every address of the sandbox, port 8080, serving a page only it has.
_SERVE = (
    "mkdir -p /srv && cd /srv && echo 'secret page of {name}' > index.html && "
    "(nohup python3 -m http.server 8080 --bind 0.0.0.0 >/tmp/web.log 2>&1 &) && echo started"
)
#: Connect to argv[1]:argv[2] and GET /; print the answer's first line, or why it failed.
_PROBE = """
import socket, sys
s = socket.socket()
s.settimeout(5)
try:
    s.connect((sys.argv[1], int(sys.argv[2])))
    s.sendall(b"GET /index.html HTTP/1.0\\r\\n\\r\\n")
    answer = b""
    while True:
        chunk = s.recv(4096)
        if not chunk:
            break
        answer += chunk
    print("answered", answer.decode(errors="replace").splitlines()[-1])
except OSError as exc:
    print("failed", type(exc).__name__, exc)
"""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _container(nomad: StandInNomad, job_id: str) -> Any:
    allocs = httpx.get(f"{nomad.address}/v1/job/{job_id}/allocations").json()
    running = [a for a in allocs if a["ClientStatus"] == "running"]
    assert len(running) == 1, allocs
    container = nomad.container_of(running[0]["ID"], "rocklet")
    assert container is not None
    return container


def _address_on_its_network(container: Any) -> str:
    networks = container.attrs["NetworkSettings"]["Networks"]
    addresses = [n["IPAddress"] for n in networks.values() if n.get("IPAddress")]
    assert len(addresses) == 1, networks
    return addresses[0]


async def _probe(engine: Any, sandbox_id: str, host: str, port: int) -> str:
    result = await engine.rocklet(sandbox_id).execute(
        Command(command=["python3", "-c", _PROBE, host, str(port)], timeout=30)
    )
    assert result.exit_code == 0, result.stderr
    return result.stdout.strip()


async def _serve(engine: Any, sandbox_id: str) -> None:
    started = await engine.rocklet(sandbox_id).execute(
        Command(command=["sh", "-c", _SERVE.format(name=sandbox_id)])
    )
    assert started.exit_code == 0, started.stderr


async def _answered_inside(engine: Any, sandbox_id: str, host: str) -> str:
    """The sandbox's own service, asked from inside it at ``host`` (retried while it starts)."""
    for _ in range(100):
        seen = await _probe(engine, sandbox_id, host, 8080)
        if seen.startswith("answered"):
            return seen
    raise AssertionError(f"the web server of {sandbox_id} never answered at {host}:8080: {seen}")


async def test_a_sandbox_cannot_reach_another_sandboxs_service(
    stand_in_nomad_factory, engine_on
) -> None:  # noqa: F811
    nomad = stand_in_nomad_factory(nodes=1)  # one node: both sandboxes on the same host's Docker
    async with engine_on(nomad) as engine:
        attacker = (await engine.start(SandboxStartRequest(**SMALL))).record
        victim = (await engine.start(SandboxStartRequest(**SMALL))).record
        assert attacker.host_name == victim.host_name
        await _serve(engine, victim.sandbox_id)
        victim_ip = _address_on_its_network(_container(nomad, victim.unit_id))
        # The victim's service answers on that address, inside the victim: it is there to reach.
        assert (await _answered_inside(engine, victim.sandbox_id, victim_ip)).endswith(
            f"secret page of {victim.sandbox_id}"
        )
        # From the attacker's sandbox, the same address and port: no connection; nor the
        # victim's rocklet (22555) on that address. Both probed at once (a dropped connection
        # waits out the probe's 5 s: once, not twice).
        seen: dict[int, str] = {}

        async def probe(port: int) -> None:
            seen[port] = await _probe(engine, attacker.sandbox_id, victim_ip, port)

        async with anyio.create_task_group() as tg:
            tg.start_soon(probe, 8080)
            tg.start_soon(probe, 22555)
        assert seen[8080].startswith("failed"), (
            f"a sandbox reached another sandbox's service on its node: {seen[8080]}"
        )
        assert seen[22555].startswith("failed"), (
            f"a sandbox reached another sandbox's rocklet on its node: {seen[22555]}"
        )
        for record in (attacker, victim):
            await engine.stop(record.sandbox_id)


async def test_only_the_rocklet_is_published_on_the_node_address(
    stand_in_nomad_factory, engine_on
) -> None:  # noqa: F811
    nomad = stand_in_nomad_factory(nodes=1)
    async with engine_on(nomad) as engine:
        status = await engine.start(SandboxStartRequest(**SMALL))
        record = status.record
        await _serve(engine, record.sandbox_id)
        await _answered_inside(engine, record.sandbox_id, "127.0.0.1")
        container = _container(nomad, record.unit_id)
        bindings = {
            port: found
            for port, found in (container.attrs["NetworkSettings"]["Ports"] or {}).items()
            if found
        }
        published = [
            (b["HostIp"], int(b["HostPort"])) for found in bindings.values() for b in found
        ]
        # Every port the node publishes for the sandbox, asked as anyone on the network would.
        async with httpx.AsyncClient(trust_env=False) as http:
            for host, port in published:
                try:
                    page = await http.get(f"http://{host}:{port}/index.html", timeout=10)
                except httpx.TransportError:
                    continue
                assert "secret page" not in page.text, (
                    f"the sandbox's 8080 is published on the node at {host}:{port}"
                )
        assert set(bindings) == {"22555/tcp"}, f"published on the node: {bindings}"
        [(host, port)] = published
        assert host == record.host_ip
        # The rocklet there refuses a caller without the sandbox's secret.
        async with httpx.AsyncClient(trust_env=False) as http:
            refused = await http.post(
                f"http://{host}:{port}/execute", json={"command": ["id"]}, timeout=10
            )
            assert refused.status_code == 401
            wrong = await http.post(
                f"http://{host}:{port}/execute",
                json={"command": ["id"]},
                headers={TOKEN_HEADER: "not-the-secret"},
                timeout=10,
            )
            assert wrong.status_code == 401
        # ROCK's port_mapping still has 8080 (and 22555 when the engine forwards it): the
        # engine's forwards on 127.0.0.1, carried through the rocklet; the page answers there.
        assert 8080 in record.port_mapping, record.port_mapping
        async with httpx.AsyncClient(trust_env=False) as http:
            page = await http.get(
                f"http://127.0.0.1:{record.port_mapping[8080]}/index.html", timeout=10
            )
            assert page.text == f"secret page of {record.sandbox_id}\n"
            if 22555 in record.port_mapping:
                alive = await http.get(
                    f"http://127.0.0.1:{record.port_mapping[22555]}/is_alive", timeout=10
                )
                assert alive.json()["is_alive"] is True
        await engine.stop(record.sandbox_id)


async def test_a_node_not_prepared_for_rock_gets_no_sandbox(
    stand_in_nomad_factory, engine_on
) -> None:  # noqa: F811
    """A node without the isolated network (and its meta) would put the sandbox on Docker's
    bridge among others: the job is never placed there, and the start says which setting and
    which node meta are missing."""
    nomad = stand_in_nomad_factory(nodes=2, node_networks={}, node_meta={})
    async with engine_on(nomad) as engine:
        with pytest.raises(RockError) as caught:
            await engine.start(SandboxStartRequest(**SMALL))
    message = str(caught.value)
    assert "${meta.rock_sandbox_network} = rock-sandboxes" in message, message
    assert (
        "filtered 2 node(s)" in message
        and "deploy/nomad" in message
        and "plugins.nomad.sandbox_network" in message
    )
    assert nomad.containers() == []


async def test_a_network_group_is_refused_naming_the_field_and_the_runtime(
    stand_in_nomad_factory, engine_on
) -> None:  # noqa: F811
    nomad = stand_in_nomad_factory(nodes=1)
    async with engine_on(nomad) as engine:
        with pytest.raises(InvalidParameter) as caught:
            await engine.start(SandboxStartRequest(**SMALL, network_group="team-a"))
        message = str(caught.value)
        assert "network_group" in message and "'nomad'" in message, message
        assert httpx.get(f"{nomad.address}/v1/jobs").json() == [], (
            "a refused sandbox's job was registered"
        )
        # The same request without the group starts.
        status = await engine.start(SandboxStartRequest(**SMALL))
        assert status.state is State.RUNNING
        await engine.stop(status.sandbox_id)
