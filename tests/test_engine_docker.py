"""The engine (rock-core's SandboxManager) driving real containers through rock-docker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import anyio
import pytest

from rock_core.actions import (
    BashAction,
    Command,
    CreateBashSessionRequest,
    ReadFileRequest,
    SandboxStartRequest,
    WriteFileRequest,
)
from rock_core.engine.config import EngineConfig
from rock_core.engine.manager import LABEL_OWNER, LABEL_SANDBOX_ID, SandboxManager
from rock_core.errors import (
    BadRequestRockError,
    ImagePullFailed,
    InvalidParameter,
    InvalidTransition,
    NotSupported,
    RockError,
    SandboxAlreadyExists,
    SandboxNotFound,
    SessionNotFound,
)
from rock_core.responses import start_response, status_response
from rock_core.states import State
from rock_core.testing import eventually_async, eventually_empty
from rock_docker import DockerRuntime

pytestmark = [pytest.mark.docker, pytest.mark.anyio]

IMAGE = "python:3.11"
SMALL = {"image": IMAGE, "memory": "256m", "cpus": 0.5}


@pytest.fixture
def anyio_backend():
    return "asyncio"


def containers_of(docker_client, sandbox_id):
    return docker_client.containers.list(
        all=True, filters={"label": f"{LABEL_SANDBOX_ID}={sandbox_id}"}, ignore_removed=True
    )


async def _queued(engine, sandbox_id):
    status = await engine.get_status(sandbox_id)
    return status if status.queue_position is not None else None


@pytest.fixture
async def engine(docker_client):
    async with SandboxManager(EngineConfig(timer_interval=0.2, reconcile_interval=1.0)) as manager:
        yield manager
    leftovers = eventually_empty(
        lambda: docker_client.containers.list(
            all=True, filters={"label": f"rock.engine_id={manager.engine_id}"}, ignore_removed=True
        )
    )
    assert leftovers == [], "closing the engine must remove its containers"


async def test_start_run_and_stop_removes_the_container(engine, docker_client):
    started = await engine.start_async(SandboxStartRequest(**SMALL))
    sandbox_id = started.sandbox_id
    assert (
        start_response(started).memory == "0.25g" and start_response(started).cpus == 0.5
    )  # ROCK's wire sizes
    status = await engine.wait_until_running(sandbox_id, timeout=120)
    assert status.state is State.RUNNING and status_response(status).is_alive
    assert {p: ph.status.value for p, ph in status.phases.items()} == {
        "image_pull": "success",
        "docker_run": "success",
    }
    assert set(status.port_mapping) == {8080}  # 22555 only with EngineConfig.forward_rocklet_port
    (container,) = containers_of(docker_client, sandbox_id)
    assert container.name == sandbox_id

    client = engine.rocklet(sandbox_id, "execute")
    result = await client.execute(Command(command=["python3", "-c", "print(6 * 7)"]))
    assert result.stdout.strip() == "42" and result.exit_code == 0

    await engine.stop(sandbox_id)
    # The container is removed in the background; the record turns deleted when it is gone.
    await eventually_async(lambda: engine.get_record(sandbox_id).state is State.DELETED)
    assert containers_of(docker_client, sandbox_id) == []
    record = engine.get_record(sandbox_id)
    assert [(h.from_state, h.to_state) for h in record.state_history] == [
        (State.PENDING, State.RUNNING),
        (State.RUNNING, State.STOPPED),
        (State.STOPPED, State.DELETED),
    ]
    with pytest.raises(SandboxNotFound, match="not found"):
        await engine.get_status(sandbox_id)
    assert (await engine.get_status(sandbox_id, include_all_states=True)).state is State.DELETED
    await engine.stop(sandbox_id)  # stop again: a no-op, as ROCK
    await engine.delete(sandbox_id)  # delete of a deleted sandbox: a no-op


async def test_restart_keeps_files_and_drops_sessions(engine, docker_client):
    started = await engine.start_async(SandboxStartRequest(**SMALL, auto_delete_seconds=300))
    sandbox_id = started.sandbox_id
    await engine.wait_until_running(sandbox_id, timeout=120)
    client = engine.rocklet(sandbox_id)
    await client.write_file(WriteFileRequest(content="kept", path="/root/keep.txt"))
    await client.create_session(CreateBashSessionRequest(session="s1"))

    await engine.stop(sandbox_id)
    status = await engine.get_status(sandbox_id, include_all_states=True)
    assert status.state is State.STOPPED and status.reason == "manual"
    assert status_response(status).auto_delete_time is not None
    (container,) = containers_of(docker_client, sandbox_id)
    assert container.status == "exited"
    with pytest.raises(SandboxNotFound, match="is not running"):
        engine.rocklet(sandbox_id)

    await engine.restart(sandbox_id)
    status = await engine.wait_until_running(sandbox_id, timeout=120)
    assert status.record.start_time is not None and status.record.stop_time is None
    client = engine.rocklet(sandbox_id)
    assert (await client.read_file(ReadFileRequest(path="/root/keep.txt"))).content == "kept"
    with pytest.raises(SessionNotFound):
        await client.run_in_session(BashAction(command="echo hi", session="s1"))
    with pytest.raises(InvalidTransition):
        await engine.delete(sandbox_id)  # running: stop first, as ROCK
    with pytest.raises(BadRequestRockError, match="cannot be restarted: current state is running"):
        await engine.restart(sandbox_id)
    await engine.stop(sandbox_id)
    await engine.delete(sandbox_id)
    assert containers_of(docker_client, sandbox_id) == []


async def test_a_burst_waits_in_the_fair_queue(docker_client):
    config = EngineConfig(max_concurrent_starts=1)
    async with SandboxManager(config) as engine:
        ids = [
            (await engine.start_async(SandboxStartRequest(**SMALL))).sandbox_id for _ in range(3)
        ]
        status = await eventually_async(lambda: _queued(engine, ids[2]))
        assert status.queue_position in (1, 2)
        shown = status_response(status)  # ROCK's clients see the wait as a phase
        assert shown.status["queued"].status.value == "waiting"
        assert "position" in shown.status["queued"].message
        for sandbox_id in ids:
            assert (await engine.wait_until_running(sandbox_id, timeout=120)).state is State.RUNNING
        assert (await engine.get_status(ids[2])).queue_position is None


async def test_idle_sandbox_is_stopped_as_expired(engine):
    started = await engine.start_async(
        SandboxStartRequest(**SMALL, auto_clear_seconds=1, auto_delete_seconds=60)
    )
    sandbox_id = started.sandbox_id
    status = await engine.wait_until_running(sandbox_id, timeout=120)
    assert (
        status.idle_deadline is not None
        and status_response(status).auto_stop_time == status.idle_deadline
    )
    await eventually_async(lambda: engine.get_record(sandbox_id).state is State.STOPPED, timeout=30)
    assert engine.get_record(sandbox_id).reason == "expired"


async def test_a_killed_container_is_seen_as_stopped_with_its_reason(engine, docker_client):
    first = (await engine.start_async(SandboxStartRequest(**SMALL))).sandbox_id
    second = (await engine.start_async(SandboxStartRequest(**SMALL))).sandbox_id
    await engine.wait_until_running(first, timeout=120)
    await engine.wait_until_running(second, timeout=120)

    docker_client.containers.get(first).kill()
    await eventually_async(lambda: engine.get_record(first).state is State.STOPPED, timeout=30)
    assert "container exited with code 137" in engine.get_record(first).reason

    docker_client.containers.get(second).remove(force=True)
    await eventually_async(lambda: engine.get_record(second).state is State.STOPPED, timeout=30)
    assert engine.get_record(second).reason in (
        "container was removed outside rock",
        "container exited with code 137",
    )


async def test_reconcile_lists_once_and_inspects_only_the_units_that_stopped(docker_client):
    """Without the runtime's events, reconcile sees a killed container: one listing for all
    sandboxes, an inspect only for the one that is not running."""

    class Counting(DockerRuntime):
        inspected: list[str] = []

        async def inspect(self, handle):
            Counting.inspected.append(handle.sandbox_id)
            return await super().inspect(handle)

        def watch(self, labels):
            raise NotSupported("no events in this test")

    config = EngineConfig(timer_interval=0.2, reconcile_interval=3600)
    async with SandboxManager(config, runtime=Counting()) as engine:
        ids = [
            (await engine.start_async(SandboxStartRequest(**SMALL))).sandbox_id for _ in range(3)
        ]
        for sandbox_id in ids:
            await engine.wait_until_running(sandbox_id, timeout=120)
        Counting.inspected.clear()
        await engine.reconcile()
        assert Counting.inspected == [], "all running: the listing is enough"
        docker_client.containers.get(ids[0]).kill()
        await engine.reconcile()
        assert Counting.inspected == [ids[0]]
        assert engine.get_record(ids[0]).state is State.STOPPED
        assert "container exited with code 137" in engine.get_record(ids[0]).reason
        assert [engine.get_record(i).state for i in ids[1:]] == [State.RUNNING, State.RUNNING]


async def test_unknown_image_fails_fast_and_leaves_nothing(engine, docker_client):
    started = await engine.start_async(
        SandboxStartRequest(image="rock-test/no-such-image:1", memory="256m", cpus=0.5)
    )
    # ImagePullFailed, not StartupTimeout: the failed pull ends the wait, not the wait's limit.
    with pytest.raises(
        ImagePullFailed, match="Failed to start sandbox because image_pull: Failed to pull image"
    ):
        await engine.wait_until_running(started.sandbox_id, timeout=120)
    status = await engine.get_status(started.sandbox_id, include_all_states=True)
    assert status.state is State.STOPPED and status.phases["image_pull"].status.value == "failed"
    assert containers_of(docker_client, started.sandbox_id) == []


async def test_bad_requests_are_refused_with_the_field(engine):
    with pytest.raises(InvalidParameter, match="memory"):
        await engine.start_async(SandboxStartRequest(image=IMAGE, memory="8x"))
    with pytest.raises(InvalidParameter, match="cpus: 20 is above the maximum of 16"):
        await engine.start_async(SandboxStartRequest(image=IMAGE, cpus=20))
    with pytest.raises(InvalidParameter, match="sandbox_id"):
        await engine.start_async(SandboxStartRequest(image=IMAGE, sandbox_id="bad id!"))
    with pytest.raises(InvalidParameter, match="no archive store"):
        await engine.start_async(SandboxStartRequest(image=IMAGE, auto_archive_seconds=10))
    assert engine.list_records() == []


async def test_duplicate_sandbox_id_is_refused(engine):
    sandbox_id = f"dup-{os.getpid()}-{time.monotonic_ns()}"
    await engine.start_async(SandboxStartRequest(**SMALL, sandbox_id=sandbox_id))
    with pytest.raises(SandboxAlreadyExists, match=f"Sandbox {sandbox_id} already exists"):
        await engine.start_async(SandboxStartRequest(**SMALL, sandbox_id=sandbox_id))
    await engine.wait_until_running(sandbox_id, timeout=120)


async def test_stop_while_starting_leaves_nothing(engine, docker_client, monkeypatch):
    # The gate: the runtime's start waits for the test (its container created, not yet
    # started), so the stop surely comes while the sandbox starts.
    entered, released = anyio.Event(), anyio.Event()
    start = engine.runtime.start

    async def held_start(*args, **kwargs):
        entered.set()
        await released.wait()
        return await start(*args, **kwargs)

    monkeypatch.setattr(engine.runtime, "start", held_start)
    started = await engine.start_async(SandboxStartRequest(**SMALL))
    try:
        with anyio.fail_after(120):
            await entered.wait()
        assert len(containers_of(docker_client, started.sandbox_id)) == 1  # held after create
        with anyio.fail_after(120):
            await engine.stop(started.sandbox_id)
    finally:
        released.set()
    with pytest.raises(RockError):
        await engine.wait_until_running(started.sandbox_id, timeout=30)
    await eventually_async(lambda: engine.get_record(started.sandbox_id).state is State.DELETED)
    assert containers_of(docker_client, started.sandbox_id) == []


async def test_thirty_sandboxes_started_at_once_all_run(engine, docker_client):
    ids = [(await engine.start_async(SandboxStartRequest(**SMALL))).sandbox_id for _ in range(30)]
    states = []

    async def wait(sandbox_id):
        states.append((await engine.wait_until_running(sandbox_id, timeout=300)).state)

    async with anyio.create_task_group() as tg:
        for sandbox_id in ids:
            tg.start_soon(wait, sandbox_id)
    assert states == [State.RUNNING] * 30
    async with anyio.create_task_group() as tg:
        for sandbox_id in ids:
            tg.start_soon(engine.stop, sandbox_id)
    await eventually_async(lambda: all(engine.get_record(s).state is State.DELETED for s in ids))
    assert all(containers_of(docker_client, s) == [] for s in ids)


def test_containers_of_a_killed_process_are_reaped_by_the_next_engine(docker_client, tmp_path):
    script = tmp_path / "trainer.py"
    script.write_text(
        textwrap.dedent(f"""
        import anyio, sys
        from rock_core.actions import SandboxStartRequest
        from rock_core.engine.manager import SandboxManager

        async def main():
            async with SandboxManager() as engine:
                started = await engine.start_async(SandboxStartRequest(image={IMAGE!r}, memory="256m", cpus=0.5))
                await engine.wait_until_running(started.sandbox_id, timeout=120)
                print(started.sandbox_id, flush=True)
                await anyio.sleep(3600)

        anyio.run(main)
    """)
    )
    trainer = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        sandbox_id = trainer.stdout.readline().strip()
        assert sandbox_id, "the trainer did not start its sandbox"
        assert len(containers_of(docker_client, sandbox_id)) == 1
    finally:
        trainer.send_signal(signal.SIGKILL)
        trainer.wait()
    assert len(containers_of(docker_client, sandbox_id)) == 1  # SIGKILL: nothing cleaned up

    async def next_run():
        async with SandboxManager() as engine:
            return engine

    anyio.run(next_run)
    assert containers_of(docker_client, sandbox_id) == []


def test_a_killed_engine_with_a_store_recovers_its_sandboxes(docker_client, tmp_path):
    """kill -9 while 5 sandboxes run and 3 start: the next engine on the same store takes them back."""
    store = tmp_path / "rock.db"
    owner = f"admin:{store}"
    script = tmp_path / "admin.py"
    script.write_text(
        textwrap.dedent(f"""
        import anyio
        from rock_core.actions import SandboxStartRequest
        from rock_core.engine.config import EngineConfig
        from rock_core.engine.manager import SandboxManager

        async def main():
            config = EngineConfig(store_path={str(store)!r}, remove_on_close=False)
            async with SandboxManager(config, owner={owner!r}) as engine:
                request = SandboxStartRequest(image={IMAGE!r}, memory="256m", cpus=0.5)
                running = [(await engine.start_async(request)).sandbox_id for _ in range(5)]
                for sandbox_id in running:
                    await engine.wait_until_running(sandbox_id, timeout=120)
                starting = [(await engine.start_async(request)).sandbox_id for _ in range(3)]
                print(" ".join(running), flush=True)
                print(" ".join(starting), flush=True)
                await anyio.sleep(3600)

        anyio.run(main)
    """)
    )
    admin = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        running = admin.stdout.readline().split()
        starting = admin.stdout.readline().split()
        assert len(running) == 5 and len(starting) == 3
    finally:
        admin.send_signal(signal.SIGKILL)
        admin.wait()

    async def next_run():
        config = EngineConfig(store_path=str(store), remove_on_close=False)
        async with SandboxManager(config, owner=owner) as engine:
            for sandbox_id in running:
                status = await engine.get_status(sandbox_id)
                assert status.state is State.RUNNING
                result = await engine.rocklet(sandbox_id).execute(Command(command=["echo", "back"]))
                assert result.stdout.strip() == "back"
            for sandbox_id in starting:
                record = engine.get_record(sandbox_id)
                assert record.state is State.RUNNING or (
                    record.state in (State.STOPPED, State.DELETED) and record.reason
                )
            assert engine.list_records(states=[State.PENDING]) == []
            for sandbox_id in running + starting:
                await engine.stop(sandbox_id)
                if engine.get_record(sandbox_id).state is State.STOPPED:
                    await engine.delete(sandbox_id)  # kept a while to show why it stopped
            await eventually_async(
                lambda: all(engine.get_record(s).state is State.DELETED for s in running + starting)
            )

    anyio.run(next_run)
    leftovers = docker_client.containers.list(
        all=True, filters={"label": f"{LABEL_OWNER}={owner}"}, ignore_removed=True
    )
    for container in leftovers:
        container.remove(force=True)
    assert leftovers == [], "every sandbox of the killed engine was taken back and removed"


async def test_keep_stopped_delay_is_capped_by_the_engine(docker_client):
    """A user's auto_delete_seconds above the engine's cap is cut to the cap (ROCK's cluster cap)."""
    async with SandboxManager(EngineConfig(max_auto_delete_seconds=60)) as engine:
        started = await engine.start_async(SandboxStartRequest(**SMALL, auto_delete_seconds=3600))
        await engine.wait_until_running(started.sandbox_id, timeout=120)
        await engine.stop(started.sandbox_id)
        status = status_response(
            await engine.get_status(started.sandbox_id, include_all_states=True)
        )
        assert status.state is State.STOPPED
        assert (status.auto_delete_time - status.stop_time).total_seconds() == pytest.approx(
            60, abs=1
        )
        assert status.auto_stop_time is None and status.auto_archive_time is None


async def test_a_stop_ends_every_process_of_the_sandbox_before_it_returns(engine, docker_client):
    """stop() of a sandbox deleted at its stop: when it returns nothing of the sandbox runs any
    more (a session's job, an orphan in a session of its own), though its container may still
    wait in the removal queue; then the container goes and the record turns deleted."""
    from pathlib import Path

    sandbox_id = (await engine.start_async(SandboxStartRequest(**SMALL))).sandbox_id
    await engine.wait_until_running(sandbox_id, timeout=120)
    marker = f"rock-stop-{time.monotonic_ns()}"
    client = engine.rocklet(sandbox_id)
    await client.create_session(CreateBashSessionRequest(session="s"))
    await client.run_in_session(
        BashAction(
            session="s",
            command=f"sh -c 'sleep 300; : {marker}' & (setsid sh -c 'sleep 300; : {marker}' >/dev/null 2>&1 &)",
        )
    )

    def running_with_marker() -> list[str]:
        found = []
        for path in Path("/proc").glob("[0-9]*/cmdline"):
            try:
                if (
                    marker.encode() in path.read_bytes()
                    and (path.parent / "stat").read_bytes().rsplit(b")", 1)[1].split()[0] != b"Z"
                ):
                    found.append(path.parent.name)
            except (OSError, IndexError):
                pass
        return found

    await eventually_async(lambda: len(running_with_marker()) == 2, timeout=10)
    await engine.stop(sandbox_id)
    assert running_with_marker() == []
    await eventually_async(lambda: engine.get_record(sandbox_id).state is State.DELETED, timeout=60)
    assert docker_client.containers.list(all=True, filters={"name": sandbox_id}) == []
