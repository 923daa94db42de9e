"""What DockerRuntime does on a real Docker engine beyond the conformance suite.

The settings Docker ends up with (ports on 127.0.0.1 only, memory == swap, CPU quota and
shares, the read-only rocklet mount, no privileges), the pull policies and registry
credentials, network modes, and the errors a user sees.
"""

from __future__ import annotations

import base64
import contextlib
import http.server as http_server
import threading
import uuid
from pathlib import Path

import anyio
import docker.errors
import pytest

from rock_core.actions import Command
from rock_core.errors import (
    ImagePullFailed,
    InvalidParameter,
    RuntimeFailure,
    SandboxAlreadyExists,
)
from rock_core.models import (
    PHASE_IMAGE_PULL,
    ROCKLET_PORT,
    PhaseStatus,
    PullPolicy,
    SandboxSpec,
    UnitState,
)
from rock_core.rocklet.server import TOKEN_HEADER
from rock_core.rocklet_client import RockletClient, new_http_client
from rock_core.sizes import GiB, MiB
from rock_core.testing import (
    PhaseLog,
    eventually_async,
    unique_sandbox_id,
    wait_for_rocklet,
    wait_for_unit,
)
from rock_core.testing.fixtures import rocklet_url
from rock_docker import DockerRuntime

from .conftest import IMAGE

pytestmark = [pytest.mark.anyio, pytest.mark.docker]


@pytest.fixture(scope="module")
def anyio_backend():
    return "asyncio"


@pytest.fixture(scope="module")
async def runtime(tmp_path_factory):
    async with DockerRuntime(rocklet_dir=tmp_path_factory.mktemp("rocklet")) as runtime:
        yield runtime


#: The rocklet secret of every container these tests make (the ``http`` fixture sends it).
TOKEN = "docker-runtime-test-token"


@pytest.fixture
async def http():
    async with new_http_client() as client:  # TCP, and the unix sockets rocklets listen on
        client.headers[TOKEN_HEADER] = TOKEN
        yield client


def spec(**fields) -> SandboxSpec:
    values = {
        "image": IMAGE,
        "memory": 256 * MiB,
        "cpus": 1.0,
        "disk": None,
        "sandbox_id": unique_sandbox_id("rockd"),
    }
    values.update(fields)
    return SandboxSpec(**values)


async def create(runtime, run_labels, the_spec=None, **kw):
    the_spec = the_spec or spec()
    kw.setdefault("rocklet_token", TOKEN)
    return await runtime.create(
        the_spec, labels={**run_labels, "rock.sandbox_id": the_spec.sandbox_id}, **kw
    )


async def container_doc(docker_client, handle):
    return await anyio.to_thread.run_sync(docker_client.api.inspect_container, handle.unit_id)


async def started(runtime, handle, http):
    await runtime.start(handle)
    status = await runtime.inspect(handle)
    await wait_for_rocklet(http, rocklet_url(status))
    return status


async def exec_in(docker_client, handle, argv):
    result = await anyio.to_thread.run_sync(
        lambda: docker_client.containers.get(handle.unit_id).exec_run(argv)
    )
    return result.exit_code, result.output.decode()


# -- what Docker is told ----------------------------------------------------------------------


