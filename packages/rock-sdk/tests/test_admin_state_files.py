"""Secrets at rest (issue 22, point 7): the admin's state folder is its user's alone (0700) and
``rock.db``, which holds every sandbox's rocklet secret, is 0600; a state folder of another user
is refused before anything is written. Against ``rock admin serve`` as a subprocess."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from .conftest import _rock_command

NOBODY = 65534


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_the_state_folder_is_0700_and_the_store_0600(
    tmp_path: Path, docker_client: Any, admin_launcher: Any
) -> None:
    """A state folder that others could read (as ``mkdir`` makes it) is narrowed at start; the
    store and its journal are made readable by the admin's user alone."""
    launch_admin, stop_admin = admin_launcher
    state = tmp_path / "state"
    state.mkdir()
    os.chmod(state, 0o755)
    admin = launch_admin(state)
    try:
        assert _mode(state) == 0o700
        stores = sorted(p.name for p in state.glob("rock.db*"))
        assert "rock.db" in stores, stores
        assert {name: _mode(state / name) for name in stores} == dict.fromkeys(stores, 0o600)
    finally:
        stop_admin(admin, docker_client)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user takes root")
def test_a_state_folder_of_another_user_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    os.chown(state, NOBODY, NOBODY)
    env = {**os.environ, "ROCK_ADMIN_STATE_DIR": str(state)}
    env.pop("ROCK_BASE_URL", None)
    done = subprocess.run(
        [*_rock_command(), "admin", "serve", "--host", "127.0.0.1", "--port", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert (
        f"admin.state_dir (ROCK_ADMIN_STATE_DIR): {state} belongs to another user (owner uid {NOBODY}, mode drwx------"
        in done.stderr
    ), done.stderr
    assert list(state.iterdir()) == [], "nothing is written into it"
