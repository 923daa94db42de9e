"""The rocklet's channel on a real Docker engine (issue 22, points 1 and 7).

The engine makes each rocklet's listening socket in a folder of ``socket_dir`` that no container
mounts and hands it in over a one-shot socket in the folder mounted read-only at ``/rock-run``
(:mod:`rock_core.rocklet_handoff`). These tests replay what a sandbox (or another local user)
would try, and what happens when the rocklet never takes its socket.
"""

from __future__ import annotations

import io
import os
import stat

import anyio
import docker.errors
import pytest

from rock_core.actions import Command, SandboxStartRequest
from rock_core.engine.config import EngineConfig
from rock_core.engine.manager import SandboxManager
from rock_core.errors import InvalidParameter, StartupTimeout
from rock_core.testing import eventually_async, unique_sandbox_id
from rock_docker import DockerRuntime

from .conftest import IMAGE, RUN_LABEL

pytestmark = [pytest.mark.anyio, pytest.mark.docker]

TOKEN = "rocklet-channel-test-token"
#: python:3.11 whose python3 never starts the rocklet: it sleeps, the container keeps running.
SLEEPY_IMAGE = "rock-test/python3-sleeps:2"
NOBODY = 65534


@pytest.fixture(scope="module")
def anyio_backend():
    return "asyncio"


@pytest.fixture(scope="module")
def sleepy_image(docker_client):
    script = "printf '#!/bin/sh\\nexec sleep infinity\\n' > /usr/local/bin/python3 && chmod 755 /usr/local/bin/python3"
    dockerfile = f"FROM {IMAGE}\nRUN {script}\n"
    docker_client.images.build(
        fileobj=io.BytesIO(dockerfile.encode()), tag=SLEEPY_IMAGE, rm=True, pull=False
    )
    return SLEEPY_IMAGE


def _spec_request(image: str = IMAGE, **fields) -> SandboxStartRequest:
    return SandboxStartRequest(
        image=image, memory="256m", cpus=0.5, sandbox_id=unique_sandbox_id("chan"), **fields
    )


async def _exec(docker_client, unit_id: str, script: str) -> tuple[int, str]:
    result = await anyio.to_thread.run_sync(
        lambda: docker_client.containers.get(unit_id).exec_run(["sh", "-c", script])
    )
    return result.exit_code, result.output.decode()


@pytest.fixture
async def engine(tmp_path, run_labels):
    config = EngineConfig(
        runtime_options={"socket_dir": str(tmp_path / "sockets")},
        engine_label=f"chan-{run_labels[RUN_LABEL][:8]}",
        reap_orphans=False,
    )
    async with SandboxManager(config) as manager:
        yield manager


async def test_the_sandbox_sees_only_a_read_only_handoff_folder(engine, docker_client, tmp_path):
    """Inside: /rock-run is read-only and empty once the rocklet took its socket (the engine's
    socket is not in it); root cannot put a link there. Outside: the engine's socket is in a
    0700 folder of a 0700 ``socket_dir``, and still the sandbox's own rocklet."""
    status = await engine.start(_spec_request())
    unit_id = engine.get_record(status.sandbox_id).unit_id
    code, out = await _exec(
        docker_client, unit_id, "ls -A /rock-run; ln -s /var/run/docker.sock /rock-run/rocklet.sock"
    )
    assert code != 0 and "Read-only file system" in out, out
    assert out.splitlines()[0].startswith("ln:"), f"/rock-run is not empty: {out}"
    socket_dir = tmp_path / "sockets"
    (unit_dir,) = socket_dir.iterdir()
    assert (
        stat.S_IMODE(socket_dir.stat().st_mode) == 0o700
        and stat.S_IMODE(unit_dir.stat().st_mode) == 0o700
    )
    assert stat.S_ISSOCK(os.lstat(unit_dir / "rocklet.sock").st_mode)
    assert list((unit_dir / "handoff").iterdir()) == [], "the handoff socket is gone once used"
    result = await engine.rocklet(status.sandbox_id).execute(Command(command=["hostname"]))
    assert result.stdout.strip() == unit_id[:12]
    await engine.stop(status.sandbox_id)


