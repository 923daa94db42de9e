"""Sandboxes cannot reach each other or take the host down (docs/security.md), against real containers.

Each test plays the hostile sandbox: it reads its own secret, probes its neighbours' addresses,
forks without end, or fills its disk, and checks that rock holds. Addressing another sandbox's
bridge address (or the bridge's gateway) from inside a sandbox happens here only to prove that
such a connection is refused.
"""

from __future__ import annotations

import json
import socket
import statistics
import time

import anyio
import httpx
import pytest

from rock_core.actions import Command, SandboxStartRequest
from rock_core.engine.config import EngineConfig
from rock_core.engine.manager import LABEL_SANDBOX_ID, SandboxManager
from rock_core.errors import InternalServerRockError, InvalidParameter
from rock_core.rocklet.server import TOKEN_ENV, TOKEN_HEADER
from rock_core.rocklet_client import RockletClient
from rock_core.states import State
from rock_core.tenancy import group_network_id
from rock_core.testing import eventually_async, eventually_empty

pytestmark = [pytest.mark.docker, pytest.mark.anyio]

IMAGE = "python:3.11"
SMALL = {"image": IMAGE, "memory": "256m", "cpus": 0.5}

# Connects to each (host, port) of argv[1] (JSON) from inside a sandbox and prints what happened.
# The connections are tried at the same time (a thread each): a dropped one waits out its 3 s
# once for all of them, not once each.
PROBE = """
import json, socket, sys, threading
out = {}
def connect(host, port):
    s = socket.socket()
    s.settimeout(3)
    try:
        s.connect((host, port))
        out["%s:%d" % (host, port)] = "connected"
    except OSError as exc:
        out["%s:%d" % (host, port)] = type(exc).__name__
    finally:
        s.close()
threads = [threading.Thread(target=connect, args=tuple(t)) for t in json.loads(sys.argv[1])]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(json.dumps(out))
"""


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
async def engine(docker_client):
    # forward_rocklet_port: these tests attack the 127.0.0.1 forward of each rocklet's port 22555
    # too (it exists only when the operator asks for it).
    config = EngineConfig(
        timer_interval=0.2,
        reconcile_interval=1.0,
        disk_check_interval=2.0,
        forward_rocklet_port=True,
    )
    async with SandboxManager(config) as manager:
        yield manager
    leftovers = eventually_empty(
        lambda: docker_client.containers.list(
            all=True, filters={"label": f"rock.engine_id={manager.engine_id}"}, ignore_removed=True
        )
    )
    assert leftovers == [], "closing the engine must remove its containers"


async def start(engine, **fields):
    started = await engine.start_async(SandboxStartRequest(**{**SMALL, **fields}))
    await engine.wait_until_running(started.sandbox_id, timeout=120)
    return started.sandbox_id


async def sh(engine, sandbox_id, script, timeout=60):
    return await engine.rocklet(sandbox_id).execute(
        Command(command=["sh", "-c", script], timeout=timeout)
    )


async def probe_from(engine, sandbox_id, targets):
    """``{"host:port": "connected" | error name}`` for connections opened inside ``sandbox_id``."""
    result = await engine.rocklet(sandbox_id).execute(
        Command(command=["python3", "-c", PROBE, json.dumps(targets)], timeout=60)
    )
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def container_of(docker_client, sandbox_id):
    (container,) = docker_client.containers.list(
        all=True, filters={"label": f"{LABEL_SANDBOX_ID}={sandbox_id}"}, ignore_removed=True
    )
    return container


def bridge_address(docker_client, sandbox_id):
    """``(the container's address, its network's gateway)`` on its Docker network."""
    networks = container_of(docker_client, sandbox_id).attrs["NetworkSettings"]["Networks"]
    ((name, settings),) = networks.items()
    return settings["IPAddress"], settings["Gateway"], name


# -- no path between sandboxes ------------------------------------------------------------------


