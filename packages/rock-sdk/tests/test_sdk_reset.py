"""Reset (issue #25 point 3), on real Docker, embedded and (with ``ROCK_TEST_REMOTE=1``) through
a real admin: a running sandbox goes back to its image's files, or a snapshot's; its processes
and sessions end; its id, port_mapping and rocklet secret stay.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from rock.actions import Command, CreateBashSessionRequest
from rock.sdk.sandbox.client import Sandbox
from rock.sdk.sandbox.config import SandboxConfig
from rock_core.errors import BadRequestRockError, InvalidParameter, NotSupported, SessionNotFound

from .conftest import RUNTIME, SMALL

pytestmark = [pytest.mark.anyio, pytest.mark.docker]

#: On the stand-in Nomad (``ROCK_TEST_RUNTIME=nomad``) every reset is refused (the last test).
docker_only = pytest.mark.skipif(RUNTIME != "docker", reason="Nomad refuses resets (capability)")

ROCK = Path(sys.executable).with_name("rock")


async def _sh(sandbox: Sandbox, script: str) -> str:
    answer = await sandbox.execute(Command(command=["bash", "-c", script], timeout=60))
    assert answer.exit_code == 0, (script, answer.stdout, answer.stderr)
    return answer.stdout.strip()


CHECK = (
    "ls /work 2>/dev/null || echo no-work; test -e /etc/debian_version && echo present || echo"
    " deleted; pgrep -x sleep >/dev/null && echo sleeping || echo no-sleep"
)


@docker_only
async def test_reset_brings_back_the_images_files_and_ends_processes_and_sessions(
    engine: Any, small: dict[str, Any]
) -> None:
    sandbox = Sandbox(SandboxConfig(**small))
    await sandbox.start()
    try:
        before = await sandbox.get_status()
        await sandbox.create_session(CreateBashSessionRequest(session="before"))
        await _sh(
            sandbox,
            "mkdir -p /work && echo hi > /work/new.txt && rm /etc/debian_version"
            " && (sleep 1000 >/dev/null 2>&1 &)",
        )
        assert await _sh(sandbox, CHECK) == "new.txt\ndeleted\nsleeping"

        status = await sandbox.reset()

        assert (status.sandbox_id, status.state) == (sandbox.sandbox_id, "running")
        assert status.port_mapping == before.port_mapping
        assert status.status["reset"].message.startswith(f"reset to image {before.image} in ")
        assert await _sh(sandbox, CHECK) == "no-work\npresent\nno-sleep"
        with pytest.raises(SessionNotFound):
            await sandbox.arun("true", session="before")
        after = await sandbox.get_status()
        assert after.is_alive and after.image == before.image
        assert after.port_mapping == before.port_mapping
        # It works on as before: a new session, a command, and its port on the same host port.
        await sandbox.create_session(CreateBashSessionRequest(session="after"))
        assert (await sandbox.arun("echo again", session="after")).output == "again"
        await _sh(sandbox, "echo served > /tmp/i.txt && cd /tmp && (nohup python3 -m http.server"
                  " 8080 >/dev/null 2>&1 &)")  # fmt: skip
        assert await _get(f"http://127.0.0.1:{after.port_mapping[8080]}/i.txt") == "served"
    finally:
        await sandbox.stop()


async def _get(url: str) -> str:
    """The body at ``url`` once the server in the sandbox listens."""
    async with httpx.AsyncClient() as http:
        for _ in range(200):
            try:
                answer = await http.get(url)
                if answer.status_code == 200:
                    return answer.text.strip()
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.05)
    raise AssertionError(f"nothing served at {url}")


@docker_only
async def test_a_later_reset_swaps_in_the_unit_started_meanwhile_and_still_clears_state(
    engine: Any, small: dict[str, Any]
) -> None:
    sandbox = Sandbox(SandboxConfig(**small))
    await sandbox.start()
    try:
        first = await sandbox.reset()
        assert "(its spare unit)" not in first.status["reset"].message
        message = ""
        for _ in range(100):  # until the spare has started (in the background)
            await _sh(sandbox, "echo dirty > /dirty && (sleep 1000 >/dev/null 2>&1 &)")
            await asyncio.sleep(0.1)
            message = (await sandbox.reset()).status["reset"].message
            assert await _sh(sandbox, CHECK) == "no-work\npresent\nno-sleep"
            if "(its spare unit)" in message:
                break
        assert message.endswith("(its spare unit)")
        status = await sandbox.get_status()
        assert status.is_alive and status.port_mapping == first.port_mapping
    finally:
        await sandbox.stop()


@docker_only
async def test_reset_to_a_snapshot_gives_its_files_and_later_resets_return_to_it(
    engine: Any, small: dict[str, Any]
) -> None:
    sandbox = Sandbox(SandboxConfig(**small))
    await sandbox.start()
    name = f"reset-{uuid.uuid4().hex[:12]}"
    try:
        await _sh(sandbox, "echo prepared > /task.txt")
        await sandbox.snapshot(name=name)
        await _sh(sandbox, "echo episode > /task.txt && touch /junk")

        status = await sandbox.reset(snapshot=name)
        assert status.status["reset"].message.startswith(f"reset to snapshot {name} in ")
        assert await _sh(sandbox, "cat /task.txt; test -e /junk || echo no-junk") == (
            "prepared\nno-junk"
        )
        await _sh(sandbox, "echo episode2 > /task.txt")
        await sandbox.reset()
        assert await _sh(sandbox, "cat /task.txt") == "prepared"

        with pytest.raises(InvalidParameter, match="unknown snapshot 'no-such-snapshot'"):
            await sandbox.reset(snapshot="no-such-snapshot")
        assert (await sandbox.get_status()).is_alive  # a refused reset leaves it running
    finally:
        await sandbox.stop()
        await _delete_when_unused(sandbox, name)


async def _delete_when_unused(sandbox: Sandbox, name: str) -> None:
    for _ in range(300):
        try:
            await sandbox.delete_snapshot(name)
            return
        except BadRequestRockError as exc:
            if "still used" not in str(exc):
                raise
            await asyncio.sleep(0.1)
    await sandbox.delete_snapshot(name)


@docker_only
async def test_reset_of_a_stopped_sandbox_is_refused_naming_its_state(
    engine: Any, small: dict[str, Any]
) -> None:
    sandbox = Sandbox(SandboxConfig(**small, auto_delete_seconds=300))
    await sandbox.start()
    try:
        await sandbox.stop()
        with pytest.raises(BadRequestRockError, match="cannot be reset: it is stopped"):
            await sandbox.reset()
    finally:
        await sandbox.delete()


@docker_only
async def test_reset_of_a_paused_sandbox_asks_to_resume_it_first(
    engine: Any, small: dict[str, Any]
) -> None:
    sandbox = Sandbox(SandboxConfig(**small))
    await sandbox.start()
    try:
        await sandbox.pause()
        with pytest.raises(BadRequestRockError, match="is paused; resume it first"):
            await sandbox.reset()
        await sandbox.resume()
        assert (await sandbox.reset()).is_alive
    finally:
        await sandbox.stop()


def _rock(admin: Any, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ROCK_API_KEY", "ROCK_CONFIG")}
    env["ROCK_BASE_URL"] = admin.url
    return subprocess.run([str(ROCK), *args], env=env, capture_output=True, text=True, timeout=120)


@docker_only
def test_rock_sandbox_reset_on_the_command_line(admin: Any) -> None:
    created = _rock(admin, "sandbox", "create", "--memory", "256m", "--cpus", "0.5")
    assert created.returncode == 0, created.stderr
    sandbox_id = created.stdout.strip()
    name = f"cli-{uuid.uuid4().hex[:12]}"
    try:
        wrote = _rock(admin, "sandbox", "exec", sandbox_id, "sh", "-c", "echo x > /mark")
        assert wrote.returncode == 0, wrote.stderr
        assert _rock(admin, "sandbox", "snapshot", sandbox_id, "--name", name).returncode == 0
        assert _rock(admin, "sandbox", "exec", sandbox_id, "rm", "/mark").returncode == 0

        done = _rock(admin, "sandbox", "reset", sandbox_id, "--snapshot", name)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(f"{sandbox_id} reset to snapshot {name} in ")
        assert _rock(admin, "sandbox", "exec", sandbox_id, "cat", "/mark").stdout.strip() == "x"

        unknown = _rock(admin, "sandbox", "reset", sandbox_id, "--snapshot", "nope-none")
        assert unknown.returncode != 0 and "unknown snapshot 'nope-none'" in unknown.stderr
    finally:
        _rock(admin, "sandbox", "stop", sandbox_id)
    stopped = _rock(admin, "sandbox", "reset", sandbox_id)
    assert stopped.returncode != 0
    assert "is not running" in stopped.stderr or "cannot be reset" in stopped.stderr
    for _ in range(300):
        gone = _rock(admin, "sandbox", "snapshots", "--delete", name)
        if gone.returncode == 0 or "still used" not in gone.stderr:
            break
    assert gone.returncode == 0, gone.stderr


async def test_an_admin_on_nomad_refuses_a_reset_naming_the_capability(
    tmp_path: Path, admin_launcher: Any, docker_client: Any
) -> None:
    from rock_nomad.testing import StandInNomad

    launch_admin, stop_admin = admin_launcher
    with StandInNomad(nodes=1) as nomad:
        config = f'[engine]\nruntime = "nomad"\n[plugins.nomad]\naddress = "{nomad.address}"\n'
        server = launch_admin(tmp_path, config=config)
        try:
            async with Sandbox(SandboxConfig(**SMALL, base_url=server.url)) as sandbox:
                with pytest.raises(
                    NotSupported,
                    match=r"runtime 'nomad' cannot reset sandboxes: .*\(capability assign\)",
                ):
                    await sandbox.reset()
                assert (await sandbox.arun("echo still here")).output.strip() == "still here"
        finally:
            stop_admin(server, docker_client)