async def test_container_settings(runtime, run_labels, docker_client):
    """Name, labels, env, command, limits, read-only rocklet mount, ports on 127.0.0.1, no privileges."""
    the_spec = spec(memory=512 * MiB, cpus=1.5, env={"GREETING": "hello rock"})
    handle = await create(runtime, run_labels, the_spec)
    doc = await container_doc(docker_client, handle)
    host, config = doc["HostConfig"], doc["Config"]
    assert doc["Name"] == f"/{the_spec.sandbox_id}"
    assert handle.sandbox_id == the_spec.sandbox_id
    socket_path = config["Labels"]["rock.docker.rocklet_socket"]
    assert config["Labels"] == {
        **run_labels,
        "rock.sandbox_id": the_spec.sandbox_id,
        "rock.docker.forward_ports": "22555,8080",
        "rock.docker.rocklet_socket": socket_path,
    }
    assert "GREETING=hello rock" in config["Env"]
    assert config["Cmd"][:2] == ["/bin/sh", "-c"]
    assert "exec python3 -I -S -c " in config["Cmd"][2]
    assert "/rock/rocklet.pyz --listen-fd-from /rock-run/handoff.sock --sandbox" in config["Cmd"][2]
    assert not config["Entrypoint"]
    assert host["Memory"] == host["MemorySwap"] == 512 * MiB
    assert host["NanoCpus"] == 1_500_000_000
    assert host["CpuShares"] == 0
    assert host["Privileged"] is False
    assert host["Init"] is True
    assert not host["PortBindings"]  # no docker-proxy: the engine forwards 22555 and 8080
    mounts = {m["Destination"]: (m["Type"], m["Source"], m["RW"]) for m in doc["Mounts"]}
    # Both mounts read-only; the rocklet's socket is outside the one at /rock-run.
    handoff_dir = Path(socket_path).parent / "handoff"
    assert mounts == {
        "/rock": ("bind", mounts["/rock"][1], False),
        "/rock-run": ("bind", str(handoff_dir), False),
    }


async def test_containers_are_hardened_and_say_how(runtime, run_labels, docker_client):
    """The secret in the environment, a pids limit, no-new-privileges, a reduced capability set,
    a nofile limit, and rock's isolated network; the handle's ``security`` says the same."""
    the_spec = spec(pids_limit=300, cap_add=("NET_RAW",))
    handle = await create(runtime, run_labels, the_spec, rocklet_token="s3cret-token")
    doc = await container_doc(docker_client, handle)
    host, config = doc["HostConfig"], doc["Config"]
    assert "ROCK_ROCKLET_TOKEN=s3cret-token" in config["Env"]
    assert "s3cret-token" not in str(config["Labels"]) and "s3cret-token" not in str(config["Cmd"])
    assert host["PidsLimit"] == 300
    assert host["SecurityOpt"] == ["no-new-privileges"]
    assert (
        host["CapDrop"] == ["ALL"]
        and "NET_RAW" in host["CapAdd"]
        and "SYS_ADMIN" not in host["CapAdd"]
    )
    assert host["Ulimits"] == [{"Name": "nofile", "Soft": 16384, "Hard": 16384}]
    assert host["NetworkMode"] == runtime.isolated_network in ("bridge", "rock-sandboxes")
    network = await anyio.to_thread.run_sync(
        docker_client.api.inspect_network, runtime.isolated_network
    )
    assert network["Options"]["com.docker.network.bridge.enable_icc"] == "false"
    security = dict(handle.security)
    assert set(security.pop("capabilities")) == set(host["CapAdd"])
    assert security == {
        "network": "isolated",
        "pids_limit": 300,
        "nofile_limit": 16384,
        "no_new_privileges": True,
        "rocklet_auth": True,
    }


async def test_an_isolated_network_is_made_without_inter_container_traffic(
    run_labels, docker_client, tmp_path
):
    """A named isolated network is created on first use with inter-container traffic disabled;
    Docker's default bridge is taken only when its engine disables that traffic itself."""
    name = f"rock-test-isolated-{unique_sandbox_id('n')[-8:]}"
    async with DockerRuntime(rocklet_dir=tmp_path / "rocklet", isolated_network=name) as runtime:
        handle = await create(runtime, run_labels)
        try:
            doc = await container_doc(docker_client, handle)
            assert doc["HostConfig"]["NetworkMode"] == name
            network = await anyio.to_thread.run_sync(docker_client.api.inspect_network, name)
            assert network["Options"]["com.docker.network.bridge.enable_icc"] == "false"
            assert network["Labels"]["rock.network"] == "isolated"
            assert handle.security["network"] == "isolated"
        finally:
            await runtime.remove(handle)
            await anyio.to_thread.run_sync(docker_client.api.remove_network, name)
    bridge = await anyio.to_thread.run_sync(docker_client.api.inspect_network, "bridge")
    icc = bridge["Options"].get("com.docker.network.bridge.enable_icc", "true") != "false"
    async with DockerRuntime(
        rocklet_dir=tmp_path / "rocklet", isolated_network="bridge"
    ) as runtime:
        if icc:
            with pytest.raises(
                InvalidParameter,
                match="isolated_network: Docker's default bridge lets containers connect",
            ):
                await create(runtime, run_labels)
        else:
            handle = await create(runtime, run_labels)
            assert handle.security["network"] == "isolated"
            await runtime.remove(handle)