async def test_a_sandbox_cannot_connect_to_another_by_its_address_or_through_the_host(
    engine, docker_client
):
    a = await start(engine)
    b = await start(engine)
    await sh(engine, b, "nohup python3 -m http.server 8080 >/dev/null 2>&1 &")
    b_ip, gateway, network = bridge_address(docker_client, b)
    a_ip, a_gateway, a_network = bridge_address(docker_client, a)
    assert network == a_network == engine.runtime.isolated_network and gateway == a_gateway
    options = docker_client.networks.get(network).attrs["Options"]
    assert options["com.docker.network.bridge.enable_icc"] == "false"
    b_ports = engine.get_record(b).port_mapping
    with socket.socket() as admin_like:  # a service on the host's loopback, like the admin
        admin_like.bind(("127.0.0.1", 0))
        admin_like.listen()
        host_port = admin_like.getsockname()[1]
        targets = [
            (b_ip, 22555),
            (b_ip, 8080),  # B's rocklet and app, directly
            (gateway, b_ports[22555]),
            (gateway, b_ports[8080]),  # B's published ports, through the host
            (gateway, host_port),  # a loopback service of the host
            ("127.0.0.1", b_ports[22555]),  # the sandbox's own loopback
        ]
        seen = await probe_from(engine, a, targets)
    assert all(outcome != "connected" for outcome in seen.values()), seen
    # B itself serves: the refusal is the network's doing, not a dead server.
    answer = await sh(
        engine,
        b,
        "python3 -c \"import urllib.request as u; print(u.urlopen('http://127.0.0.1:8080/').status)\"",
    )
    assert answer.stdout.strip() == "200"
    # ... and egress to the bridge's own address still works from B to A's side only through rock.
    assert a_ip != b_ip


async def test_sandboxes_of_one_network_group_reach_each_other_and_no_one_else(
    engine, docker_client
):
    server = await start(engine, network_group="pair-1")
    client = await start(engine, network_group="pair-1")
    outsider = await start(engine)
    await sh(engine, server, "nohup python3 -m http.server 8080 >/dev/null 2>&1 &")
    ip, _, network = bridge_address(docker_client, server)
    group_network = f"rock-group-{group_network_id(engine.get_record(server).spec)}"
    assert network == group_network  # named after the tenant (this engine's process) and the group
    assert engine.get_record(server).security["network"] == "group:pair-1"
    # By sandbox id as host name, on any port, from the same group.
    answer = await sh(
        engine,
        client,
        f"""python3 - <<'EOF'
import time, urllib.request
for _ in range(50):
    try:
        print(urllib.request.urlopen('http://{server}:8080/', timeout=2).status); break
    except OSError:
        time.sleep(0.1)
EOF""",
    )
    assert answer.stdout.strip() == "200", answer.stderr
    seen = await probe_from(engine, outsider, [(ip, 8080), (ip, 22555)])
    assert all(outcome != "connected" for outcome in seen.values()), seen
    for sandbox_id in (server, client):
        await engine.stop(sandbox_id)
    await anyio.sleep(0)

    def network_gone() -> bool:
        return not [
            n for n in docker_client.networks.list(names=[group_network]) if n.name == group_network
        ]

    await eventually_async(
        network_gone,
        what="the group's network gone with its last sandbox",
        timeout=30,
        interval=0.2,
    )


# -- the rocklet's secret -----------------------------------------------------------------------


