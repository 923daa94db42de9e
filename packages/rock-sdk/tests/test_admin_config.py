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
from rock_core.ports import listen_port
from rock_core.sizes import GiB

ROCK = Path(sys.executable).with_name("rock")


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_defaults_keep_sandboxes_and_store_them_in_the_state_dir(tmp_path: Path) -> None:
    settings = load_settings(environ={"ROCK_ADMIN_STATE_DIR": str(tmp_path)})
    assert (settings.host, settings.port, settings.url) == (
        "127.0.0.1",
        8080,
        "http://127.0.0.1:8080",
    )
    assert settings.state_dir == tmp_path
    assert settings.engine.store_path == str(tmp_path / "rock.db")
    assert settings.engine.remove_on_close is False
    assert settings.owner == f"admin:{tmp_path / 'rock.db'}"
    assert (settings.max_json_body, settings.max_upload_body) == (10 * MiB, 100 * MiB)
    assert (settings.pid_file, settings.log_file) == (
        tmp_path / "admin.pid",
        tmp_path / "admin.log",
    )


def test_file_then_environment_then_flags(tmp_path: Path) -> None:
    config = _write(
        tmp_path / "admin.toml",
        f"""
[admin]
port = 9001
host = "0.0.0.0"
state_dir = "{tmp_path / "state"}"
max_upload_body = "5m"

[engine]
max_concurrent_starts = 3
max_memory = "8g"

[engine.runtime_options]
network = "bridge"
""",
    )
    settings = load_settings(
        config, environ={"ROCK_ADMIN_PORT": "9002", "ROCK_ENGINE_MAX_CONCURRENT_STARTS": "5"}
    )
    assert settings.port == 9002  # the environment beats the file
    assert settings.url == "http://127.0.0.1:9002"  # 0.0.0.0 is reached through 127.0.0.1
    assert settings.max_upload_body == 5 * MiB
    assert settings.engine.max_concurrent_starts == 5
    assert settings.engine.max_memory == 8 * GiB
    assert dict(settings.engine.runtime_options) == {"network": "bridge"}
    assert settings.engine.store_path == str(tmp_path / "state" / "rock.db")
    flagged = load_settings(config, environ={"ROCK_ADMIN_PORT": "9002"}, port=9003, host=None)
    assert (flagged.port, flagged.host) == (
        9003,
        "0.0.0.0",
    )  # a flag beats both; None is "not given"
    via_env = load_settings(
        environ={"ROCK_CONFIG": str(config), "ROCK_ADMIN_STATE_DIR": str(tmp_path)}
    )
    assert via_env.port == 9001


def test_warm_pools_from_the_file_or_the_environment(tmp_path: Path) -> None:
    config = _write(
        tmp_path / "admin.toml",
        """
[[engine.warm_pools]]
image = "python:3.11"
memory = "2g"
cpus = 1
size = 4

[[engine.warm_pools]]
image = "node:20"
size = 1
""",
    )
    settings = load_settings(config, environ={"ROCK_ADMIN_STATE_DIR": str(tmp_path)})
    pools = settings.engine.warm_pools
    assert [(p.request.image, p.request.memory, p.request.cpus, p.size) for p in pools] == [
        ("python:3.11", "2g", 1.0, 4),
        ("node:20", "8g", 2.0, 1),
    ]
    from_env = load_settings(
        environ={
            "ROCK_ADMIN_STATE_DIR": str(tmp_path),
            "ROCK_ENGINE_WARM_POOLS": '[{"image": "python:3.11", "size": 2}]',
        }
    )
    assert [(p.request.image, p.size) for p in from_env.engine.warm_pools] == [("python:3.11", 2)]


def test_remove_on_close_cannot_be_switched_on(tmp_path: Path) -> None:
    config = _write(tmp_path / "admin.toml", "[engine]\nremove_on_close = true\n")
    with pytest.raises(
        InvalidParameter,
        match=r"engine\.remove_on_close: not a known key \(known: allowed_cap_add, ",
    ):
        load_settings(config, environ={"ROCK_ADMIN_STATE_DIR": str(tmp_path)})