async def test_a_unit_needs_a_secret(runtime, run_labels):
    with pytest.raises(InvalidParameter, match="rocklet_token"):
        await create(runtime, run_labels, rocklet_token="")


async def test_limit_cpus_gives_shares_and_a_ceiling(runtime, run_labels, docker_client):
    """With ``limit_cpus``, ``cpus`` becomes CPU shares (x1024) and ``limit_cpus`` the quota (ROCK's way)."""
    handle = await create(runtime, run_labels, spec(cpus=0.5, limit_cpus=2.0))
    host = (await container_doc(docker_client, handle))["HostConfig"]
    assert host["CpuShares"] == 512
    assert host["NanoCpus"] == 2_000_000_000


async def test_more_cpus_than_the_host_has_is_lowered_with_a_note(
    runtime, run_labels, docker_client
):
    """ROCK's default of 2 CPUs must still start on a smaller host: the quota becomes the whole host."""
    host_cpus = (await anyio.to_thread.run_sync(docker_client.info))["NCPU"]
    handle = await create(runtime, run_labels, spec(cpus=float(host_cpus + 6)))
    assert handle.notes == (
        f"cpus {host_cpus + 6} lowered to {host_cpus}: the Docker host has only {host_cpus} CPUs",
    )
    host = (await container_doc(docker_client, handle))["HostConfig"]
    assert host["NanoCpus"] == host_cpus * 1_000_000_000


async def test_limits_the_host_cannot_enforce_are_noted(run_labels, docker_client, tmp_path):
    """An engine without swap accounting cannot keep a sandbox from swapping: the handle says so."""

    class NoSwapAccounting:
        def __getattr__(self, name):
            return getattr(docker_client, name)

        def info(self):
            return {**docker_client.info(), "SwapLimit": False}

    async with DockerRuntime(rocklet_dir=tmp_path) as runtime:
        runtime._client = NoSwapAccounting()  # the one seam: what the engine says it supports
        handle = await create(runtime, run_labels)
        runtime._client = None  # not ours to close
    assert handle.notes == (
        "no-swap limit (the sandbox may swap beyond its memory limit) not enforced: "
        "the Docker host does not support it (docker info: SwapLimit false)",
    )


async def test_started_unit_publishes_nothing_and_lists_ports_to_forward(
    runtime, run_labels, docker_client, http
):
    """By default Docker publishes no port (no docker-proxy); inspect lists 22555 and 8080 for
    the engine to forward, and the rocklet answers on its unix socket."""
    handle = await create(runtime, run_labels)
    status = await started(runtime, handle, http)
    ports = (await container_doc(docker_client, handle))["NetworkSettings"]["Ports"]
    assert not any(ports.values()) if ports else True
    assert status.port_mapping == {} and status.forwarded_ports == (22555, 8080)
    assert status.rocklet_address == (status.rocklet_socket, 0)
    code, out = await exec_in(docker_client, handle, ["ls", "/sys/class/net"])
    assert code == 0 and "eth0" in out.split()


async def test_published_ports_are_bound_on_loopback_only(
    run_labels, docker_client, http, tmp_path
):
    """With ``publish_ports=True`` both ports are published on 127.0.0.1 only; inspect reports
    them and the rocklet answers there."""
    async with DockerRuntime(rocklet_dir=tmp_path, publish_ports=True) as runtime:
        handle = await create(runtime, run_labels)
        status = await started(runtime, handle, http)
        assert status.forwarded_ports == ()
        ports = (await container_doc(docker_client, handle))["NetworkSettings"]["Ports"]
        for port in ("22555/tcp", "8080/tcp"):
            assert {b["HostIp"] for b in ports[port]} == {"127.0.0.1"}
            assert int(ports[port][0]["HostPort"]) == status.port_mapping[int(port.split("/")[0])]
        assert status.rocklet_address == ("127.0.0.1", status.port_mapping[ROCKLET_PORT])
        await runtime.remove(handle)


