"""Restart after a crash on Docker, embedded and (``ROCK_TEST_REMOTE=1``) through the admin: a
sandbox with ``restart_policy="on-failure"`` whose container is killed behind rock's back comes
back with the same id, its files kept and its sessions gone; the status shows the restart."""

from __future__ import annotations

import shlex
from typing import Any

import pytest

from rock.actions import (
    BashAction,
    Command,
    CreateBashSessionRequest,
    ReadFileRequest,
    WriteFileRequest,
)
from rock.sdk.sandbox.client import Sandbox
from rock.sdk.sandbox.config import SandboxConfig
from rock_core.errors import RockError
from rock_core.testing import eventually_async

pytestmark = [pytest.mark.docker, pytest.mark.anyio]


def _kill_container(docker_client: Any, sandbox_id: str) -> None:
    [container] = docker_client.containers.list(filters={"label": f"rock.sandbox_id={sandbox_id}"})
    container.kill()  # SIGKILL: exit 137, as a crash or the OOM killer leaves it


async def _restarted(sandbox: Sandbox, count: int, timeout: float = 120) -> Any:
    return await eventually_async(
        lambda: sandbox.get_status(include_all_states=True),
        until=lambda status: status.restart_count >= count and status.state.value == "running",
        what=f"restart {count} running",
        timeout=timeout,
        interval=0.2,
    )


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
async def test_a_killed_sandbox_comes_back_with_its_files_and_without_its_sessions(
    small: dict[str, Any], docker_client: Any
) -> None:
    sandbox = Sandbox(
        SandboxConfig(**small, restart_policy="on-failure", max_restarts=1, auto_delete_seconds=600)
    )
    await sandbox.start()
    try:
        assert sandbox.sandbox_id is not None
        await sandbox.write_file(WriteFileRequest(content="still here", path="/root/kept.txt"))
        await sandbox.create_session(CreateBashSessionRequest(session="work"))
        _kill_container(docker_client, sandbox.sandbox_id)
        status = await _restarted(sandbox, 1)
        assert status.sandbox_id == sandbox.sandbox_id
        assert any("restarted (1 of 1)" in note and "code 137" in note for note in status.notes), (
            status.notes
        )
        events = [entry.event for entry in status.state_history][-3:]
        assert [getattr(e, "value", e) for e in events] == ["stop", "restart", "alive"]
        assert (
            await sandbox.read_file(ReadFileRequest(path="/root/kept.txt"))
        ).content == "still here"
        with pytest.raises(RockError, match="session"):
            await sandbox.run_in_session(BashAction(command="echo hi", session="work"))
        # Its one restart is used up: the next kill leaves it stopped, saying why.
        _kill_container(docker_client, sandbox.sandbox_id)
        status = await eventually_async(
            lambda: sandbox.get_status(include_all_states=True),
            until=lambda status: status.state.value == "stopped",
            what="the sandbox stopped",
            timeout=60,
            interval=0.2,
        )
        assert "gave up after 1 restart" in (status.reason or "")
    finally:
        await sandbox.stop()
        await sandbox.delete()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
async def test_a_poller_sees_a_crashed_sandbox_pending_until_it_runs_again_never_gone(
    small: dict[str, Any], docker_client: Any
) -> None:
    """``get_status`` without ``include_all_states``, polled through the restart policy's
    back-off: pending (ROCK's state) with the crash and the coming restart as the reason, then
    running; never "not found". Once the policy gives up, stopped (not found) as before."""
    sandbox = Sandbox(
        SandboxConfig(**small, restart_policy="on-failure", max_restarts=1, auto_delete_seconds=600)
    )
    await sandbox.start()
    try:
        assert sandbox.sandbox_id is not None
        _kill_container(docker_client, sandbox.sandbox_id)
        seen: list[tuple[str, str | None]] = []

        async def poll() -> Any:
            status = await sandbox.get_status()  # raises if the sandbox seems gone
            seen.append((status.state.value, status.reason))
            return status

        await eventually_async(
            poll,
            until=lambda status: status.restart_count >= 1 and status.state.value == "running",
            what="restart 1 running",
            timeout=120,
            interval=0.05,
        )
        assert {state for state, _ in seen} <= {"running", "pending"}, seen
        pending = [reason or "" for state, reason in seen if state == "pending"]
        assert pending, seen  # the back-off (1 s) and the start were seen as pending
        assert "restarting after a crash (restart 1 of 1" in pending[0], pending
        assert "code 137" in pending[0], pending
        # Its one restart is used up: the next kill leaves it stopped, not found without
        # include_all_states, saying why.
        _kill_container(docker_client, sandbox.sandbox_id)
        status = await eventually_async(
            lambda: sandbox.get_status(include_all_states=True),
            until=lambda status: status.state.value == "stopped",
            what="the sandbox stopped",
            timeout=60,
            interval=0.2,
        )
        assert "gave up after 1 restart" in (status.reason or "")
        with pytest.raises(RockError, match="not found"):
            await sandbox.get_status()
    finally:
        await sandbox.stop()
        await sandbox.delete()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
async def test_an_oom_killed_sandbox_comes_back_and_says_why(small: dict[str, Any]) -> None:
    """Inside the sandbox, its agent is made the OOM killer's first choice and memory runs out: the
    kernel kills the agent, the container ends OOM-killed, and the engine starts it again."""
    sandbox = Sandbox(
        SandboxConfig(
            **{**small, "memory": "128m"}, restart_policy="on-failure", auto_delete_seconds=600
        )
    )
    await sandbox.start()
    try:
        hog = (
            "echo 1000 > /proc/$(pgrep -f '^python3 .*rocklet[.]pyz' | head -n1)/oom_score_adj; "
            "python3 -c 'b = [bytearray(16 * 1024 * 1024) for _ in range(64)]'"
        )
        await sandbox.execute(
            Command(command=["/bin/sh", "-c", f"nohup sh -c {shlex.quote(hog)} >/dev/null 2>&1 &"])
        )
        status = await _restarted(sandbox, 1)
        assert any("OOM killed" in note for note in status.notes), status.notes
        assert (await sandbox.execute(Command(command=["echo", "back"]))).stdout.strip() == "back"
    finally:
        await sandbox.stop()
        await sandbox.delete()