@pytest.mark.parametrize(
    ("text", "environ", "named"),
    [
        ("[admin]\nport = 'eighty'\n", {}, "admin.port: expected an integer, got 'eighty'"),
        ("[admin]\nmax_json_body = 'huge'\n", {}, "admin.max_json_body: invalid size 'huge'"),
        ("[admin]\ncolour = 'red'\n", {}, "admin.colour: not a known key (known: access_log, "),
        ("[engines]\n", {}, "engines: not a known key (known: admin, engine, plugins)"),
        ("not toml at all [", {}, "not valid TOML"),
        (
            "",
            {"ROCK_ADMIN_ACCESS_LOG": "perhaps"},
            "environment variable ROCK_ADMIN_ACCESS_LOG: admin.access_log: expected true or false, got 'perhaps'",
        ),
        (
            "",
            {"ROCK_ENGINE_MAX_CPUS": "many"},
            "environment variable ROCK_ENGINE_MAX_CPUS: engine.max_cpus: expected a number, got 'many'",
        ),
        (
            "[[engine.warm_pools]]\nimage = 'python:3.11'\nmemory = '2q'\nsize = 2\n",
            {},
            "engine.warm_pools[0]: invalid parameter: memory: invalid size '2q'",
        ),
        (
            "[[engine.warm_pools]]\nimage = 'python:3.11'\n",
            {},
            "engine.warm_pools[0].size: missing",
        ),
        (
            "",
            {"ROCK_ENGINE_WARM_POOLS": "[{'image': 1}]"},
            "environment variable ROCK_ENGINE_WARM_POOLS: engine.warm_pools: expected JSON (",
        ),
    ],
)
def test_bad_settings_name_their_key(
    tmp_path: Path, text: str, environ: dict[str, str], named: str
) -> None:
    config = _write(tmp_path / "admin.toml", text)
    with pytest.raises(InvalidParameter) as info:
        load_settings(config, environ={"ROCK_ADMIN_STATE_DIR": str(tmp_path), **environ})
    assert named in str(info.value)


@pytest.mark.parametrize(
    ("text", "environ", "source", "field", "value", "says"),
    [
        (
            "[admin]\nport = 0\n",
            {},
            "file",
            "admin.port",
            0,
            "expected a port number 1..65535, got 0",
        ),
        (
            "[admin]\nbatch_max_count = -1\n",
            {},
            "file",
            "admin.batch_max_count",
            -1,
            "expected an integer > 0, got -1",
        ),
        (
            "[admin]\nstrict_fields = 'maybe'\n",
            {},
            "file",
            "admin.strict_fields",
            "maybe",
            "expected true or false, got 'maybe'",
        ),
        (
            "[admin]\napi_keys = [{ tenant = 'a b', sha256 = '" + "0" * 64 + "' }]\n",
            {},
            "file",
            "admin.api_keys[0].tenant",
            "a b",
            "got 'a b'",
        ),
        (
            "[admin]\napi_keys = [{ tenant = 't', key = 'k-long-enough-1234', colour = 1 }]\n",
            {},
            "file",
            "admin.api_keys[0]",
            None,
            "extra field 'colour' not allowed",
        ),
        (
            "[engine]\nmax_concurrent_starts = 0\n",
            {},
            "file",
            "engine.max_concurrent_starts",
            0,
            "expected an integer > 0, got 0",
        ),
        (
            "[engine]\nmax_memory = '8q'\n",
            {},
            "file",
            "engine.max_memory",
            "8q",
            "invalid size '8q'",
        ),
        (
            "[engine]\nallowed_cap_add = ['FLY']\n",
            {},
            "file",
            "engine.allowed_cap_add",
            ["FLY"],
            "unknown capability 'FLY'",
        ),
        (
            "[engine]\nruntime_options = 5\n",
            {},
            "file",
            "engine.runtime_options",
            5,
            "expected an object, got 5",
        ),
        (
            "[engine]\ndefault_pids_limit = 5000\nmax_pids_limit = 100\n",
            {},
            "file",
            "engine.default_pids_limit",
            5000,
            "5000 is above max_pids_limit 100",
        ),
        (
            "",
            {"ROCK_ADMIN_PORT": "70000"},
            "environment variable ROCK_ADMIN_PORT",
            "admin.port",
            "70000",
            "expected a port number 1..65535, got '70000'",
        ),
        (
            "",
            {"ROCK_ENGINE_DISK_KEEP_SECONDS": "-5"},
            "environment variable ROCK_ENGINE_DISK_KEEP_SECONDS",
            "engine.disk_keep_seconds",
            "-5",
            "expected an integer >= 0, got '-5'",
        ),
        ("[plugins]\nfoo = 5\n", {}, "file", "plugins['foo']", 5, "expected an object, got 5"),
    ],
)
def test_a_bad_setting_names_its_source_path_and_value(
    tmp_path: Path,
    text: str,
    environ: dict[str, str],
    source: str,
    field: str,
    value: object,
    says: str,
) -> None:
    config = _write(tmp_path / "admin.toml", text)
    with pytest.raises(InvalidParameter) as info:
        load_settings(config, environ={"ROCK_ADMIN_STATE_DIR": str(tmp_path), **environ})
    where = f"config file {config}" if source == "file" else source
    assert info.value.message.startswith(f"{where}: {field}: ")
    assert says in info.value.message
    assert (info.value.field, info.value.value) == (field, value)