async def test_disk_limit_is_applied_or_noted(runtime, run_labels, docker_client):
    """A disk limit the storage driver cannot enforce is a note on the handle, never a silent drop."""
    info = await anyio.to_thread.run_sync(docker_client.info)
    backing = dict(info["DriverStatus"]).get("Backing Filesystem")
    handle = await create(runtime, run_labels, spec(disk=50 * GiB))
    host = (await container_doc(docker_client, handle))["HostConfig"]
    if info["Driver"] == "overlay2" and backing != "xfs":
        assert handle.notes == (
            "disk limit 50.00g not enforced by the storage driver (storage driver overlay2 on "
            f"{backing} has no project quota): rock's disk watch measures the sandbox and stops "
            "it past the limit",
        )
        assert not host.get("StorageOpt")
    else:
        enforced = (host.get("StorageOpt") or {}).get("size") == str(50 * GiB)
        assert enforced or any(
            note.startswith("disk limit 50.00g not enforced by the storage driver")
            for note in handle.notes
        )
    no_disk = await create(runtime, run_labels, spec(disk=None))
    assert no_disk.notes == ()


# -- networks ---------------------------------------------------------------------------------


async def test_network_none_has_only_loopback_and_a_socket(runtime, run_labels, docker_client):
    """``network: none``: the container has ``lo`` alone and publishes nothing; the rocklet answers
    on a unix socket in a host directory, which goes with the container."""
    handle = await create(runtime, run_labels, spec(runtime_options={"network": "none"}))
    assert any(note.startswith("network none:") for note in handle.notes)
    await runtime.start(handle)
    status = await runtime.inspect(handle)
    assert status.state is UnitState.RUNNING
    assert status.port_mapping == {} and status.rocklet_port is None
    socket_path = Path(status.rocklet_socket)
    assert status.rocklet_address == (str(socket_path), 0)
    assert socket_path.parent.parent == runtime.socket_dir
    code, out = await exec_in(docker_client, handle, ["ls", "/sys/class/net"])
    assert code == 0 and out.split() == ["lo"]
    async with new_http_client() as http:
        client = RockletClient(http, *status.rocklet_address, handle.sandbox_id, token=TOKEN)
        await client.wait_until_alive(30)
        result = await client.execute(Command(command=["echo", "through the socket"]))
        assert result.stdout.strip() == "through the socket"
    await runtime.remove(handle)
    assert not socket_path.parent.exists(), "the socket directory goes with the container"


async def test_network_host_rocklet_listens_on_loopback(runtime, run_labels, docker_client, http):
    """``network: host``: the rocklet listens on a free port of the host's 127.0.0.1."""
    handle = await create(runtime, run_labels, spec(runtime_options={"network": "host"}))
    status = await started(runtime, handle, http)
    assert status.rocklet_host == "127.0.0.1"
    doc = await container_doc(docker_client, handle)
    assert doc["HostConfig"]["NetworkMode"] == "host"
    assert f"--host 127.0.0.1 --port {status.rocklet_port}" in doc["Config"]["Cmd"][2]


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"network": "overlay-of-doom"}, "runtime_options.network"),
        ({"gpu_model": "h100"}, "runtime_options.gpu_model"),
        ({"use_kata_runtime": True}, "runtime_options.use_kata_runtime"),
    ],
)
async def test_runtime_options_it_cannot_honour_are_refused(
    runtime, run_labels, docker_client, options, field
):
    the_spec = spec(runtime_options=options)
    with pytest.raises(InvalidParameter) as caught:
        await create(runtime, run_labels, the_spec)
    assert caught.value.field == field
    with pytest.raises(docker.errors.NotFound):
        docker_client.containers.get(the_spec.sandbox_id)


# -- images -----------------------------------------------------------------------------------


