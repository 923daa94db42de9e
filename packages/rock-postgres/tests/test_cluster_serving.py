"""Two real admins of one cluster on one PostgreSQL database both serve (issue #24 point 2):
a sandbox started through one admin is driven, read and stopped through the other; a start
sent to the follower is made by the leader (one sandbox, one container); calls into a sandbox
that only the follower served keep it from being stopped as idle, and once they stop, the
leader stops it; a container of the cluster that no record holds (left by a leader that ended
between making it and recording it) is removed by the leader."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator

import anyio
import httpx
import pytest

from rock.actions import Command, ReadFileRequest, WriteFileRequest
from rock.sdk.sandbox.client import Sandbox
from rock.sdk.sandbox.config import SandboxConfig
from rock_core.errors import SandboxNotFound
from rock_core.testing import eventually
from rock_postgres.testing import AdminProcess, postgres_url, two_admins  # noqa: F401

pytestmark = pytest.mark.anyio

HANG = 90  # a guard against a hang; nothing waits for it to pass
CLUSTER = f"serving-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def admins(
    tmp_path_factory: pytest.TempPathFactory, postgres_url: str
) -> Iterator[tuple[AdminProcess, AdminProcess]]:
    """The cluster's (leader, follower), both serving, reconciling every second; shared by the
    module's tests (none stops, kills or reconfigures an admin; each uses sandboxes of its own)."""
    extra = "reconcile_interval = 1.0\n"
    folder = tmp_path_factory.mktemp("cluster-serving")
    with two_admins(folder, postgres_url, cluster=CLUSTER, extra=extra) as admins:
        yield admins


def _containers(sandbox_id: str) -> list[str]:
    out = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=rock.sandbox_id={sandbox_id}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return out.split()


def _sandbox(url: str, **fields: object) -> Sandbox:
    config = SandboxConfig(image="python:3.11", base_url=url, memory="512m", cpus=0.5, **fields)
    return Sandbox(config)


async def test_a_sandbox_started_through_one_admin_is_driven_through_the_other(
    admins: tuple[AdminProcess, AdminProcess],
) -> None:
    leader, follower = admins
    # Started through the follower: the leader makes it (the follower forwards the start).
    first = _sandbox(follower.url)
    await first.start()
    sandbox_id = first.sandbox_id
    assert sandbox_id is not None
    try:
        assert len(_containers(sandbox_id)) == 1
        # Driven through the follower (served from the shared store, straight to its rocklet)
        # and through the leader, each seeing what the other wrote.
        second = _sandbox(leader.url)
        await second.attach(sandbox_id)
        await first.write_file(WriteFileRequest(content="from the follower", path="/tmp/f.txt"))
        assert (await second.read_file(ReadFileRequest(path="/tmp/f.txt"))).content == (
            "from the follower"
        )
        await second.write_file(WriteFileRequest(content="from the leader", path="/tmp/l.txt"))
        answer = await first.execute(Command(command=["cat", "/tmp/l.txt"]))
        assert answer.stdout == "from the leader"
        assert (await first.get_status()).status == (await second.get_status()).status
        # Stopped through the follower: the leader stops it, both see it.
        await first.stop()
        for url in (follower.url, leader.url):
            status = httpx.get(
                f"{url}/apis/envs/sandbox/v1/get_status",
                params={"sandbox_id": sandbox_id, "include_all_states": "true"},
                timeout=30,
            ).json()
            assert status["result"]["state"] in ("stopped", "deleted"), status
        with pytest.raises(SandboxNotFound):
            await second.execute(Command(command=["true"]))
        eventually(lambda: _containers(sandbox_id), until=lambda found: not found, timeout=HANG)
    finally:
        await first.close()


async def test_calls_only_the_follower_served_keep_a_sandbox_from_the_leaders_idle_stop(
    admins: tuple[AdminProcess, AdminProcess],
) -> None:
    leader, follower = admins
    sandbox = _sandbox(leader.url, auto_clear_seconds=4)
    await sandbox.start()
    sandbox_id = sandbox.sandbox_id
    assert sandbox_id is not None
    driven = _sandbox(follower.url)
    await driven.attach(sandbox_id)
    try:
        # For 10 s (two and a half idle periods), calls only through the follower.
        until = time.monotonic() + 10
        while time.monotonic() < until:
            assert (await driven.execute(Command(command=["true"]))).exit_code == 0
            await anyio.sleep(1)
        # Left alone, the leader stops it as idle.
        eventually(
            lambda: httpx.get(
                f"{follower.url}/apis/envs/sandbox/v1/get_status",
                params={"sandbox_id": sandbox_id, "include_all_states": "true"},
                timeout=30,
            ).json()["result"],
            until=lambda result: result["state"] != "running",
            what="the idle stop",
            timeout=HANG,
        )
    finally:
        await sandbox.close()
        await driven.close()


def test_a_container_of_the_cluster_no_record_holds_is_removed_by_the_leader(
    admins: tuple[AdminProcess, AdminProcess],
) -> None:
    # What a leader killed between its runtime's create and its record's write leaves behind.
    ghost = f"ghost-{uuid.uuid4().hex[:12]}"
    labels = {
        "rock.owner": f"cluster:{CLUSTER}",
        "rock.engine": "rock",
        "rock.engine_id": uuid.uuid4().hex,
        "rock.sandbox_id": ghost,
    }
    command = ["docker", "run", "-d", "--network", "none"]
    for key, value in labels.items():
        command += ["--label", f"{key}={value}"]
    subprocess.run([*command, "python:3.11", "sleep", "600"], check=True, capture_output=True)
    try:
        eventually(lambda: _containers(ghost), until=lambda found: not found, timeout=HANG)
    finally:
        subprocess.run(
            ["docker", "rm", "-f", *_containers(ghost)], capture_output=True, check=False
        )


async def test_the_follower_serves_a_leaders_sandboxs_shell_proxy_and_streams(
    admins: tuple[AdminProcess, AdminProcess],
) -> None:
    leader, follower = admins
    sandbox = _sandbox(leader.url)
    await sandbox.start()
    sandbox_id = sandbox.sandbox_id
    assert sandbox_id is not None
    driven = _sandbox(follower.url)
    await driven.attach(sandbox_id)
    try:
        # A terminal, over the follower's WebSocket.
        async with await driven.open_shell(command="echo via-$((6*7)); exit 3") as shell:
            out = b""
            while (data := await shell.receive()) is not None:
                out += data
        assert b"via-42" in out and shell.exit_code == 3
        # A command's output as a stream, through the follower.
        lines = [
            event async for event in driven.execute_stream(Command(command=["echo", "streamed"]))
        ]
        assert any("streamed" in str(event) for event in lines), lines
        # The sandbox's web server, through the follower's proxy.
        serve = "cd /tmp && echo hello-page > page.html && (python3 -m http.server 8080 >/dev/null 2>&1 &)"
        await driven.execute(Command(command=["sh", "-c", serve]))
        url = (
            f"{follower.url}/apis/envs/sandbox/v1/sandboxes/{sandbox_id}/proxy/port/8080/page.html"
        )
        page = eventually(
            lambda: httpx.get(url, timeout=30),
            until=lambda answer: answer.status_code == 200,
            what="the page through the follower's proxy",
            timeout=HANG,
        )
        assert page.text.strip() == "hello-page"
    finally:
        await sandbox.close()
        await driven.close()