def test_every_bad_value_of_a_file_is_named_at_once(tmp_path: Path) -> None:
    config = _write(
        tmp_path / "admin.toml", "[admin]\nport = 'x'\nmax_json_body = -1\ncolour = 1\n"
    )
    with pytest.raises(InvalidParameter) as info:
        load_settings(config, environ={"ROCK_ADMIN_STATE_DIR": str(tmp_path)})
    assert info.value.field == "admin.port, admin.max_json_body, admin.colour"
    for part in (
        "admin.port: expected an integer, got 'x'",
        "admin.max_json_body: invalid size -1",
        "admin.colour: not a known key",
    ):
        assert part in info.value.message


def test_settings_written_as_text_are_read_as_the_file_would_hold_them(tmp_path: Path) -> None:
    settings = load_settings(
        environ={
            "ROCK_ADMIN_STATE_DIR": str(tmp_path),
            "ROCK_ADMIN_MAX_JSON_BODY": "2m",
            "ROCK_ADMIN_STRICT_FIELDS": "true",
            "ROCK_ENGINE_ALLOWED_CAP_ADD": "net_raw, CAP_SYS_PTRACE",
            "ROCK_ENGINE_MAX_AUTO_DELETE_SECONDS": "none",
            "ROCK_ENGINE_RUNTIME_OPTIONS": '{"network": "bridge"}',
        }
    )
    assert (settings.max_json_body, settings.strict_fields) == (2 * MiB, True)
    assert settings.engine.allowed_cap_add == ("NET_RAW", "SYS_PTRACE")
    assert settings.engine.max_auto_delete_seconds is None
    assert dict(settings.engine.runtime_options) == {"network": "bridge"}


def test_cli_reports_a_bad_config_and_a_missing_admin(tmp_path: Path) -> None:
    env = {**os.environ, "ROCK_ADMIN_STATE_DIR": str(tmp_path)}
    env.pop("ROCK_CONFIG", None)
    bad = _write(tmp_path / "bad.toml", "[admin]\nport = 'x'\n")
    started = subprocess.run(
        [str(ROCK), "admin", "start", "--config", str(bad)], env=env, capture_output=True, text=True
    )
    assert started.returncode == 1 and "admin.port: expected an integer, got 'x'" in started.stderr
    shown = subprocess.run(
        [str(ROCK), "admin", "status", "--json"], env=env, capture_output=True, text=True
    )
    assert shown.returncode == 3 and json.loads(shown.stdout) == {"running": False}
    stopped = subprocess.run([str(ROCK), "admin", "stop"], env=env, capture_output=True, text=True)
    assert stopped.returncode == 0 and "not running" in stopped.stdout