async def test_pull_policy_never(runtime, run_labels):
    """``never`` uses a present image without pulling, and fails at once for a missing one."""
    phases = PhaseLog()
    await create(runtime, run_labels, spec(pull=PullPolicy.NEVER), on_phase=phases)
    assert phases.last(PHASE_IMAGE_PULL).message == "skip image pull"
    assert phases.statuses(PHASE_IMAGE_PULL)[-1] is PhaseStatus.SUCCESS

    phases = PhaseLog()
    with pytest.raises(
        ImagePullFailed, match="Failed to pull image rock-test/absent:1: .*pull policy is 'never'"
    ):
        await create(
            runtime,
            run_labels,
            spec(image="rock-test/absent:1", pull=PullPolicy.NEVER),
            on_phase=phases,
        )
    assert phases.statuses(PHASE_IMAGE_PULL) == [PhaseStatus.RUNNING, PhaseStatus.FAILED]


async def test_pull_policy_missing_uses_the_cached_image(runtime, run_labels):
    phases = PhaseLog()
    await create(runtime, run_labels, spec(pull=PullPolicy.MISSING), on_phase=phases)
    assert phases.last(PHASE_IMAGE_PULL).message == "use cached image, skip image pull"


async def test_pull_policy_always_pulls_even_a_present_image(runtime, run_labels, docker_client):
    """``always`` asks the registry even for an image the engine has (none has this one: it fails)."""
    docker_client.images.get("rock-test/python:3.11")
    phases = PhaseLog()
    with pytest.raises(ImagePullFailed, match="Failed to pull image rock-test/python:3.11: "):
        await create(
            runtime,
            run_labels,
            spec(image="rock-test/python:3.11", pull=PullPolicy.ALWAYS),
            on_phase=phases,
        )
    assert [p.message.split(" ")[0] for n, p in phases.events] == ["looking", "pulling", "Failed"]


async def test_an_image_name_docker_cannot_parse_fails_the_pull_phase(runtime, run_labels):
    phases = PhaseLog()
    with pytest.raises(
        ImagePullFailed, match="^Failed to pull image Not/Lower:1: invalid reference format"
    ):
        await create(runtime, run_labels, spec(image="Not/Lower:1"), on_phase=phases)
    assert phases.statuses(PHASE_IMAGE_PULL) == [PhaseStatus.RUNNING, PhaseStatus.FAILED]


class _Registry(http_server.BaseHTTPRequestHandler):
    """A registry that asks for basic auth, records what it gets, and has no images."""

    seen: list[str | None]

    def do_GET(self):
        self.seen.append(self.headers.get("Authorization"))
        if self.headers.get("Authorization") is None:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="rock-test"')
            body = b""
        else:
            self.send_response(404)
            self.send_header("Content-Type", "application/json")
            body = b'{"errors": [{"code": "MANIFEST_UNKNOWN", "message": "manifest unknown"}]}'
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_HEAD = do_GET

    def log_message(self, *args):
        pass


async def test_registry_credentials_are_sent_to_the_registry(runtime, run_labels):
    """``registry_username``/``password`` reach the registry; its refusal is the pull's reason."""
    handler = type("Registry", (_Registry,), {"seen": []})
    server = http_server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(
        target=server.serve_forever,
        args=(0.05,),  # shutdown() waits one poll: a twentieth of a second, not half
        daemon=True,
    ).start()
    try:
        image = f"127.0.0.1:{server.server_port}/private/app:1"
        the_spec = spec(image=image, registry_username="trainer", registry_password="s3cret")
        with pytest.raises(
            ImagePullFailed, match=f"Failed to pull image {image}: .*manifest unknown"
        ):
            await create(runtime, run_labels, the_spec)
    finally:
        server.shutdown()
        server.server_close()
    assert f"Basic {base64.b64encode(b'trainer:s3cret').decode()}" in handler.seen


async def test_image_without_a_shell_exits_with_the_fix(runtime, run_labels, no_shell_image):
    """Under Docker's init (the default) the container exits at once; inspect's error is the fix."""
    handle = await create(runtime, run_labels, spec(image=no_shell_image))
    await runtime.start(handle)
    status = await wait_for_unit(
        runtime, handle, lambda s: s.state is UnitState.EXITED, what="exited"
    )
    assert status.exit_code == 127
    assert status.error.startswith(
        f"image {no_shell_image} has no /bin/sh and python3; rock needs python3 >= 3.8 in the image to run its agent"
    )


