"""``rock sandbox commit SANDBOX_ID IMAGE_TAG`` as people use it: the ``rock`` command run as a
subprocess against a real admin, the sandbox on the local Docker engine; a sandbox started from
the printed tag has the committed file, and a push without a configured registry is refused,
naming the setting."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import docker.errors
import pytest

pytestmark = [pytest.mark.docker]

ROCK = Path(sys.executable).with_name("rock")
SMALL = ["--image", "python:3.11", "--memory", "256m", "--cpus", "0.5"]


def _rock(admin: Any, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("ROCK_BASE_URL", "ROCK_API_KEY", "ROCK_CONFIG")
    }
    env.update(ROCK_ADMIN_STATE_DIR=str(admin.state_dir), ROCK_BASE_URL=admin.url, COLUMNS="80")
    return subprocess.run([str(ROCK), *args], env=env, capture_output=True, text=True, timeout=300)


def _ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip()


def test_commit_from_the_command_line_prints_a_tag_new_sandboxes_start_from(
    admin: Any, docker_client: Any
) -> None:
    tag = f"rock-commit-cli:{uuid.uuid4().hex[:10]}"
    parent = _ok(_rock(admin, "sandbox", "create", *SMALL))
    child = ""
    try:
        _ok(_rock(admin, "sandbox", "exec", parent, "--", "sh", "-c", "echo cli > /cli.txt"))
        assert _ok(_rock(admin, "sandbox", "commit", parent, tag)) == tag
        child = _ok(_rock(admin, "sandbox", "create", "--image", tag, "--memory", "256m"))
        assert _ok(_rock(admin, "sandbox", "exec", child, "--", "cat", "/cli.txt")) == "cli"
        pushed = _rock(admin, "sandbox", "commit", parent, "registry.example.com/team/env:1")
        assert pushed.returncode != 0
        assert "commit_registries" in pushed.stderr, pushed.stderr
    finally:
        for sandbox_id in (child, parent):
            if sandbox_id:
                _rock(admin, "sandbox", "stop", sandbox_id)
        try:
            docker_client.api.remove_image(tag, force=True)
        except docker.errors.ImageNotFound:
            pass