async def test_a_rocklet_refuses_callers_without_its_own_secret(engine):
    a = await start(engine)
    b = await start(engine)
    record_a, record_b = engine.get_record(a), engine.get_record(b)
    assert (
        record_a.rocklet_token
        and record_b.rocklet_token
        and record_a.rocklet_token != record_b.rocklet_token
    )
    url = f"http://127.0.0.1:{record_b.port_mapping[22555]}"
    body = {"command": "cat /etc/hostname", "shell": True}
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        assert (await http.post("/execute", json=body)).status_code == 401
        assert (
            await http.post("/execute", json=body, headers={TOKEN_HEADER: record_a.rocklet_token})
        ).status_code == 401
        assert (await http.post("/read_file", json={"path": "/etc/hostname"})).status_code == 401
        live = await http.get("/is_alive")
        assert live.status_code == 200 and live.json() == {"is_alive": True, "message": ""}
        ok = await http.post("/execute", json=body, headers={TOKEN_HEADER: record_b.rocklet_token})
        assert ok.status_code == 200 and ok.json()["exit_code"] == 0
    # The secret is in no status, and the sandbox's commands do not inherit it.
    status = await engine.get_status(b)
    assert record_b.rocklet_token not in json.dumps(str(status))
    assert status.record.security["rocklet_auth"] is True
    env = await sh(engine, b, "env")
    assert TOKEN_ENV not in env.stdout and record_b.rocklet_token not in env.stdout


async def test_a_sandbox_that_knows_its_own_secret_gains_nothing_over_another(
    engine, docker_client
):
    """A reads its own secret (its init process's environment), then tries it on B's rocklet."""
    a = await start(engine)
    b = await start(engine)
    own = await sh(engine, a, f"tr '\\0' '\\n' < /proc/1/environ | sed -n 's/^{TOKEN_ENV}=//p'")
    secret = own.stdout.strip()
    assert secret == engine.get_record(a).rocklet_token  # it can, inside its own sandbox
    b_ip, _, _ = bridge_address(docker_client, b)
    seen = await probe_from(engine, a, [(b_ip, 22555)])
    assert seen[f"{b_ip}:22555"] != "connected"
    async with httpx.AsyncClient(timeout=30) as http:  # and even from where B is reachable
        client = RockletClient(
            http, "127.0.0.1", engine.get_record(b).port_mapping[22555], b, token=secret
        )
        with pytest.raises(InternalServerRockError, match="refused execute"):
            await client.execute(Command(command=["true"]))


# -- hardened defaults --------------------------------------------------------------------------


async def test_hardened_defaults_are_applied_and_shown_in_the_status(engine):
    sandbox_id = await start(engine)
    security = (await engine.get_status(sandbox_id)).record.security
    assert security["pids_limit"] == 4096 and security["no_new_privileges"] is True
    assert security["nofile_limit"] == 16384 and security["network"] == "isolated"
    assert "NET_RAW" not in security["capabilities"] and "SYS_ADMIN" not in security["capabilities"]
    seen = await sh(
        engine,
        sandbox_id,
        """
        grep NoNewPrivs /proc/self/status
        cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max
        ulimit -n
        python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)' 2>&1 | tail -1
    """,
    )
    lines = seen.stdout.splitlines()
    assert lines[0].split() == ["NoNewPrivs:", "1"]
    assert lines[1:3] == ["4096", "16384"]
    assert "PermissionError" in lines[3]


async def test_a_capability_is_added_only_when_asked_and_allowed(engine):
    sandbox_id = await start(engine, cap_add=["net_raw"])
    assert "NET_RAW" in engine.get_record(sandbox_id).security["capabilities"]
    raw = await sh(
        engine,
        sandbox_id,
        "python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP); print(\"raw ok\")'",
    )
    assert raw.stdout.strip() == "raw ok", raw.stderr
    with pytest.raises(
        InvalidParameter, match=r"cap_add: SYS_ADMIN may not be added here"
    ) as refused:
        await engine.start_async(SandboxStartRequest(**SMALL, cap_add=["SYS_ADMIN"]))
    assert getattr(refused.value, "field", None) == "cap_add"
    with pytest.raises(InvalidParameter, match=r"cap_add: unknown capability 'FLY'"):
        await engine.start_async(SandboxStartRequest(**SMALL, cap_add=["FLY"]))


