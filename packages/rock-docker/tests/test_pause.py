"""Pause and resume on Docker (``docker pause``, the cgroup freezer), through the engine.

A paused sandbox's processes stop (a counter a loop writes stops advancing), its memory and
processes are kept (after resume the same pid counts on from where it was), calls into it are
refused naming the pause, its state stays ``running`` with ``paused`` in its status, and the
idle timer does not count the paused time unless the engine's ``idle_counts_paused`` says so.
"""

from __future__ import annotations

import io
import tarfile
import time

import anyio
import docker.errors
import pytest

from rock_core.actions import Command, SandboxStartRequest
from rock_core.engine.config import EngineConfig
from rock_core.engine.manager import SandboxManager
from rock_core.errors import BadRequestRockError
from rock_core.responses import status_response
from rock_core.states import State
from rock_core.testing import eventually_async, unique_sandbox_id

from .conftest import IMAGE, RUN_LABEL

pytestmark = [pytest.mark.anyio, pytest.mark.docker]

#: A shell loop counting in its own memory (``i``), writing its pid and each count (whole:
#: written aside, then moved in place).
LOOP = (
    "echo $$ > /tmp/pid; i=0; while true; do i=$((i+1)); "
    "echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.01; done"
)


@pytest.fixture(scope="module")
def anyio_backend():
    return "asyncio"


def _config(tmp_path, run_labels, **settings) -> EngineConfig:
    return EngineConfig(
        runtime_options={"socket_dir": str(tmp_path / "sockets")},
        engine_label=f"pause-{run_labels[RUN_LABEL][:8]}",
        reap_orphans=False,
        **settings,
    )


def _request(**fields) -> SandboxStartRequest:
    return SandboxStartRequest(
        image=IMAGE, memory="256m", cpus=0.5, sandbox_id=unique_sandbox_id("pause"), **fields
    )


async def _read(docker_client, unit_id: str, path: str) -> str:
    """A file of the container, read with ``docker cp`` (works on a paused container, where
    ``docker exec`` is refused)."""

    def read() -> str:
        chunks, _ = docker_client.containers.get(unit_id).get_archive(path)
        with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as tar:
            member = tar.next()
            assert member is not None
            data = tar.extractfile(member)
            assert data is not None
            return data.read().decode().strip()

    return await anyio.to_thread.run_sync(read)


async def _count(docker_client, unit_id: str) -> int:
    """The loop's last count; -1 before its first (the file is not there yet)."""
    try:
        return int(await _read(docker_client, unit_id, "/tmp/count"))
    except docker.errors.NotFound:
        return -1


async def _start_counting(engine: SandboxManager, docker_client, **fields) -> tuple[str, str]:
    status = await engine.start(_request(**fields))
    sandbox_id = status.sandbox_id
    unit_id = engine.get_record(sandbox_id).unit_id
    assert unit_id is not None
    container = docker_client.containers.get(unit_id)
    await anyio.to_thread.run_sync(lambda: container.exec_run(["sh", "-c", LOOP], detach=True))
    await eventually_async(lambda: _count(docker_client, unit_id), until=lambda n: n > 5)
    return sandbox_id, unit_id


async def test_a_paused_sandbox_stops_its_processes_and_resume_continues_the_same_ones(
    tmp_path, run_labels, docker_client
):
    async with SandboxManager(_config(tmp_path, run_labels)) as engine:
        sandbox_id, unit_id = await _start_counting(engine, docker_client)
        pid = await _read(docker_client, unit_id, "/tmp/pid")

        record = await engine.pause(sandbox_id)
        assert record.paused and record.state is State.RUNNING
        inspected = await anyio.to_thread.run_sync(
            lambda: docker_client.api.inspect_container(unit_id)
        )
        assert inspected["State"]["Paused"] is True
        frozen = await _count(docker_client, unit_id)
        await anyio.sleep(0.5)  # 50 counts, had the loop run on
        assert await _count(docker_client, unit_id) == frozen

        # get_status shows it: ROCK's state stays running, rock's paused says frozen.
        shown = status_response(await engine.get_status(sandbox_id))
        assert (shown.state, shown.paused, shown.is_alive) == (State.RUNNING, True, False)
        assert shown.paused_time is not None
        # A call into it is refused at once, naming the pause.
        with pytest.raises(BadRequestRockError, match=f"sandbox {sandbox_id} is paused; resume"):
            engine.rocklet(sandbox_id, "execute")
        # Pausing again changes nothing.
        assert (await engine.pause(sandbox_id)).paused_time == record.paused_time

        resumed = await engine.resume(sandbox_id)
        assert not resumed.paused and resumed.paused_time is None
        # The same process counts on from where it stopped (its memory kept).
        after = await eventually_async(
            lambda: _count(docker_client, unit_id), until=lambda n: n > frozen + 5
        )
        assert after > frozen
        assert await _read(docker_client, unit_id, "/tmp/pid") == pid
        result = await engine.rocklet(sandbox_id).execute(
            Command(command=["sh", "-c", f"test -d /proc/{pid} && echo alive"])
        )
        assert result.stdout.strip() == "alive"
        shown = status_response(await engine.get_status(sandbox_id))
        assert (shown.paused, shown.is_alive, shown.paused_time) == (False, True, None)
        await engine.stop(sandbox_id)


