"""``Sandbox`` and ``SandboxGroup`` in remote mode, against a real admin server on a real socket.

The ``admin`` fixture starts ``rock admin serve`` on a free port (state in a temporary directory).
These tests cover what is particular to remote mode (identity headers reaching the server,
errors crossing the wire typed, streams, several event loops on one handle); the whole SDK suite
also runs in remote mode with ``ROCK_TEST_REMOTE=1``.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from rock.actions import CreateBashSessionRequest, State
from rock.sdk.sandbox.client import Sandbox, SandboxGroup
from rock.sdk.sandbox.config import SandboxConfig, SandboxGroupConfig
from rock_core.engine.manager import LABEL_OWNER
from rock_core.errors import (
    BadRequestRockError,
    ImagePullFailed,
    NonZeroExitCode,
    SandboxNotFound,
    SessionNotFound,
)

pytestmark = [pytest.mark.docker, pytest.mark.anyio]


@pytest.fixture
def remote(admin: Any, small: dict[str, Any]) -> dict[str, Any]:
    """The fields of a small sandbox on the test admin."""
    return {**small, "base_url": admin.url}


async def test_start_run_status_stop_through_the_admin(
    remote: dict[str, Any], containers: Any
) -> None:
    sandbox = Sandbox(
        SandboxConfig(**remote, user_id="alice", experiment_id="exp-7", namespace="team")
    )
    await sandbox.start()
    try:
        assert sandbox.url == f"{remote['base_url']}/apis/envs/sandbox/v1"
        assert len(containers(sandbox.sandbox_id)) == 1  # a real container, made by the admin
        assert (await sandbox.arun("echo hello from $(hostname)")).output.startswith("hello from")
        status = await sandbox.get_status()
        assert status.state is State.RUNNING and status.is_alive
        # ROCK's identity headers reached the server and were stored with the sandbox.
        assert (status.user_id, status.experiment_id, status.namespace) == (
            "alice",
            "exp-7",
            "team",
        )
        assert 8080 in (status.port_mapping or {})
    finally:
        await sandbox.stop()
    assert containers.gone(sandbox.sandbox_id)
    alive = await sandbox.is_alive()
    assert not alive.is_alive and ("stopped" in alive.message or "deleted" in alive.message)


async def test_errors_cross_the_wire_with_their_types(remote: dict[str, Any]) -> None:
    with pytest.raises(BadRequestRockError, match="cpus"):
        await Sandbox(SandboxConfig(**{**remote, "cpus": 20})).start()
    with pytest.raises(SandboxNotFound):
        await Sandbox(SandboxConfig(**remote)).attach("no-such-sandbox-here")
    async with Sandbox(SandboxConfig(**remote)) as sandbox:
        with pytest.raises(SessionNotFound, match="'nope'"):
            await sandbox.arun("true", session="nope")
        await sandbox.create_session(CreateBashSessionRequest(session="s"))
        with pytest.raises(NonZeroExitCode, match="exit code 3") as info:
            await sandbox.arun("echo before; sh -c 'exit 3'", session="s")
        assert info.value.exit_code == 3


async def test_an_unknown_image_fails_naming_the_pull(
    admin: Any, new_id: Any, containers: Any
) -> None:
    sandbox_id = new_id("remote-pull")
    sandbox = Sandbox(
        SandboxConfig(
            base_url=admin.url,
            image="rock-test/no-such-image:404",
            memory="512m",
            cpus=0.5,
            startup_timeout=60,
            sandbox_id=sandbox_id,
        )
    )
    with pytest.raises(
        ImagePullFailed, match="Failed to start sandbox because image_pull: Failed to pull image"
    ):
        await sandbox.start()
    assert containers.gone(sandbox_id)
    status = await sandbox.get_status(include_all_states=True)
    assert status.state in (State.STOPPED, State.DELETED)


async def test_files_streams_and_processes(remote: dict[str, Any], tmp_path: Path) -> None:
    payload = bytes(range(256)) * 4096  # 1 MiB, every byte value
    local = tmp_path / "blob.bin"
    local.write_bytes(payload)
    async with Sandbox(SandboxConfig(**remote)) as sandbox:
        assert (await sandbox.upload_by_path(str(local), "/tmp/in/blob.bin")).success
        assert await sandbox.download("/tmp/in/blob.bin") == payload
        assert [e.name for e in (await sandbox.list_dir("/tmp/in")).entries] == ["blob.bin"]

        events = [e async for e in sandbox.execute_stream(["sh", "-c", "echo one; exit 2"])]
        assert events[-1]["type"] == "exit" and events[-1]["exit_code"] == 2
        assert "".join(e["data"] for e in events if e["type"] == "output") == "one\n"

        started = await sandbox.start_process("echo bg; exit 5")
        info = await sandbox.process_status(started.process_id, wait=30)
        assert (info.running, info.exit_code) == (False, 5)
        assert await sandbox.process_output(started.process_id) == b"bg\n"


async def test_restart_keeps_files_and_delete_removes(
    remote: dict[str, Any], containers: Any
) -> None:
    sandbox = Sandbox(SandboxConfig(**remote, auto_delete_seconds=300))
    await sandbox.start()
    await sandbox.write_file_by_path("kept", "/root/note.txt")
    await sandbox.stop()
    assert (await sandbox.get_status(include_all_states=True)).state is State.STOPPED
    await sandbox.restart()
    assert (await sandbox.arun("cat /root/note.txt")).output == "kept"
    await sandbox.stop()
    await sandbox.delete()
    assert containers.gone(sandbox.sandbox_id)
    assert (await sandbox.get_status(include_all_states=True)).state is State.DELETED


def test_one_handle_serves_several_event_loops_and_threads(remote: dict[str, Any]) -> None:
    sandbox = Sandbox(SandboxConfig(**remote))
    asyncio.run(sandbox.start())
    try:
        assert asyncio.run(sandbox.arun("echo first")).output == "first"
        assert asyncio.run(sandbox.arun("echo second")).output == "second"
        outputs: list[str] = []
        threads = [
            threading.Thread(
                target=lambda n=n: outputs.append(asyncio.run(sandbox.arun(f"echo t{n}")).output)
            )
            for n in range(4)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(outputs) == [f"t{n}" for n in range(4)]
    finally:
        asyncio.run(sandbox.stop())


async def test_a_group_starts_and_stops_all(admin: Any, containers: Any) -> None:
    group = SandboxGroup(
        SandboxGroupConfig(base_url=admin.url, image="python:3.11", memory="512m", cpus=0.5, size=2)
    )
    await group.start()
    ids = [s.sandbox_id for s in group.sandbox_list]
    assert len(set(ids)) == 2
    assert [(await s.arun("echo ok")).output for s in group.sandbox_list] == ["ok", "ok"]
    await group.stop()
    assert all(containers.gone(i) for i in ids)


async def test_rock_base_url_alone_selects_the_admin(
    admin: Any, small: dict[str, Any], containers: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ROCK_BASE_URL", admin.url)
    fields = {k: v for k, v in small.items() if k != "base_url"}
    async with Sandbox(SandboxConfig(**fields)) as sandbox:
        (container,) = containers(sandbox.sandbox_id)
        assert container.labels[LABEL_OWNER].startswith(
            "admin:"
        )  # made by the server, not this process
        assert sandbox.url == f"{admin.url}/apis/envs/sandbox/v1"


async def test_waiting_on_a_stopped_sandbox_says_why(remote: dict[str, Any]) -> None:
    sandbox = Sandbox(SandboxConfig(**remote))
    await sandbox.start()
    await sandbox.stop()
    engine = sandbox._get_driver()
    with pytest.raises(
        SandboxNotFound, match=rf"sandbox {sandbox.sandbox_id} is not running \(it is \w+: .+\)"
    ):
        await engine.wait_until_running(sandbox.sandbox_id, timeout=30)
