"""GEM under any account (issue #28 point 5): an admin run with another ``HOME`` (a service
account's) serves ``rock.make`` on ROCK's plain ``python:3.11``, whose sandboxes get GEM's runtime
uploaded from where the set-up put it (not the set-up user's ``~/.cache``); a runtime that is not
there is an error naming the command that prepares it."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path
from typing import Any

import pytest

import rock
from rock.sdk.envs import EnvFailed

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def prepared(docker_client: Any) -> None:
    """The set-up's GEM step (the runtime zip, and the images)."""
    subprocess.run([str(ROOT / "scripts" / "ensure-gem-image.sh")], check=True, timeout=600)


def _account_env(home: Path) -> dict[str, str]:
    """What a service account's admin sees: an empty home, no cache of the set-up user's."""
    home.mkdir()
    return {"HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache")}


def test_an_admin_of_another_home_makes_gem_envs_on_plain_python(
    prepared: None, tmp_path: Path, admin_launcher: Any, docker_client: Any
) -> None:
    launch_admin, stop_admin = admin_launcher
    state = tmp_path / "state"
    state.mkdir()
    server = launch_admin(
        state,
        config='[plugins.gem]\nimage = "python:3.11"\n',
        env=_account_env(tmp_path / "service-home"),
    )
    try:
        env = rock.make("game:Sokoban-v0-easy", base_url=server.url)
        try:
            observation, info = env.reset(seed=7)
            assert "Sokoban" in observation
            rng = random.Random(7)
            _, reward, _, _, _ = env.step("\\boxed{%s}" % rng.choice(["up", "down"]))
            assert isinstance(reward, float)
        finally:
            env.close()
    finally:
        stop_admin(server, docker_client)
    assert not (tmp_path / "service-home" / ".cache" / "rock" / "gem-runtime").exists()


def test_a_missing_runtime_fails_the_make_naming_the_command_to_run(
    prepared: None, tmp_path: Path, admin_launcher: Any, docker_client: Any
) -> None:
    launch_admin, stop_admin = admin_launcher
    state = tmp_path / "state"
    state.mkdir()
    empty = tmp_path / "no-runtime-here"
    server = launch_admin(
        state,
        config=f'[plugins.gem]\nimage = "python:3.11"\nruntime_dir = "{empty}"\n',
        env=_account_env(tmp_path / "service-home"),
    )
    try:
        with pytest.raises(EnvFailed) as caught:
            rock.make("game:Sokoban-v0-easy", base_url=server.url)
    finally:
        stop_admin(server, docker_client)
    assert caught.value.kind == "missing_dependency"
    message = str(caught.value)
    assert f"-m rock_gem.runtime 3.11 --dir {empty}" in message, message
    assert "No module named pip" not in message
