"""``rock sandbox snapshot``, ``snapshots`` and ``fork`` as people and scripts use them: the
``rock`` command run as a subprocess against a real admin, sandboxes on the local Docker engine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.docker]

ROCK = Path(sys.executable).with_name("rock")
SMALL = ["--image", "python:3.11", "--memory", "256m", "--cpus", "0.5"]


class Admin:
    """The module's admin: ``rock`` run against it (its state directory, ``ROCK_BASE_URL``)."""

    def __init__(self, state_dir: Path, url: str) -> None:
        self.state_dir = state_dir
        self.url = url

    def rock(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("ROCK_BASE_URL", "ROCK_API_KEY", "ROCK_CONFIG")
        }
        env.update(ROCK_ADMIN_STATE_DIR=str(self.state_dir), ROCK_BASE_URL=self.url, COLUMNS="80")
        return subprocess.run(
            [str(ROCK), *args], env=env, capture_output=True, text=True, timeout=120
        )

    def create(self) -> str:
        done = self.rock("sandbox", "create", *SMALL)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout.strip()


@pytest.fixture(scope="module")
def admin(
    tmp_path_factory: pytest.TempPathFactory, docker_client: Any, admin_launcher: Any
) -> Iterator[Admin]:
    launch_admin, stop_admin = admin_launcher
    server = launch_admin(
        tmp_path_factory.mktemp("cli-snapshots"), config="[engine]\nstop_timeout = 1\n"
    )
    try:
        yield Admin(server.state_dir, server.url)
    finally:
        stop_admin(server, docker_client)


def _ok(done: Any) -> str:
    assert done.returncode == 0, done.stdout + done.stderr
    return str(done.stdout)


def test_snapshot_list_fork_and_delete_from_the_command_line(admin: Admin) -> None:
    parent = admin.create()
    name = f"cli-{uuid.uuid4().hex[:10]}"
    _ok(admin.rock("sandbox", "exec", parent, "--", "sh", "-c", "echo from-cli > /cli.txt"))
    made = admin.rock("sandbox", "snapshot", parent, "--name", name)
    assert _ok(made).strip() == name and "over python:3.11" in made.stderr
    listed = json.loads(_ok(admin.rock("sandbox", "snapshots", "--json")))
    (mine,) = [s for s in listed if s["name"] == name]
    assert mine["sandbox_id"] == parent and mine["size"] > 0 and mine["created_at"]
    table = _ok(admin.rock("sandbox", "snapshots"))
    assert table.splitlines()[0].split() == ["NAME", "SANDBOX", "SIZE", "CREATED", "IMAGE"]
    assert name in table

    children = _ok(admin.rock("sandbox", "fork", parent, "2")).split()
    assert len(children) == 2 and parent not in children
    for child in children:
        out = _ok(admin.rock("sandbox", "exec", child, "--", "cat", "/cli.txt"))
        assert out.strip() == "from-cli"
        _ok(admin.rock("sandbox", "stop", child))
    again = admin.rock("sandbox", "snapshot", parent, "--name", name)
    assert again.returncode == 1 and f"already has a snapshot '{name}'" in again.stderr
    _ok(admin.rock("sandbox", "stop", parent))
    for snap in json.loads(_ok(admin.rock("sandbox", "snapshots", "--json"))):
        for _ in range(100):
            done = admin.rock("sandbox", "snapshots", "--delete", snap["name"])
            if done.returncode == 0 or "still used" not in done.stderr:
                break
        assert _ok(done).strip() == f"snapshot {snap['name']} deleted"
    gone = admin.rock("sandbox", "snapshots", "--delete", name)
    assert gone.returncode == 1 and f"unknown snapshot '{name}'" in gone.stderr
    assert json.loads(_ok(admin.rock("sandbox", "snapshots", "--json"))) == []


def test_fork_count_must_be_at_least_one(admin: Admin) -> None:
    done = admin.rock("sandbox", "fork", "any", "0")
    assert done.returncode == 2 and "COUNT" in done.stderr


def test_create_starts_a_sandbox_from_a_snapshot_by_name(admin: Admin) -> None:
    parent = admin.create()
    name = f"start-{uuid.uuid4().hex[:10]}"
    _ok(admin.rock("sandbox", "exec", parent, "--", "sh", "-c", "echo prepared > /task.txt"))
    _ok(admin.rock("sandbox", "snapshot", parent, "--name", name))
    _ok(admin.rock("sandbox", "stop", parent))
    made = admin.rock("sandbox", "create", *SMALL, "--snapshot", name)
    child = _ok(made).strip()
    assert f"snapshot {name}" in made.stderr
    assert _ok(admin.rock("sandbox", "exec", child, "--", "cat", "/task.txt")).strip() == "prepared"
    _ok(admin.rock("sandbox", "stop", child))
    for _ in range(100):  # its container may still be being removed
        if admin.rock("sandbox", "snapshots", "--delete", name).returncode == 0:
            break


def test_create_from_an_unknown_snapshot_names_it(admin: Admin) -> None:
    done = admin.rock("sandbox", "create", *SMALL, "--snapshot", "never-made")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "unknown snapshot 'never-made'" in done.stderr
    assert done.stdout == ""