async def test_a_fork_bomb_exhausts_only_its_own_sandbox(engine, docker_client):
    bombed = await start(engine, pids_limit=256)
    neighbour = await start(engine)

    async def echo_seconds() -> float:
        t0 = time.perf_counter()
        result = await engine.rocklet(neighbour).execute(
            Command(command=["echo", "hi"], timeout=30)
        )
        assert result.stdout == "hi\n"
        return time.perf_counter() - t0

    def bomb_pids() -> int:
        return container_of(docker_client, bombed).stats(stream=False)["pids_stats"]["current"]

    before = [await echo_seconds() for _ in range(10)]
    # Forks without end and keeps every child: it fills the quota and spins on failed forks.
    bomb = "while :; do sleep 1000 & done"
    await engine.rocklet(bombed).start_process(["sh", "-c", bomb])

    async def pids_of_the_bomb() -> int:
        current = await anyio.to_thread.run_sync(bomb_pids)
        assert current <= 256, current
        return current

    await eventually_async(
        pids_of_the_bomb,
        until=lambda current: current >= 250,
        what="the bomb filling its quota",
        timeout=120,
        interval=0.5,
    )
    during = [await echo_seconds() for _ in range(10)]
    status_times = []
    for _ in range(10):
        t0 = time.perf_counter()
        await engine.get_status(neighbour)
        status_times.append(time.perf_counter() - t0)
    print(
        f"echo p50 before {statistics.median(before) * 1000:.1f} ms, during the bomb "
        f"{statistics.median(during) * 1000:.1f} ms; get_status p50 {statistics.median(status_times) * 1000:.2f} ms"
    )
    # Answering, not starved: every echo of the neighbour above answered (inside its own timeout)
    # while the bomb held its sandbox's quota, as it still does now.
    assert await anyio.to_thread.run_sync(bomb_pids) >= 250
    t0 = time.perf_counter()
    await engine.stop(bombed)
    assert engine.get_record(bombed).state in (State.STOPPED, State.DELETED)
    await eventually_async(
        lambda: (
            not docker_client.containers.list(
                all=True, filters={"label": f"{LABEL_SANDBOX_ID}={bombed}"}, ignore_removed=True
            )
        ),
        what="the bombed sandbox's container removed",
        interval=0.1,
    )
    print(f"the bombed sandbox was stopped and removed in {time.perf_counter() - t0:.2f} s")


# -- disk ---------------------------------------------------------------------------------------


async def test_a_sandbox_past_its_disk_limit_is_stopped_with_its_files_kept(engine, docker_client):
    sandbox_id = await start(engine, disk="50m")
    if not any(note.startswith("disk limit") for note in engine.get_record(sandbox_id).notes):
        # The storage driver enforces the limit itself: the write fails instead.
        failed = await sh(
            engine, sandbox_id, "head -c 157286400 /dev/zero > /root/fill", timeout=120
        )
        assert failed.exit_code != 0
        return
    t0 = time.monotonic()
    await sh(
        engine, sandbox_id, "head -c 157286400 /dev/zero > /root/fill && sync", timeout=120
    )  # 150 MiB, 3x
    written = time.monotonic()
    # The disk monitor (a sample every 2 s here) stops it; how soon is the bench's to measure.
    await eventually_async(
        lambda: engine.get_record(sandbox_id).state is not State.RUNNING,
        what="the stop past the disk limit",
        interval=0.2,
    )
    stopped = time.monotonic()
    record = engine.get_record(sandbox_id)
    assert record.state is State.STOPPED
    assert record.reason.startswith("disk limit exceeded"), record.reason
    print(
        f"wrote 150 MiB in {written - t0:.1f} s; stopped {stopped - written:.1f} s after the write ended"
    )
    # The record turns stopped as the container is told to stop.
    container = await eventually_async(
        lambda: container_of(docker_client, sandbox_id),
        until=lambda container: container.status == "exited",
        what="the container exited",
        interval=0.2,
    )
    assert any(change["Path"] == "/root/fill" for change in container.diff())
    assert record.auto_transition_state is State.DELETED
    assert (record.auto_transition_time - record.stop_time).total_seconds() >= 3600 - 1
