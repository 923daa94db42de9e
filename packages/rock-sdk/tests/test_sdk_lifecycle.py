"""Starting, stopping, restarting and deleting sandboxes through ``Sandbox``, on real Docker.

Covers ROCK's scenarios (reference §13) 1, 3, 4, 8, 10 (resources) and 11 (port mapping), the
bad inputs that must fail with a typed error and leave nothing running, ``SandboxGroup``, and the
embedded engine used from several event loops, threads and synchronous code.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import textwrap
import threading
from typing import Any

import pytest

from rock.actions import CreateBashSessionRequest, State
from rock.sdk.common.exceptions import (
    BadRequestRockError,
    InternalServerRockError,
    SandboxNotFoundRockError,
)
from rock.sdk.sandbox.client import Sandbox, SandboxGroup
from rock.sdk.sandbox.config import SandboxConfig, SandboxGroupConfig
from rock_core.errors import (
    ImagePullFailed,
    InvalidParameter,
    InvalidTransition,
    SandboxAlreadyExists,
    SessionNotFound,
)
from rock_core.testing import eventually_async

pytestmark = [pytest.mark.docker, pytest.mark.anyio]


async def test_start_session_echo_stop(engine: Any, small: dict[str, Any], containers: Any) -> None:
    """ROCK scenario 1."""
    sandbox = Sandbox(SandboxConfig(**small))
    await sandbox.start()
    # On the nomad runtime the host is the Nomad node the sandbox was placed on (127.0.0.x).
    assert sandbox.sandbox_id and sandbox.host_ip.startswith("127.0.0.") and sandbox.host_name
    assert [c.status for c in containers(sandbox.sandbox_id)] == ["running"]
    await sandbox.create_session(CreateBashSessionRequest(session="bash-1"))
    observation = await sandbox.arun("echo Hello ROCK", session="bash-1")
    assert "Hello ROCK" in observation.output and observation.exit_code == 0
    assert (await sandbox.is_alive()).is_alive
    base_url = sandbox.config.base_url
    expected_url = (
        f"{base_url.rstrip('/')}/apis/envs/sandbox/v1" if base_url else None
    )  # embedded: no server
    assert (sandbox.cluster, sandbox.url) == (sandbox.config.cluster, expected_url)
    await sandbox.close()  # ROCK's close() is stop()
    assert containers.gone(
        sandbox.sandbox_id
    )  # the default lifecycle removes it at once (ROCK's --rm)
    # Its record turns deleted once the runtime's removal has returned, a moment after Docker
    # stops listing the container (stopped, not alive, until then).
    alive = await eventually_async(
        sandbox.is_alive,
        until=lambda answer: "deleted" in answer.message,
        what="is_alive saying the sandbox is deleted",
        timeout=10,
    )
    assert not alive.is_alive
    await sandbox.stop()  # stopping again is not an error


async def test_status_reports_resources_ports_and_history(engine: Any, containers: Any) -> None:
    """ROCK scenario 10 (the CPUs asked for are reported back) and 11 (no port 8000)."""
    sandbox = Sandbox(
        SandboxConfig(
            image="python:3.11",
            memory="512m",
            cpus=1,
            user_id="u1",
            experiment_id="e1",
            namespace="n1",
        )
    )
    async with sandbox:
        status = await sandbox.get_status()
        assert status.state is State.RUNNING and status.is_alive
        assert (status.cpus, status.memory, status.image) == (1.0, "0.50g", "python:3.11")
        assert (status.user_id, status.experiment_id, status.namespace) == ("u1", "e1", "n1")
        assert 8080 in status.port_mapping and 8000 not in status.port_mapping
        assert status.status["image_pull"].status.value == "success"
        assert status.status["docker_run"].status.value == "success"
        assert [(h.from_state, h.to_state) for h in status.state_history] == [
            (State.PENDING, State.RUNNING)
        ]
        assert status.auto_stop_time is not None
        inspected = containers(sandbox.sandbox_id)[0].attrs["HostConfig"]
        assert inspected["NanoCpus"] == 1_000_000_000 and inspected["Memory"] == 512 * 1024 * 1024
    assert containers.gone(sandbox.sandbox_id)


async def test_restart_keeps_files_but_not_sessions(
    engine: Any, small: dict[str, Any], containers: Any
) -> None:
    """ROCK scenario 3: with auto_delete_seconds the stopped sandbox is kept and can restart."""
    sandbox = Sandbox(SandboxConfig(**small, auto_delete_seconds=300))
    await sandbox.start()
    try:
        await sandbox.create_session(CreateBashSessionRequest(session="before"))
        await sandbox.write_file_by_path("kept", "/root/kept.txt")
        await sandbox.stop()
        status = await sandbox.get_status(include_all_states=True)
        assert status.state is State.STOPPED and status.auto_delete_time is not None
        assert [c.status for c in containers(sandbox.sandbox_id)] == ["exited"]
        with pytest.raises(SandboxNotFoundRockError, match="stopped"):
            await sandbox.get_status()

        await sandbox.restart()
        assert (await sandbox.get_status()).state is State.RUNNING
        with pytest.raises(SessionNotFound):
            await sandbox.arun("true", session="before")
        await sandbox.create_session(CreateBashSessionRequest(session="after"))
        assert (await sandbox.arun("cat /root/kept.txt", session="after")).output == "kept"
        history = [
            (h.event) for h in (await sandbox.get_status(include_all_states=True)).state_history
        ]
        assert history == ["alive", "stop", "restart", "alive"]
    finally:
        await sandbox.stop()
        await sandbox.delete()
    assert containers.gone(sandbox.sandbox_id)
    assert (await sandbox.get_status(include_all_states=True)).state is State.DELETED


async def test_restart_after_the_default_stop_explains_why_not(
    engine: Any, small: dict[str, Any]
) -> None:
    sandbox = Sandbox(SandboxConfig(**small))
    await sandbox.start()
    await sandbox.stop()
    with pytest.raises(BadRequestRockError, match="cannot be restarted"):
        await sandbox.restart()


async def test_delete(engine: Any, small: dict[str, Any], containers: Any) -> None:
    """ROCK scenario 4: stop, delete, then get_status without include_all_states raises."""
    sandbox = Sandbox(SandboxConfig(**small, auto_delete_seconds=600))
    await sandbox.start()
    with pytest.raises(InvalidTransition, match="running"):
        await sandbox.delete()  # a running sandbox must be stopped first
    await sandbox.stop()
    assert len(containers(sandbox.sandbox_id)) == 1
    await sandbox.delete()
    assert containers.gone(sandbox.sandbox_id)
    with pytest.raises(SandboxNotFoundRockError):
        await sandbox.get_status(include_all_states=False)
    status = await sandbox.get_status(include_all_states=True)
    assert status.state is State.DELETED and status.delete_time is not None
    await sandbox.delete()  # deleting again is not an error


async def test_async_with_starts_and_stops(
    engine: Any, small: dict[str, Any], containers: Any
) -> None:
    async with Sandbox(SandboxConfig(**small)) as sandbox:
        assert (await sandbox.arun("echo in", session=None)).output == "in"
        sandbox_id = sandbox.sandbox_id
    assert containers.gone(sandbox_id)


async def test_a_second_start_of_a_running_sandbox_is_refused(
    engine: Any, small: dict[str, Any], containers: Any
) -> None:
    """ROCK would start another sandbox and lose the first one, still running; rock refuses."""
    sandbox = Sandbox(SandboxConfig(**small))
    await sandbox.start()
    first = sandbox.sandbox_id
    try:
        with pytest.raises(
            BadRequestRockError,
            match=rf"already holds sandbox {first} \(running\).*stop\(\) it first",
        ):
            await sandbox.start()
        assert sandbox.sandbox_id == first and len(containers(first)) == 1
    finally:
        await sandbox.stop()
    await sandbox.start()  # once stopped, the same handle starts a new sandbox
    try:
        assert sandbox.sandbox_id != first
    finally:
        await sandbox.stop()


async def test_attach_shares_the_sandbox_and_syncs_the_config(
    engine: Any, small: dict[str, Any]
) -> None:
    async with Sandbox(SandboxConfig(**small, user_id="alice")) as first:
        await first.create_session(CreateBashSessionRequest(session="shared"))
        await first.arun("export MARK=attached", session="shared")
        second = Sandbox(SandboxConfig())
        await second.attach(first.sandbox_id)
        assert second.sandbox_id == first.sandbox_id == second.config.sandbox_id
        assert (second.config.memory, second.config.cpus, second.config.user_id) == (
            "0.50g",
            0.5,
            "alice",
        )
        assert (await second.arun("echo $MARK", session="shared")).output == "attached"
    with pytest.raises(SandboxNotFoundRockError):
        await Sandbox(SandboxConfig()).attach("no-such-sandbox")


async def test_unknown_image_fails_fast_naming_the_pull(
    engine: Any, new_id: Any, containers: Any
) -> None:
    """ROCK scenario 8."""
    sandbox_id = new_id()
    sandbox = Sandbox(
        SandboxConfig(
            image="rock-test/no-such-image:404",
            memory="512m",
            cpus=0.5,
            startup_timeout=40,
            sandbox_id=sandbox_id,
        )
    )
    with pytest.raises(
        InternalServerRockError,
        match="Failed to start sandbox because image_pull: Failed to pull image",
    ) as info:
        await sandbox.start()
    assert isinstance(info.value, ImagePullFailed)
    assert containers.gone(sandbox_id)
    status = await sandbox.get_status(include_all_states=True)
    assert status.state is State.DELETED or status.state is State.STOPPED
    assert status.status["image_pull"].status.value == "failed"


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"memory": "8x"}, r"memory.*'8x'"),
        ({"cpus": -1}, r"cpus.*-1"),
        ({"cpus": 20}, r"cpus: 20 is above the maximum of 16"),
        ({"memory": "65g"}, r"memory: 65.00g is above the maximum"),
        ({"sandbox_id": "no spaces allowed"}, r"sandbox_id.*not a valid id"),
    ],
)
async def test_bad_resources_are_refused_before_anything_runs(
    engine: Any, new_id: Any, containers: Any, fields: dict[str, Any], match: str
) -> None:
    """ROCK scenario 10 (cpus=20 is a BadRequestRockError) and other bad input."""
    config = SandboxConfig(image="python:3.11", memory="512m", cpus=0.5, sandbox_id=new_id())
    for name, value in fields.items():
        setattr(config, name, value)
    sandbox = Sandbox(config)
    with pytest.raises(BadRequestRockError, match=match) as info:
        await sandbox.start()
    assert isinstance(info.value, InvalidParameter)
    assert sandbox.sandbox_id is None
    assert containers.gone(config.sandbox_id)


async def test_a_duplicate_sandbox_id_is_refused(
    engine: Any, small: dict[str, Any], new_id: Any, containers: Any
) -> None:
    sandbox_id = new_id("dup")
    async with Sandbox(SandboxConfig(**small, sandbox_id=sandbox_id)):
        second = Sandbox(SandboxConfig(**small, sandbox_id=sandbox_id))
        with pytest.raises(SandboxAlreadyExists, match=f"Sandbox {sandbox_id} already exists"):
            await second.start()
        assert len(containers(sandbox_id)) == 1
    assert containers.gone(sandbox_id)


async def test_idle_sandbox_is_stopped_but_a_long_command_keeps_it_alive(
    engine: Any, small: dict[str, Any], containers: Any
) -> None:
    sandbox = Sandbox(SandboxConfig(**small, auto_clear_seconds=2))
    await sandbox.start()
    # A command running longer than the idle timeout is activity: the sandbox is not stopped under it.
    assert (await sandbox.arun("sleep 4; echo done")).output == "done"
    sandbox_id = sandbox.sandbox_id
    assert containers.gone(sandbox_id, timeout=60)  # then, left alone, it is stopped for being idle
    alive = await sandbox.is_alive()
    assert not alive.is_alive and "expired" in alive.message


async def test_status_reads_do_not_keep_an_idle_sandbox_alive(
    engine: Any, small: dict[str, Any], containers: Any
) -> None:
    """Reads are not activity: a sandbox whose status is read every 0.5 s (a dashboard, a
    trainer's waits) is still stopped for being idle. Before, every read restarted its idle timer
    and it ran for ever."""
    sandbox = Sandbox(SandboxConfig(**small, auto_clear_seconds=2))
    await sandbox.start()
    sandbox_id = sandbox.sandbox_id
    reads = 0
    deadlines = set()  # the idle deadline each read showed: a read counted as activity moves it

    async def poll() -> None:
        nonlocal reads
        while True:
            try:
                status = await sandbox.get_status()
            except SandboxNotFoundRockError:
                return  # stopped: no longer among the running ones
            if status.auto_stop_time is not None:  # None: no longer live
                deadlines.add(status.auto_stop_time)
            reads += 1
            # The dashboard's pace, the workload itself: the deadlines asserted below show the
            # reads did not count whatever the pace (a slow machine cannot make this pass).
            await asyncio.sleep(0.5)

    poller = asyncio.ensure_future(poll())
    try:
        gone = await asyncio.to_thread(containers.gone, sandbox_id, 60)
    finally:
        poller.cancel()
    assert gone, "a sandbox read every 0.5 s was never stopped for being idle"
    assert reads >= 2  # it was read while it ran
    assert len(deadlines) == 1, f"reads moved the idle deadline: {sorted(deadlines)}"
    alive = await sandbox.is_alive()
    assert not alive.is_alive and "expired" in alive.message


async def test_group_starts_and_stops_all(engine: Any, containers: Any) -> None:
    group = SandboxGroup(
        SandboxGroupConfig(
            image="python:3.11", memory="512m", cpus=0.5, size=2, start_concurrency=2
        )
    )
    await group.start()
    ids = [s.sandbox_id for s in group.sandbox_list]
    assert len(set(ids)) == 2
    for sandbox in group.sandbox_list:
        assert (await sandbox.arun("echo ok")).output == "ok"
    await group.stop()
    assert all(containers.gone(i) for i in ids)


async def test_group_does_not_retry_a_bad_request_and_leaves_nothing(engine: Any) -> None:
    group = SandboxGroup(
        SandboxGroupConfig(image="python:3.11", memory="512m", cpus=20, size=2, start_retry_times=3)
    )
    with pytest.raises(BadRequestRockError, match="cpus"):
        await group.start()
    assert all(s.sandbox_id is None for s in group.sandbox_list)


def test_one_engine_serves_many_event_loops_threads_and_sync_code(
    engine: Any, small: dict[str, Any], containers: Any
) -> None:
    sandbox = Sandbox(SandboxConfig(**small))
    asyncio.run(sandbox.start())
    try:
        assert asyncio.run(sandbox.arun("echo first loop")).output == "first loop"
        assert asyncio.run(sandbox.arun("echo second loop")).output == "second loop"
        outputs: list[str] = []
        threads = [
            threading.Thread(
                target=lambda n=n: outputs.append(
                    asyncio.run(sandbox.arun(f"echo thread {n}")).output
                )
            )
            for n in range(4)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(outputs) == [f"thread {n}" for n in range(4)]
        status = engine.call_blocking(engine.get_status, sandbox.sandbox_id)  # synchronous callers
        assert status.state is State.RUNNING
    finally:
        asyncio.run(sandbox.stop())
    assert containers.gone(sandbox.sandbox_id)


def _run_child(code: str) -> subprocess.Popen[str]:
    """A Python child process running ``code``, its stdout piped (use it as a context manager)."""
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE, text=True
    )


CHILD = """
    import asyncio, sys
    from rock.sdk.sandbox.client import Sandbox
    from rock.sdk.sandbox.config import SandboxConfig

    async def main():
        sandbox = Sandbox(SandboxConfig(image="python:3.11", memory="512m", cpus=0.5))
        await sandbox.start()
        print(sandbox.sandbox_id, flush=True)
        {then}

    asyncio.run(main())
"""


def test_a_process_that_exits_removes_its_sandboxes(containers: Any) -> None:
    with _run_child(
        CHILD.format(then="pass")
    ) as child:  # no stop(): the engine's exit handler removes it
        sandbox_id = child.stdout.readline().strip()
        assert child.wait(60) == 0
    assert sandbox_id and containers.gone(sandbox_id)


def test_sandboxes_of_a_killed_process_are_reaped_by_the_next_engine(containers: Any) -> None:
    with _run_child(CHILD.format(then="await asyncio.sleep(600)")) as child:
        sandbox_id = child.stdout.readline().strip()
        child.send_signal(signal.SIGKILL)  # no exit handler runs
        child.wait(60)
    assert sandbox_id and len(containers(sandbox_id)) == 1
    with _run_child(CHILD.format(then="await sandbox.stop()")) as reaper:
        reaper.stdout.readline()
        assert reaper.wait(60) == 0
    assert containers.gone(sandbox_id)


async def test_a_cancelled_start_leaves_nothing_running(
    engine: Any, small: dict[str, Any], containers: Any
) -> None:
    sandbox = Sandbox(SandboxConfig(**small))
    starting = asyncio.create_task(sandbox.start())
    await eventually_async(
        lambda: sandbox.sandbox_id is not None or starting.done(),
        what="the start's id",
        interval=0.001,
    )
    starting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await starting
    assert containers.gone(sandbox.sandbox_id, timeout=60)
    assert (await sandbox.get_status(include_all_states=True)).state in (
        State.STOPPED,
        State.DELETED,
    )
