"""``Sandbox.pause()`` / ``resume()`` as users meet them: through a real admin over a socket
(the remote SDK), in embedded mode, and with ``rock sandbox pause|resume`` as a subprocess.

On Docker a paused sandbox stays ``running`` with ``paused: true`` in its status, refuses
commands and file calls naming the pause, and its processes go on after ``resume()``; on the
stand-in Nomad (``ROCK_TEST_RUNTIME=nomad``) the engine refuses the pause naming the
runtime's capability. Another tenant's key cannot pause (test_admin_tenancy.py walks
``/pause`` and ``/resume`` with the other tenant's key).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from rock.actions import ReadFileRequest, State
from rock.sdk.sandbox.client import Sandbox
from rock.sdk.sandbox.config import SandboxConfig
from rock_core.errors import BadRequestRockError, NotSupported

from .conftest import RUNTIME, SMALL

pytestmark = [pytest.mark.docker, pytest.mark.anyio]

ROCK = Path(sys.executable).with_name("rock")


async def _counting(sandbox: Sandbox) -> str:
    """Start a loop that counts in its own memory; its pid."""
    await sandbox.arun(
        "nohup sh -c 'echo $$ > /tmp/pid; i=0; while true; do i=$((i+1)); "
        "echo $i > /tmp/n.new; mv /tmp/n.new /tmp/n; sleep 0.01; done' >/dev/null 2>&1 &"
    )
    return (
        await sandbox.arun("until test -s /tmp/pid; do sleep 0.01; done; cat /tmp/pid")
    ).output.strip()


async def _pause_and_resume(sandbox: Sandbox) -> None:
    """What holds of pause and resume whichever driver carries them (Docker)."""
    pid = await _counting(sandbox)
    paused = await sandbox.pause()
    assert (paused.state, paused.paused, paused.is_alive) == (State.RUNNING, True, False)
    status = await sandbox.get_status()
    assert status.state is State.RUNNING and status.paused and status.paused_time is not None
    alive = await sandbox.is_alive()
    assert (alive.is_alive, alive.message) == (False, f"sandbox {sandbox.sandbox_id} is paused")
    with pytest.raises(BadRequestRockError, match="is paused; resume it first"):
        await sandbox.arun("echo hi")
    with pytest.raises(BadRequestRockError, match="is paused; resume it first"):
        await sandbox.read_file(ReadFileRequest(path="/tmp/n"))
    resumed = await sandbox.resume()
    assert (resumed.paused, resumed.is_alive, resumed.paused_time) == (False, True, None)
    assert (await sandbox.is_alive()).is_alive
    # The same process goes on counting.
    check = f"test -d /proc/{pid} && cat /tmp/pid"
    assert (await sandbox.arun(check)).output.strip() == pid


@pytest.mark.skipif(RUNTIME != "docker", reason="the Docker runtime pauses; Nomad's refusal below")
async def test_pause_and_resume_through_the_admin(admin: Any) -> None:
    async with Sandbox(SandboxConfig(**SMALL, base_url=admin.url)) as sandbox:
        await _pause_and_resume(sandbox)


@pytest.mark.skipif(RUNTIME != "docker", reason="embedded mode runs on Docker")
async def test_pause_and_resume_embedded() -> None:
    async with Sandbox(SandboxConfig(**SMALL)) as sandbox:
        await _pause_and_resume(sandbox)


async def test_an_admin_on_nomad_refuses_a_pause_naming_the_capability(
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
                    NotSupported, match=r"runtime 'nomad' cannot pause .*\(capability pause\)"
                ):
                    await sandbox.pause()
                assert (await sandbox.arun("echo still here")).output.strip() == "still here"
        finally:
            stop_admin(server, docker_client)


@pytest.mark.skipif(RUNTIME != "docker", reason="Nomad refuses every pause (the test above)")
async def test_a_pause_of_a_stopped_sandbox_is_refused_naming_its_state(admin: Any) -> None:
    sandbox = Sandbox(SandboxConfig(**SMALL, base_url=admin.url, auto_delete_seconds=600))
    await sandbox.start()
    await sandbox.stop()
    try:
        for call in (sandbox.pause, sandbox.resume):
            with pytest.raises(
                BadRequestRockError, match="cannot be (paused|resumed): it is stopped"
            ):
                await call()
    finally:
        await sandbox.delete()


async def test_the_pause_routes_name_bad_input(admin: Any) -> None:
    async with httpx.AsyncClient(base_url=f"{admin.url}/apis/envs/sandbox/v1") as http:
        for route in ("pause", "resume"):
            answer = (await http.post(f"/{route}", json={})).json()
            assert answer["error"] == "invalid parameter: sandbox_id: required field missing"
            answer = (await http.post(f"/{route}", json={"sandbox_id": "no-such-one"})).json()
            assert answer["status"] == "Failed" and "no-such-one" in answer["error"], answer


def _rock(admin: Any, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ROCK_API_KEY", "ROCK_CONFIG")}
    env["ROCK_BASE_URL"] = admin.url
    return subprocess.run([str(ROCK), *args], env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(RUNTIME != "docker", reason="the Docker runtime pauses")
def test_rock_sandbox_pause_and_resume_on_the_command_line(admin: Any) -> None:
    created = _rock(admin, "sandbox", "create", "--memory", "256m", "--cpus", "0.5")
    assert created.returncode == 0, created.stderr
    sandbox_id = created.stdout.strip()
    try:
        done = _rock(admin, "sandbox", "pause", sandbox_id)
        assert (done.returncode, done.stdout.strip()) == (0, f"{sandbox_id} running (paused)")
        shown = _rock(admin, "sandbox", "status", sandbox_id)
        assert "running (paused)" in shown.stdout
        listed = _rock(admin, "sandbox", "list")
        [row] = [r for r in listed.stdout.splitlines() if r.startswith(sandbox_id)]
        assert "running (paused)" in row
        refused = _rock(admin, "sandbox", "exec", sandbox_id, "echo", "hi")
        assert refused.returncode != 0 and "is paused; resume it first" in refused.stderr
        done = _rock(admin, "sandbox", "resume", sandbox_id, "--json")
        assert done.returncode == 0, done.stderr
        assert '"paused": false' in done.stdout
        ran = _rock(admin, "sandbox", "exec", sandbox_id, "echo", "hi")
        assert (ran.returncode, ran.stdout.strip()) == (0, "hi")
    finally:
        _rock(admin, "sandbox", "stop", sandbox_id)
    stopped = _rock(admin, "sandbox", "pause", sandbox_id)
    assert stopped.returncode != 0
    assert "is not running" in stopped.stderr or "cannot be paused" in stopped.stderr