async def test_image_without_a_shell_fails_to_start_without_init(
    run_labels, no_shell_image, tmp_path
):
    """Without Docker's init, Docker itself cannot start the command: start fails with the fix."""
    async with DockerRuntime(rocklet_dir=tmp_path, init=False) as runtime:
        handle = await create(runtime, run_labels, spec(image=no_shell_image))
        with pytest.raises(RuntimeFailure) as caught:
            await runtime.start(handle)
        assert str(caught.value).startswith(
            f"image {no_shell_image} has no /bin/sh and python3; rock needs python3 >= 3.8 in the image to run its agent"
        )
        status = await runtime.inspect(handle)
        assert status.state is UnitState.CREATED
        assert status.error.startswith(f"image {no_shell_image} has no /bin/sh and python3")


async def test_image_without_python_reports_the_fix(runtime, run_labels, no_python_image):
    handle = await create(runtime, run_labels, spec(image=no_python_image))
    await runtime.start(handle)
    status = await wait_for_unit(
        runtime, handle, lambda s: s.state is UnitState.EXITED, what="exited"
    )
    assert status.exit_code == 127
    assert status.error == (
        f"image {no_python_image} has no python3; rock needs python3 >= 3.8 in the image to run its agent "
        "(install python3 in the image, or choose an image that has it)"
    )
    assert "rock: this image has no python3" in await runtime.logs(handle)


# -- errors -----------------------------------------------------------------------------------


async def test_a_taken_name_is_sandbox_already_exists(runtime, run_labels):
    the_spec = spec()
    await create(runtime, run_labels, the_spec)
    with pytest.raises(SandboxAlreadyExists, match=f"Sandbox {the_spec.sandbox_id} already exists"):
        await create(runtime, run_labels, the_spec)


async def test_a_name_docker_refuses_is_an_invalid_sandbox_id(runtime, run_labels):
    with pytest.raises(InvalidParameter, match="Invalid container name") as caught:
        await create(runtime, run_labels, spec(sandbox_id="not a name!"))
    assert caught.value.field == "sandbox_id"


async def test_an_engine_that_does_not_answer_is_a_runtime_failure(tmp_path):
    async with DockerRuntime(
        base_url=f"unix://{tmp_path}/no-docker.sock", rocklet_dir=tmp_path
    ) as runtime:
        with pytest.raises(RuntimeFailure, match="cannot reach the Docker engine"):
            await runtime.list({"rock.test.run": "x"})


async def test_a_closed_runtime_refuses_calls(tmp_path):
    runtime = DockerRuntime(rocklet_dir=tmp_path)
    assert await runtime.list({"rock.test.run": unique_sandbox_id()}) == []
    await runtime.aclose()
    await runtime.aclose()
    with pytest.raises(RuntimeFailure, match="closed"):
        await runtime.list({"rock.test.run": "x"})


# -- watching ---------------------------------------------------------------------------------


async def test_watch_reports_an_oom_kill_while_the_container_runs(runtime, run_labels, http):
    """An OOM kill inside a sandbox is reported at once, though the rocklet (and container) live on."""
    the_spec = spec(memory=64 * MiB)
    handle = await create(runtime, run_labels, the_spec)
    watch = runtime.watch({"rock.sandbox_id": the_spec.sandbox_id})
    try:
        status = await started(runtime, handle, http)
        url = f"{rocklet_url(status)}/execute"
        answer = await http.post(
            url, json={"command": ["python3", "-c", "b = b'x' * (256 << 20)"], "timeout": 60}
        )
        assert answer.json()["exit_code"] == -9
        with anyio.fail_after(30):
            got, reported = await watch.__anext__()
        assert got.sandbox_id == the_spec.sandbox_id
        assert reported.oom_killed is True
        assert reported.state is UnitState.RUNNING
    finally:
        await watch.aclose()


async def test_watch_ends_when_closed(runtime):
    """Closing a watch ends a read that is waiting for an event."""
    watch = runtime.watch({"rock.test.run": unique_sandbox_id()})
    results = []

    async def read():
        async for item in watch:
            results.append(item)

    def reading() -> bool:
        # The gate: the stream is open and the read holds its worker thread (the thread's one
        # token), so the close below ends a read in progress. Closing a moment before the thread
        # calls next() ends the read too: the gap can only test the easier case, never fail.
        return watch._stream is not None and watch._limiter.borrowed_tokens == 1

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            await eventually_async(reading, what="the read waiting on Docker's stream")
            await watch.aclose()
    assert results == []


