"""Snapshots belong to tenants (issue #25 points 1, 2 and 6), through a real admin with two API
keys and a third with a quota, on real Docker sandboxes, driven by the SDK in remote mode.

Tenant ``team-a`` makes a snapshot; ``team-b`` cannot list it, start from it, delete it, nor
snapshot or fork ``team-a``'s sandbox: each answer is word for word what an unknown name or id
gets. Both may use the same snapshot name, each for its own files. ``team-q`` (at most 2
sandboxes) is refused a fork that would pass its quota, named, before any snapshot is made.
``team-s`` (at most 1 snapshot) is refused a second snapshot, and a fork of a sandbox changed
since (its snapshot counts), naming ``max_snapshots``, until it deletes the first; a fork of a
sandbox unchanged since its snapshot makes none.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from rock.actions import Command
from rock.admin.auth import hash_key
from rock.sdk.sandbox.client import Sandbox
from rock.sdk.sandbox.config import SandboxConfig
from rock_core.errors import RockError

pytestmark = [pytest.mark.anyio, pytest.mark.docker]

SMALL: dict[str, Any] = {"image": "python:3.11", "memory": "256m", "cpus": 0.5}
KEY_A = "key-a-" + uuid.uuid4().hex
KEY_B = "key-b-" + uuid.uuid4().hex
KEY_Q = "key-q-" + uuid.uuid4().hex
KEY_S = "key-s-" + uuid.uuid4().hex
CONFIG = (
    "[admin]\napi_keys = [\n"
    f'  {{ tenant = "team-a", sha256 = "{hash_key(KEY_A)}" }},\n'
    f'  {{ tenant = "team-b", sha256 = "{hash_key(KEY_B)}" }},\n'
    f'  {{ tenant = "team-q", sha256 = "{hash_key(KEY_Q)}", max_sandboxes = 2 }},\n'
    f'  {{ tenant = "team-s", sha256 = "{hash_key(KEY_S)}", max_snapshots = 1 }},\n'
    "]\n"
)


@pytest.fixture(scope="module")
def admin(
    tmp_path_factory: pytest.TempPathFactory, docker_client: Any, admin_launcher: Any
) -> Iterator[Any]:
    launch_admin, stop_admin = admin_launcher
    server = launch_admin(tmp_path_factory.mktemp("admin-snapshots"), config=CONFIG)
    try:
        yield server
    finally:
        stop_admin(server, docker_client)


def _sandbox(admin: Any, key: str, **fields: Any) -> Sandbox:
    return Sandbox(
        SandboxConfig(**SMALL, **fields, base_url=admin.url, extra_headers={"X-API-Key": key})
    )


async def _sh(sandbox: Sandbox, script: str) -> str:
    answer = await sandbox.execute(Command(command=["bash", "-c", script], timeout=60))
    assert answer.exit_code == 0, (script, answer.stdout, answer.stderr)
    return answer.stdout.strip()


async def _delete_all(sandbox: Sandbox) -> None:
    for snap in await sandbox.snapshots():
        for _ in range(300):
            try:
                await sandbox.delete_snapshot(snap.name)
                break
            except RockError as exc:
                if "still used" not in str(exc):
                    raise
                await asyncio.sleep(0.1)


async def test_another_tenant_can_neither_see_nor_use_nor_delete_a_snapshot(admin: Any) -> None:
    name = f"task-{uuid.uuid4().hex[:10]}"
    a, b = _sandbox(admin, KEY_A), _sandbox(admin, KEY_B)
    await a.start()
    await b.start()
    started: list[Sandbox] = []
    try:
        await _sh(a, "echo team-a > /owner.txt")
        await _sh(b, "echo team-b > /owner.txt")
        await a.snapshot(name=name)
        assert name in {s.name for s in await a.snapshots()}
        assert name not in {s.name for s in await b.snapshots()}
        with pytest.raises(RockError, match=f"unknown snapshot '{name}'"):
            await _sandbox(admin, KEY_B, snapshot=name).start()
        with pytest.raises(RockError, match=f"unknown snapshot '{name}'"):
            await b.delete_snapshot(name)
        driver_b = b._get_driver()
        for call in (driver_b.snapshot(a.sandbox_id, "stolen"), driver_b.fork(a.sandbox_id, 1)):
            with pytest.raises(RockError, match=f"Sandbox {a.sandbox_id} not found"):
                await call
        # The same name is each tenant's own.
        await b.snapshot(name=name)
        for key, owner in ((KEY_A, "team-a"), (KEY_B, "team-b")):
            child = _sandbox(admin, key, snapshot=name)
            started.append(child)
            await child.start()
            assert await _sh(child, "cat /owner.txt") == owner
        assert name in {s.name for s in await a.snapshots()}  # b's snapshot did not replace a's
    finally:
        for sandbox in (*started, a, b):
            await sandbox.stop()
        await _delete_all(a)
        await _delete_all(b)


async def test_a_fork_past_the_tenants_quota_is_refused_naming_it(admin: Any) -> None:
    parent = _sandbox(admin, KEY_Q)
    await parent.start()
    forks: list[Sandbox] = []
    try:
        with pytest.raises(
            RockError,
            match=r"fork of 2: tenant 'team-q': max_sandboxes 2 reached \(using 1, asked 2\)",
        ):
            await parent.fork(2)
        assert await parent.snapshots() == []  # refused before any snapshot was made
        forks = await parent.fork(1)
        assert len(forks) == 1 and (await forks[0].get_status()).state == "running"
    finally:
        for sandbox in (*forks, parent):
            await sandbox.stop()
        await _delete_all(parent)


async def test_a_snapshot_or_fork_past_the_tenants_snapshot_limit_is_refused_naming_it(
    admin: Any,
) -> None:
    parent = _sandbox(admin, KEY_S)
    await parent.start()
    forks: list[Sandbox] = []
    try:
        await parent.snapshot(name="first")
        refusal = r"tenant 'team-s': max_snapshots 1 reached \(using 1, asked 1\)"
        with pytest.raises(RockError, match=refusal) as refused:
            await parent.snapshot(name="second")
        assert refused.value.code == 4029
        await _sh(parent, "touch /after-first")  # changed: a fork needs a snapshot of its own
        with pytest.raises(RockError, match=refusal):
            await parent.fork(1)
        assert [s.name for s in await parent.snapshots()] == ["first"]
        await parent.delete_snapshot("first")
        forks = await parent.fork(1)  # room again: the fork's snapshot is the one kept
        assert len(await parent.snapshots()) == 1
        forks += await parent.fork(1)  # unchanged since that one: forked from it, none made
        assert len(await parent.snapshots()) == 1
    finally:
        for sandbox in (*forks, parent):
            await sandbox.stop()
        await _delete_all(parent)


async def test_a_reset_to_another_tenants_snapshot_is_an_unknown_snapshot(admin: Any) -> None:
    name = f"task-{uuid.uuid4().hex[:10]}"
    a, b = _sandbox(admin, KEY_A), _sandbox(admin, KEY_B)
    await a.start()
    await b.start()
    try:
        await _sh(a, "echo team-a > /owner.txt")
        await a.snapshot(name=name)
        await _sh(b, "echo team-b > /owner.txt")
        with pytest.raises(RockError, match=f"unknown snapshot '{name}'"):
            await b.reset(snapshot=name)
        with pytest.raises(RockError, match=f"Sandbox {a.sandbox_id} not found"):
            await b._get_driver().reset(a.sandbox_id)
        assert await _sh(b, "cat /owner.txt") == "team-b"  # refused: nothing changed
        await _sh(a, "rm /owner.txt")
        await a.reset(snapshot=name)
        assert await _sh(a, "cat /owner.txt") == "team-a"
    finally:
        for sandbox in (a, b):
            await sandbox.stop()
        await _delete_all(a)


async def test_admin_status_shows_a_tenants_snapshots_and_its_max_snapshots(admin: Any) -> None:
    parent = _sandbox(admin, KEY_S)
    await parent.start()
    try:
        await parent.snapshot(name="counted")
        async with httpx.AsyncClient(base_url=admin.url, headers={"X-API-Key": KEY_S}) as http:
            answer = await http.get("/admin/status")
        row = answer.json()["tenants"]["team-s"]
        assert row["snapshots"] == 1 and row["quota"]["max_snapshots"] == 1
        done = await asyncio.to_thread(
            subprocess.run,
            [os.path.join(os.path.dirname(sys.executable), "rock"), "admin", "status"],
            capture_output=True,
            text=True,
            env={
                **os.environ,
                "ROCK_ADMIN_STATE_DIR": str(admin.state_dir),
                "ROCK_API_KEY": KEY_S,
            },
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert "tenant:    team-s: 1 sandboxes, " in done.stdout, done.stdout
        assert ", 1 snapshots (max 1)" in done.stdout, done.stdout
    finally:
        await parent.stop()
        await _delete_all(parent)