async def test_a_restarted_sandbox_gets_a_fresh_socket(tmp_path, run_labels):
    """A stopped sandbox started again in its own container takes a new listening socket."""
    config = EngineConfig(
        runtime_options={"socket_dir": str(tmp_path / "sockets")},
        engine_label=f"chan-{run_labels[RUN_LABEL][:8]}",
        reap_orphans=False,
        default_auto_delete_seconds=600,
    )
    async with SandboxManager(config) as engine:
        status = await engine.start(_spec_request())
        await engine.stop(status.sandbox_id)
        await engine.restart(status.sandbox_id)
        await engine.wait_until_running(status.sandbox_id)
        result = await engine.rocklet(status.sandbox_id).execute(Command(command=["echo", "again"]))
        assert result.stdout.strip() == "again"
        await engine.stop(status.sandbox_id)
        await engine.delete(status.sandbox_id)


async def test_a_restarted_engine_still_reaches_its_rocklets(tmp_path, run_labels):
    """The rocklet holds its listening socket: an engine that recovers its sandboxes after a
    restart connects to the same path (nothing to hand in again)."""
    config = EngineConfig(
        runtime_options={"socket_dir": str(tmp_path / "sockets")},
        engine_label=f"chan-{run_labels[RUN_LABEL][:8]}",
        store_path=str(tmp_path / "rock.db"),
        remove_on_close=False,
        reap_orphans=False,
    )
    async with SandboxManager(config) as first:
        status = await first.start(_spec_request())
    async with SandboxManager(config) as second:
        record = second.get_record(status.sandbox_id)
        assert record.state.value == "running", record
        result = await second.rocklet(status.sandbox_id).execute(
            Command(command=["echo", "recovered"])
        )
        assert result.stdout.strip() == "recovered"
        await second.stop(status.sandbox_id)


async def test_a_rocklet_that_never_takes_its_socket_fails_the_start_and_leaves_nothing(
    engine, sleepy_image, docker_client, tmp_path
):
    """The image's python3 never runs the rocklet: the start times out with a clear error, the
    unit is stopped (kept a grace period, as any failed start's) with no offer left open, and its
    deletion leaves neither container nor folder."""
    request = _spec_request(sleepy_image, startup_timeout=3)
    started = await engine.start_async(request)
    with pytest.raises(StartupTimeout) as caught:
        await engine.wait_until_running(started.sandbox_id)
    assert (
        caught.value.message
        == "Failed to start sandbox because docker_run: did not finish within 3s"
    )
    (unit_dir,) = (tmp_path / "sockets").iterdir()
    # The stop goes on after the error is out (Docker stops the container): the offer ends with it.
    await eventually_async(
        lambda: not any((unit_dir / "handoff").iterdir()), what="the handoff folder empty"
    )
    assert len(engine.runtime._sockets.handoffs) == 0, (
        "an offer nobody took is still open"
    )  # the one look inside
    await engine.delete(started.sandbox_id)

    def container_gone() -> bool:
        try:
            docker_client.containers.get(request.sandbox_id)
        except docker.errors.NotFound:
            return True
        return False

    await eventually_async(
        lambda: anyio.to_thread.run_sync(container_gone), what="the container gone"
    )
    await eventually_async(
        lambda: not any((tmp_path / "sockets").iterdir()), what="the sockets folder empty"
    )


async def test_a_socket_dir_of_another_user_is_refused(tmp_path, run_labels, docker_client):
    """Another local user who made ``/tmp/rock-<uid>`` first would sit between the engine and
    every rocklet: the create is refused naming the folder, its owner and mode, and the setting."""
    socket_dir = tmp_path / "rock-0"
    socket_dir.mkdir(mode=0o700)
    os.chown(socket_dir, NOBODY, NOBODY)
    spec_request = _spec_request()
    async with DockerRuntime(socket_dir=socket_dir) as runtime:
        from rock_core.converters import spec_from_start_request

        spec = spec_from_start_request(spec_request)
        with pytest.raises(InvalidParameter) as caught:
            await runtime.create(spec, labels=run_labels, rocklet_token=TOKEN)
    assert caught.value.field == "socket_dir"
    assert (
        f"socket_dir: {socket_dir} belongs to another user (owner uid {NOBODY}, mode drwx------"
        in caught.value.message
    )
    with pytest.raises(docker.errors.NotFound):
        docker_client.containers.get(spec_request.sandbox_id)


async def test_a_socket_dir_that_is_a_link_is_refused(tmp_path, run_labels):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "rock-0").symlink_to(real)
    async with DockerRuntime(socket_dir=tmp_path / "rock-0") as runtime:
        from rock_core.converters import spec_from_start_request

        spec = spec_from_start_request(_spec_request())
        with pytest.raises(InvalidParameter, match="is a symbolic link, not a folder"):
            await runtime.create(spec, labels=run_labels, rocklet_token=TOKEN)
    assert list(real.iterdir()) == []