async def test_discard_hands_removal_to_a_reaper_that_outlives_the_call(
    runtime, run_labels, docker_client, http
):
    """``discard`` returns at once; a reaper process removes the containers (running ones too)."""
    from rock_core.testing import eventually_empty

    handles = [await create(runtime, run_labels) for _ in range(3)]
    await started(runtime, handles[0], http)  # one running, two only created
    with anyio.fail_after(10):
        await runtime.discard(handles)
    ids = {h.unit_id for h in handles}
    left = await anyio.to_thread.run_sync(
        lambda: eventually_empty(
            lambda: [
                c
                for c in docker_client.containers.list(all=True, ignore_removed=True)
                if c.id in ids
            ]
        )
    )
    assert left == []


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"publish_ports": "false"}, "publish_ports: expected true or false, got 'false'"),
        ({"nofile_limit": 10}, "nofile_limit: expected a whole number >= 64 or None, got 10"),
        ({"max_concurrency": 0}, "max_concurrency: expected an integer >= 1, got 0"),
    ],
)
def test_bad_runtime_options_are_refused_through_the_engine_naming_them(options, said):
    """The runtime's settings arrive as the engine's ``runtime_options``; a bad one stops the
    engine's construction with the option's name, before anything runs."""
    from rock_core.engine.config import EngineConfig
    from rock_core.engine.manager import SandboxManager

    with pytest.raises(InvalidParameter, match=said):
        SandboxManager(EngineConfig(runtime_options=options))


async def test_a_docker_engine_that_never_answers_gives_an_error_that_says_what_to_do(
    tmp_path: Path,
) -> None:
    """A wedged dockerd accepts connections and never answers (Docker 20.10's libnetwork
    deadlock): the call fails after ``api_timeout`` with a message saying so and what to do."""
    import socket

    path = tmp_path / "docker.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(16)
    accepted: list[socket.socket] = []

    def accept() -> None:
        with listener:  # closed by this thread, once it no longer accepts (see below)
            while True:
                try:
                    accepted.append(listener.accept()[0])  # read nothing, answer nothing
                except OSError:
                    return  # shut down

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    runtime = DockerRuntime(base_url=f"unix://{path}", api_timeout=1.0)
    spec = SandboxSpec(image=IMAGE, sandbox_id=unique_sandbox_id())
    try:
        with pytest.raises(RuntimeFailure) as caught:
            await runtime.create(spec, labels={}, rocklet_token="t")
    finally:
        await runtime.aclose()
        # Not closed here while the thread may be about to call accept() on its number: a
        # listener opened meanwhile would get that number and its connections (a CI flake of
        # session 44). A shutdown wakes accept(); the thread then closes it.
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)
        acceptor.join(10)
        for conn in accepted:
            conn.close()
    message = str(caught.value)
    assert "did not answer in time during" in message
    assert "docker info" in message and "restart dockerd" in message


async def test_discard_removes_the_network_of_a_group_it_ends(
    runtime, run_labels, docker_client, http
):
    """A trainer that exits with a network group running (its engine discards the group's
    containers) leaves no network behind: the reaper removes it once its last member is gone.
    Left behind, each such network holds one of Docker's few address pools until none is left
    for a new network."""
    from rock_core.testing import eventually

    group = "discarded-" + uuid.uuid4().hex[:8]
    members = [
        await create(runtime, run_labels, spec(runtime_options={"network_group": group}))
        for _ in range(2)
    ]
    await started(runtime, members[0], http)
    (network,) = {
        name
        for name in docker_client.containers.get(members[0].unit_id).attrs["NetworkSettings"][
            "Networks"
        ]
    }
    assert docker_client.networks.list(names=[network])
    with anyio.fail_after(10):
        await runtime.discard(members)

    def network_gone() -> bool:
        return not docker_client.networks.list(names=[network])

    await anyio.to_thread.run_sync(
        lambda: eventually(network_gone, what=f"network {network} removed", timeout=60)
    )