async def test_the_idle_timer_does_not_stop_a_paused_sandbox(tmp_path, run_labels, docker_client):
    config = _config(tmp_path, run_labels, timer_interval=3600)
    async with SandboxManager(config) as engine:
        status = await engine.start(_request(auto_clear_seconds=60))
        sandbox_id = status.sandbox_id
        await engine.pause(sandbox_id)
        assert (await engine.get_status(sandbox_id)).idle_deadline is None
        await engine.run_timers(at=time.time() + 3600)  # an hour later
        record = engine.get_record(sandbox_id)
        assert record.state is State.RUNNING and record.paused
        # Resumed, its idle clock goes on from where it was when paused: not expired.
        paused_at = record.paused_time
        assert paused_at is not None
        await engine.resume(sandbox_id)
        deadline = (await engine.get_status(sandbox_id)).idle_deadline
        assert deadline is not None and deadline.timestamp() > time.time()
        await engine.stop(sandbox_id)


async def test_with_idle_counts_paused_a_paused_sandbox_idles_out_and_stops(
    tmp_path, run_labels, docker_client
):
    config = _config(tmp_path, run_labels, timer_interval=3600, idle_counts_paused=True)
    async with SandboxManager(config) as engine:
        status = await engine.start(_request(auto_clear_seconds=60, auto_delete_seconds=600))
        sandbox_id = status.sandbox_id
        await engine.pause(sandbox_id)
        assert (await engine.get_status(sandbox_id)).idle_deadline is not None
        await engine.run_timers(at=time.time() + 3600)
        record = engine.get_record(sandbox_id)
        assert (record.state, record.reason, record.paused_time) == (State.STOPPED, "expired", None)
        unit_id = record.unit_id
        inspected = await anyio.to_thread.run_sync(
            lambda: docker_client.api.inspect_container(unit_id)
        )
        assert inspected["State"]["Running"] is False
        await engine.delete(sandbox_id)


async def test_a_paused_sandbox_can_be_stopped_and_a_stopped_one_cannot_be_paused(
    tmp_path, run_labels, docker_client
):
    async with SandboxManager(_config(tmp_path, run_labels)) as engine:
        status = await engine.start(_request(auto_delete_seconds=600))
        sandbox_id = status.sandbox_id
        await engine.pause(sandbox_id)
        await engine.stop(sandbox_id)
        record = engine.get_record(sandbox_id)
        assert record.state is State.STOPPED and not record.paused
        with pytest.raises(BadRequestRockError, match="cannot be paused: it is stopped"):
            await engine.pause(sandbox_id)
        with pytest.raises(BadRequestRockError, match="cannot be resumed: it is stopped"):
            await engine.resume(sandbox_id)
        # A restart runs it again, not paused.
        await engine.restart(sandbox_id)
        running = await engine.wait_until_running(sandbox_id)
        assert not running.record.paused
        await engine.stop(sandbox_id)
        await engine.delete(sandbox_id)


async def test_a_restarted_engine_keeps_a_paused_sandbox_paused(
    tmp_path, run_labels, docker_client
):
    config = _config(
        tmp_path, run_labels, store_path=str(tmp_path / "rock.db"), remove_on_close=False
    )
    async with SandboxManager(config) as first:
        sandbox_id, unit_id = await _start_counting(first, docker_client)
        await first.pause(sandbox_id)
    frozen = await _count(docker_client, unit_id)
    async with SandboxManager(config) as second:
        record = second.get_record(sandbox_id)
        assert record.state is State.RUNNING and record.paused, record
        with pytest.raises(BadRequestRockError, match="is paused"):
            second.rocklet(sandbox_id, "execute")
        await second.resume(sandbox_id)
        await eventually_async(
            lambda: _count(docker_client, unit_id), until=lambda n: n > frozen + 5
        )
        result = await second.rocklet(sandbox_id).execute(Command(command=["echo", "back"]))
        assert result.stdout.strip() == "back"
        await second.stop(sandbox_id)


async def test_a_paused_sandbox_can_be_snapshotted_and_stays_paused(
    tmp_path, run_labels, docker_client
):
    async with SandboxManager(_config(tmp_path, run_labels)) as engine:
        sandbox_id, unit_id = await _start_counting(engine, docker_client)
        await engine.pause(sandbox_id)
        frozen = await _count(docker_client, unit_id)
        snapshot = await engine.snapshot(sandbox_id)
        try:
            inspected = await anyio.to_thread.run_sync(
                lambda: docker_client.api.inspect_container(unit_id)
            )
            assert inspected["State"]["Paused"] is True
            assert engine.get_record(sandbox_id).paused
            await engine.resume(sandbox_id)
            await eventually_async(
                lambda: _count(docker_client, unit_id), until=lambda n: n > frozen + 5
            )
        finally:
            await engine.delete_snapshot(snapshot.name)
            await engine.stop(sandbox_id)
