"""The admin's settings (TOML file, ``ROCK_*`` variables, flags) and its pid-file bookkeeping.

No server and no Docker here: these are the rules a person configuring the admin relies on.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rock.admin import daemon
from rock.admin.config import MiB, load_settings
from rock_core.errors import InvalidParameter
from rock_core.units import GiB

ROCK = Path(sys.executable).with_name("rock")


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_defaults_keep_sandboxes_and_store_them_in_the_state_dir(tmp_path: Path) -> None:
    settings = load_settings(environ={"ROCK_ADMIN_STATE_DIR": str(tmp_path)})
    assert (settings.host, settings.port, settings.url) == ("127.0.0.1", 8080, "http://127.0.0.1:8080")
    assert settings.state_dir == tmp_path
    assert settings.engine.store_path == str(tmp_path / "rock.db")
    assert settings.engine.remove_on_close is False
    assert settings.owner == f"admin:{tmp_path / 'rock.db'}"
    assert (settings.max_json_body, settings.max_upload_body) == (10 * MiB, 100 * MiB)
    assert (settings.pid_file, settings.log_file) == (tmp_path / "admin.pid", tmp_path / "admin.log")


def test_file_then_environment_then_flags(tmp_path: Path) -> None:
    config = _write(tmp_path / "admin.toml", f"""
[admin]
port = 9001
host = "0.0.0.0"
state_dir = "{tmp_path / 'state'}"
max_upload_body = "5m"

[engine]
max_concurrent_starts = 3
max_memory = "8g"

[engine.runtime_options]
network = "bridge"
""")
    settings = load_settings(config, environ={"ROCK_ADMIN_PORT": "9002", "ROCK_ENGINE_MAX_CONCURRENT_STARTS": "5"})
    assert settings.port == 9002  # the environment beats the file
    assert settings.url == "http://127.0.0.1:9002"  # 0.0.0.0 is reached through 127.0.0.1
    assert settings.max_upload_body == 5 * MiB
    assert settings.engine.max_concurrent_starts == 5
    assert settings.engine.max_memory == 8 * GiB
    assert dict(settings.engine.runtime_options) == {"network": "bridge"}
    assert settings.engine.store_path == str(tmp_path / "state" / "rock.db")
    flagged = load_settings(config, environ={"ROCK_ADMIN_PORT": "9002"}, port=9003, host=None)
    assert (flagged.port, flagged.host) == (9003, "0.0.0.0")  # a flag beats both; None is "not given"
    via_env = load_settings(environ={"ROCK_CONFIG": str(config), "ROCK_ADMIN_STATE_DIR": str(tmp_path)})
    assert via_env.port == 9001


def test_warm_pools_from_the_file_or_the_environment(tmp_path: Path) -> None:
    config = _write(tmp_path / "admin.toml", """
[[engine.warm_pools]]
image = "python:3.11"
memory = "2g"
cpus = 1
size = 4

[[engine.warm_pools]]
image = "node:20"
size = 1
""")
    settings = load_settings(config, environ={"ROCK_ADMIN_STATE_DIR": str(tmp_path)})
    pools = settings.engine.warm_pools
    assert [(p.request.image, p.request.memory, p.request.cpus, p.size) for p in pools] == [
        ("python:3.11", "2g", 1.0, 4), ("node:20", "8g", 2.0, 1)
    ]
    from_env = load_settings(environ={
        "ROCK_ADMIN_STATE_DIR": str(tmp_path), "ROCK_ENGINE_WARM_POOLS": '[{"image": "python:3.11", "size": 2}]'
    })
    assert [(p.request.image, p.size) for p in from_env.engine.warm_pools] == [("python:3.11", 2)]


def test_remove_on_close_cannot_be_switched_on(tmp_path: Path) -> None:
    config = _write(tmp_path / "admin.toml", "[engine]\nremove_on_close = true\n")
    with pytest.raises(InvalidParameter, match="unknown key 'remove_on_close'"):
        load_settings(config, environ={"ROCK_ADMIN_STATE_DIR": str(tmp_path)})


@pytest.mark.parametrize(
    ("text", "environ", "named"),
    [
        ("[admin]\nport = 'eighty'\n", {}, "port"),
        ("[admin]\nmax_json_body = 'huge'\n", {}, "max_json_body"),
        ("[admin]\ncolour = 'red'\n", {}, "'colour'"),
        ("[engines]\n", {}, "engines"),
        ("not toml at all [", {}, "not valid TOML"),
        ("", {"ROCK_ADMIN_ACCESS_LOG": "perhaps"}, "ROCK_ADMIN_ACCESS_LOG"),
        ("", {"ROCK_ENGINE_MAX_CPUS": "many"}, "ROCK_ENGINE_MAX_CPUS"),
        ("[[engine.warm_pools]]\nimage = 'python:3.11'\nmemory = '2q'\nsize = 2\n", {}, r"warm_pools\[0\]: .*memory"),
        ("[[engine.warm_pools]]\nimage = 'python:3.11'\n", {}, r"warm_pools\[0\]\.size"),
        ("", {"ROCK_ENGINE_WARM_POOLS": "[{'image': 1}]"}, "ROCK_ENGINE_WARM_POOLS: warm_pools: expected a JSON list"),
    ],
)
def test_bad_settings_name_their_key(tmp_path: Path, text: str, environ: dict[str, str], named: str) -> None:
    config = _write(tmp_path / "admin.toml", text)
    with pytest.raises(InvalidParameter, match=named):
        load_settings(config, environ={"ROCK_ADMIN_STATE_DIR": str(tmp_path), **environ})


def test_cli_reports_a_bad_config_and_a_missing_admin(tmp_path: Path) -> None:
    env = {**os.environ, "ROCK_ADMIN_STATE_DIR": str(tmp_path)}
    env.pop("ROCK_CONFIG", None)
    bad = _write(tmp_path / "bad.toml", "[admin]\nport = 'x'\n")
    started = subprocess.run([str(ROCK), "admin", "start", "--config", str(bad)], env=env, capture_output=True, text=True)
    assert started.returncode == 1 and "port" in started.stderr
    shown = subprocess.run([str(ROCK), "admin", "status", "--json"], env=env, capture_output=True, text=True)
    assert shown.returncode == 3 and json.loads(shown.stdout) == {"running": False}
    stopped = subprocess.run([str(ROCK), "admin", "stop"], env=env, capture_output=True, text=True)
    assert stopped.returncode == 0 and "not running" in stopped.stdout


def test_a_stale_pid_file_is_not_a_running_admin(tmp_path: Path) -> None:
    settings = load_settings(environ={"ROCK_ADMIN_STATE_DIR": str(tmp_path)})
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    settings.pid_file.write_text(json.dumps({"pid": int(dead.stdout), "url": settings.url}))
    assert daemon.read_pid_file(settings) is None
    assert daemon.status(settings) is None
    assert daemon.stop(settings) is None
    # A pid that is alive but belongs to another process (another start time) is not the admin.
    settings.pid_file.write_text(json.dumps({"pid": os.getpid(), "proc_start": "1", "url": settings.url}))
    assert daemon.read_pid_file(settings) is None
