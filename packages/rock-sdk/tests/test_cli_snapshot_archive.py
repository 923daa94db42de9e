"""``rock sandbox snapshot --archive`` against a real admin with a filesystem archive store: the
snapshot is kept in the store as well, and once the node's image of it is gone (pruned, as on a
later day) a sandbox started from it (the remote SDK's ``SandboxConfig(snapshot=...)``) gets its
files from the store (issue #25 point 1)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rock.actions import Command
from rock.sdk.sandbox.client import Sandbox
from rock.sdk.sandbox.config import SandboxConfig

pytestmark = [pytest.mark.docker]

ROCK = Path(sys.executable).with_name("rock")
SMALL = ["--image", "python:3.11", "--memory", "256m", "--cpus", "0.5"]


class Admin:
    """The module's admin and its archive store's folder."""

    def __init__(self, state_dir: Path, url: str, store: Path) -> None:
        self.state_dir = state_dir
        self.url = url
        self.store = store

    def rock(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("ROCK_BASE_URL", "ROCK_API_KEY", "ROCK_CONFIG")
        }
        env.update(ROCK_ADMIN_STATE_DIR=str(self.state_dir), ROCK_BASE_URL=self.url, COLUMNS="80")
        return subprocess.run(
            [str(ROCK), *args], env=env, capture_output=True, text=True, timeout=300
        )


@pytest.fixture(scope="module")
def admin(
    tmp_path_factory: pytest.TempPathFactory, docker_client: Any, admin_launcher: Any
) -> Iterator[Admin]:
    launch_admin, stop_admin = admin_launcher
    store = tmp_path_factory.mktemp("snapshot-store")
    config = (
        '[engine]\nstop_timeout = 1\narchive_store = "fs"\n\n'
        f'[plugins.archive-fs]\nroot = "{store}"\n'
    )
    server = launch_admin(tmp_path_factory.mktemp("cli-snapshot-archive"), config=config)
    try:
        yield Admin(server.state_dir, server.url, store)
    finally:
        stop_admin(server, docker_client)


async def _start_and_read(url: str, snapshot: str, path: str) -> str:
    """Start a sandbox from ``snapshot`` through the remote SDK, read ``path``, stop it."""
    child = Sandbox(
        SandboxConfig(image="python:3.11", memory="256m", cpus=0.5, snapshot=snapshot, base_url=url)
    )
    await child.start()
    try:
        answer = await child.execute(Command(command=["cat", path]))
        return answer.stdout.strip()
    finally:
        await child.stop()


def _ok(done: Any) -> str:
    assert done.returncode == 0, done.stdout + done.stderr
    return str(done.stdout)


def test_a_snapshot_kept_in_the_archive_store_starts_sandboxes_after_its_image_is_gone(
    admin: Admin, docker_client: Any
) -> None:
    parent = _ok(admin.rock("sandbox", "create", *SMALL)).strip()
    name = f"kept-{uuid.uuid4().hex[:10]}"
    _ok(admin.rock("sandbox", "exec", parent, "--", "sh", "-c", "echo kept > /kept.txt"))
    made = admin.rock("sandbox", "snapshot", parent, "--name", name, "--archive")
    assert _ok(made).strip() == name
    assert "kept in the archive store" in made.stderr
    assert [p.name for p in admin.store.glob("snapshot@*/*") if p.is_file()] != []
    listed = json.loads(_ok(admin.rock("sandbox", "snapshots", "--json")))
    (snap,) = [s for s in listed if s["name"] == name]
    assert snap["archived"] is True
    _ok(admin.rock("sandbox", "stop", parent))

    # A later day: the node's image of the snapshot was pruned.
    docker_client.images.remove(snap["image"], force=True)
    assert asyncio.run(_start_and_read(admin.url, name, "/kept.txt")) == "kept"
    for _ in range(100):  # its container may still be being removed
        if admin.rock("sandbox", "snapshots", "--delete", name).returncode == 0:
            break
    assert not [p for p in admin.store.glob("snapshot@*") if p.is_dir()]


def test_a_snapshot_only_in_the_archive_store_is_listed_and_can_be_deleted(
    admin: Admin, docker_client: Any
) -> None:
    parent = _ok(admin.rock("sandbox", "create", *SMALL)).strip()
    name = f"stored-{uuid.uuid4().hex[:10]}"
    _ok(admin.rock("sandbox", "snapshot", parent, "--name", name, "--archive"))
    _ok(admin.rock("sandbox", "stop", parent))
    listed = json.loads(_ok(admin.rock("sandbox", "snapshots", "--json")))
    (snap,) = [s for s in listed if s["name"] == name]
    assert snap["on_node"] is True
    # A later day: the node's image of the snapshot was pruned; the store still has it.
    docker_client.images.remove(snap["image"], force=True)

    listed = json.loads(_ok(admin.rock("sandbox", "snapshots", "--json")))
    (stored,) = [s for s in listed if s["name"] == name]
    assert stored["archived"] is True and stored["on_node"] is False
    assert stored["sandbox_id"] == parent and stored["size"] == snap["size"]
    assert stored["source_image"] == "python:3.11" and stored["image"] == ""
    row = [line for line in _ok(admin.rock("sandbox", "snapshots")).splitlines() if name in line]
    assert len(row) == 1 and "(archive store)" in row[0]

    done = admin.rock("sandbox", "snapshots", "--delete", name)
    assert _ok(done).strip() == f"snapshot {name} deleted"
    assert name not in {
        s["name"] for s in json.loads(_ok(admin.rock("sandbox", "snapshots", "--json")))
    }
    assert not [p for p in admin.store.glob("snapshot@*") if p.is_dir()]