def test_admin_start_names_every_bad_setting_of_the_file(tmp_path: Path) -> None:
    env = {**os.environ, "ROCK_ADMIN_STATE_DIR": str(tmp_path)}
    env.pop("ROCK_CONFIG", None)
    bad = _write(
        tmp_path / "bad.toml",
        f"""
[admin]
batch_max_count = 0
api_keys = [{{ tenant = "a", sha256 = "{"0" * 64}" }}, {{ tenant = "b", sha256 = "not-hex" }}]

[engine]
max_memory = "lots"
""",
    )
    started = subprocess.run(
        [str(ROCK), "admin", "start", "--config", str(bad)], env=env, capture_output=True, text=True
    )
    assert started.returncode == 1
    for part in (
        "admin.batch_max_count: expected an integer > 0, got 0",
        "admin.api_keys[1].sha256: expected 64 hex digits, got a value not shown (a secret)",
        "engine.max_memory: invalid size 'lots'",
    ):
        assert part in started.stderr
    assert "not-hex" not in started.stderr
    assert not (tmp_path / "admin.pid").exists()


def test_a_stale_pid_file_is_not_a_running_admin(tmp_path: Path) -> None:
    settings = load_settings(environ={"ROCK_ADMIN_STATE_DIR": str(tmp_path)})
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    settings.pid_file.write_text(json.dumps({"pid": int(dead.stdout), "url": settings.url}))
    assert daemon.read_pid_file(settings) is None
    assert daemon.status(settings) is None
    assert daemon.stop(settings) is None
    # A pid that is alive but belongs to another process (another start time) is not the admin.
    settings.pid_file.write_text(
        json.dumps({"pid": os.getpid(), "proc_start": "1", "url": settings.url})
    )
    assert daemon.read_pid_file(settings) is None


def test_an_unknown_plugin_table_is_one_line_naming_it_not_a_traceback(tmp_path: Path) -> None:
    env = {**os.environ, "ROCK_ADMIN_STATE_DIR": str(tmp_path)}
    env.pop("ROCK_CONFIG", None)
    bad = _write(tmp_path / "bad.toml", "[plugins.nosuch]\nfoo = 1\n")
    served = subprocess.run(
        [str(ROCK), "admin", "serve", "--port", "1", "--config", str(bad)],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert served.returncode == 1
    assert "plugins.nosuch: no plugin named 'nosuch' is installed" in served.stderr
    assert "Traceback" not in served.stderr and len(served.stderr.strip().splitlines()) == 1


def test_an_admin_serving_in_the_foreground_is_said_to_log_to_its_terminal(
    tmp_path: Path,
) -> None:
    import time

    import httpx

    env = {**os.environ, "ROCK_ADMIN_STATE_DIR": str(tmp_path)}
    env.pop("ROCK_CONFIG", None)
    port = listen_port()
    served = subprocess.Popen(
        [str(ROCK), "admin", "serve", "--port", str(port)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        status = subprocess.run(
            [str(ROCK), "admin", "status"], env=env, capture_output=True, text=True, timeout=60
        )
        assert "log:       its terminal (rock admin serve): no log file" in status.stdout
        shown = json.loads(
            subprocess.run(
                [str(ROCK), "admin", "status", "--json"],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            ).stdout  # fmt: skip
        )
        assert shown["running"] is True and shown["log_file"] is None
        log = subprocess.run([str(ROCK), "log"], env=env, capture_output=True, text=True)
        assert log.returncode == 3 and "writes its log to its own terminal" in log.stderr
    finally:
        served.terminate()
        served.wait(60)
