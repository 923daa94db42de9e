"""``rock sandbox ...`` and ``rock log`` as people and scripts use them: the ``rock`` command run
as a subprocess against a real admin (the conftest launcher's ``rock admin serve`` on a free port,
state and log in a temporary directory), sandboxes on the local Docker engine.

Every container the admin made is removed at the end (found by its ``rock.owner`` label).
"""

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

ROCK = Path(sys.executable).with_name("rock")
SMALL = ["--image", "python:3.11", "--memory", "256m", "--cpus", "0.5"]


def run_rock(
    *args: str, state_dir: Path, base_url: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``rock ARGS`` with its own state directory (and ``ROCK_BASE_URL`` when given); never raises."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("ROCK_BASE_URL", "ROCK_API_KEY", "ROCK_CONFIG")
    }
    env["ROCK_ADMIN_STATE_DIR"] = str(state_dir)
    env["COLUMNS"] = "80"  # a narrow terminal width must not cut ids in piped tables
    if base_url is not None:
        env["ROCK_BASE_URL"] = base_url
    return subprocess.run([str(ROCK), *args], env=env, capture_output=True, text=True, timeout=120)


class Admin:
    """The module's admin: its state directory and URL, and ``rock`` run against it."""

    def __init__(self, state_dir: Path, url: str) -> None:
        self.state_dir = state_dir
        self.url = url

    def rock(
        self, *args: str, base_url: str | None = "default"
    ) -> subprocess.CompletedProcess[str]:
        """``rock ARGS`` against this admin (through ``ROCK_BASE_URL`` unless told otherwise)."""
        url = self.url if base_url == "default" else base_url
        return run_rock(*args, state_dir=self.state_dir, base_url=url)

    def create(self, *args: str) -> str:
        """``rock sandbox create`` a small sandbox; its id (from stdout)."""
        done = self.rock("sandbox", "create", *SMALL, *args)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout.strip()


@pytest.fixture(scope="module")
def admin(
    tmp_path_factory: pytest.TempPathFactory, docker_client: Any, admin_launcher: Any
) -> Iterator[Admin]:
    """A real admin (``rock admin serve``); stopped and its containers removed after."""
    launch_admin, stop_admin = admin_launcher
    # The tests stop several sandboxes: kill after 1 s, not 3.
    server = launch_admin(
        tmp_path_factory.mktemp("cli-admin"), config="[engine]\nstop_timeout = 1\n"
    )
    try:
        yield Admin(server.state_dir, server.url)
    finally:
        stop_admin(server, docker_client)


@pytest.fixture(scope="module")
def sandbox_id(admin: Admin) -> str:
    """A running sandbox made with ``rock sandbox create``, shared by the read-only tests."""
    return admin.create("--user-id", "carol", "--experiment-id", "exp-cli")


def containers_of(docker_client: Any, sandbox_id: str) -> list[Any]:
    """The containers Docker has for ``sandbox_id`` (any state)."""
    return docker_client.containers.list(
        all=True, filters={"label": f"rock.sandbox_id={sandbox_id}"}, ignore_removed=True
    )


# -- create, list, status ------------------------------------------------------------------------------


def test_create_prints_only_the_id_and_the_container_runs(
    admin: Admin, sandbox_id: str, docker_client: Any
) -> None:
    assert len(sandbox_id) >= 8 and " " not in sandbox_id
    [container] = containers_of(docker_client, sandbox_id)
    assert container.status == "running"


def test_create_with_a_chosen_id(admin: Admin) -> None:
    wanted = f"cli-{uuid.uuid4().hex[:10]}"
    assert admin.create("--id", wanted) == wanted
    stopped = admin.rock("sandbox", "stop", wanted)
    assert stopped.returncode == 0, stopped.stderr


def test_list_table_shows_the_sandbox(admin: Admin, sandbox_id: str) -> None:
    done = admin.rock("sandbox", "list")
    assert done.returncode == 0, done.stderr
    header, *rows = done.stdout.splitlines()
    assert header.split()[:3] == ["SANDBOX", "ID", "STATE"]
    [row] = [r for r in rows if r.startswith(sandbox_id)]
    assert row.split()[1:3] == ["running", "python:3.11"]
    assert "carol" in row and "exp-cli" in row


def test_list_json_and_filters(admin: Admin, sandbox_id: str) -> None:
    done = admin.rock("sandbox", "list", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    [item] = [i for i in data["items"] if i["sandbox_id"] == sandbox_id]
    assert item["state"] == "running" and item["user_id"] == "carol"
    assert data["total"] == len(data["items"])

    other = json.loads(admin.rock("sandbox", "list", "--json", "--user-id", "nobody-else").stdout)
    assert other["items"] == []


def test_list_finds_the_local_admin_without_base_url(admin: Admin, sandbox_id: str) -> None:
    # No ROCK_BASE_URL: the admin of the state directory (its pid file) is used.
    done = admin.rock("sandbox", "list", "--json", base_url=None)
    assert done.returncode == 0, done.stderr
    assert sandbox_id in [i["sandbox_id"] for i in json.loads(done.stdout)["items"]]


def test_status_text_and_json(admin: Admin, sandbox_id: str) -> None:
    done = admin.rock("sandbox", "status", sandbox_id)
    assert done.returncode == 0, done.stderr
    lines = dict(
        line.split(":", 1)
        for line in done.stdout.splitlines()
        if not line.startswith(("phase", "note"))
    )
    assert lines["state"].strip() == "running"
    assert lines["experiment"].strip() == "exp-cli"
    assert "phase docker_run: success" in done.stdout

    data = json.loads(admin.rock("sandbox", "status", "--json", sandbox_id).stdout)
    assert data["sandbox_id"] == sandbox_id and data["state"] == "running" and data["memory"]


# -- exec and logs ---------------------------------------------------------------------------------------


def test_exec_passes_output_and_exit_code_through(admin: Admin, sandbox_id: str) -> None:
    done = admin.rock(
        "sandbox", "exec", sandbox_id, "--", "bash", "-c", "echo to-out; echo to-err >&2; exit 7"
    )
    assert done.returncode == 7
    assert done.stdout == "to-out\n"
    assert done.stderr == "to-err\n"

    ok = admin.rock(
        "sandbox",
        "exec",
        "--cwd",
        "/tmp",
        "--env",
        "GREETING=hi",
        sandbox_id,
        "sh",
        "-c",
        'echo "$GREETING $PWD"',
    )
    assert (ok.returncode, ok.stdout) == (0, "hi /tmp\n")


def test_exec_json_reports_the_result(admin: Admin, sandbox_id: str) -> None:
    done = admin.rock(
        "sandbox",
        "exec",
        "--json",
        sandbox_id,
        "--",
        "python",
        "-c",
        "print(6 * 7); raise SystemExit(3)",
    )
    assert done.returncode == 3
    data = json.loads(done.stdout)
    assert data["stdout"] == "42\n" and data["exit_code"] == 3


def test_exec_of_a_missing_or_unexecutable_program_exits_127_or_126_as_shells_do(
    admin: Admin, sandbox_id: str
) -> None:
    missing = admin.rock("sandbox", "exec", sandbox_id, "--", "no-such-binary")
    assert missing.returncode == 127 and "no-such-binary" in missing.stderr
    admin.rock("sandbox", "exec", sandbox_id, "--", "sh", "-c", "echo x > /tmp/plain")
    denied = admin.rock("sandbox", "exec", sandbox_id, "--", "/tmp/plain")
    assert denied.returncode == 126, denied.stderr


def test_exec_timeout_exits_124(admin: Admin, sandbox_id: str) -> None:
    done = admin.rock("sandbox", "exec", "--timeout", "1", sandbox_id, "--", "sleep", "30")
    assert done.returncode == 124
    assert done.stderr.startswith("rock: ")


def test_logs_shows_the_lifecycle_and_says_there_are_no_unit_logs(
    admin: Admin, sandbox_id: str
) -> None:
    done = admin.rock("sandbox", "logs", sandbox_id)
    assert done.returncode == 0, done.stderr
    assert "serves no unit logs" in done.stderr
    assert "pending -> running" in done.stdout
    assert "state: running" in done.stdout

    data = json.loads(admin.rock("sandbox", "logs", "--json", sandbox_id).stdout)
    assert data["unit_logs"] is None and "docker_run" in data["phases"]


# -- stop and delete ------------------------------------------------------------------------------------


def test_delete_refuses_a_running_sandbox(admin: Admin, sandbox_id: str) -> None:
    done = admin.rock("sandbox", "delete", sandbox_id)
    assert done.returncode == 1
    assert "stop it first" in done.stderr
    assert (
        json.loads(admin.rock("sandbox", "status", "--json", sandbox_id).stdout)["state"]
        == "running"
    )


def test_stop_then_delete(admin: Admin, docker_client: Any) -> None:
    sandbox_id = admin.create("--auto-delete-seconds", "600")  # kept after the stop, for delete

    stopped = admin.rock("sandbox", "stop", sandbox_id)
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout.split()[:2] == [sandbox_id, "stopped"]
    assert (
        json.loads(admin.rock("sandbox", "status", "--json", sandbox_id).stdout)["state"]
        == "stopped"
    )
    listed = json.loads(admin.rock("sandbox", "list", "--json").stdout)
    assert sandbox_id not in [i["sandbox_id"] for i in listed["items"]]

    # A stopped sandbox runs nothing: exec says so, with "not found"'s code.
    gone = admin.rock("sandbox", "exec", sandbox_id, "true")
    assert gone.returncode == 3 and "stopped" in gone.stderr

    deleted = admin.rock("sandbox", "delete", sandbox_id)
    assert deleted.returncode == 0, deleted.stderr
    assert containers_of(docker_client, sandbox_id) == []
    assert (
        json.loads(admin.rock("sandbox", "status", "--json", sandbox_id).stdout)["state"]
        == "deleted"
    )
    # Deleting again is not an error (scripts may retry).
    assert admin.rock("sandbox", "delete", sandbox_id).returncode == 0


def test_delete_force_stops_first(admin: Admin, docker_client: Any) -> None:
    sandbox_id = admin.create()
    done = admin.rock("sandbox", "delete", "--force", sandbox_id)
    assert done.returncode == 0, done.stderr
    assert containers_of(docker_client, sandbox_id) == []


# -- exit codes ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command", [["status"], ["logs"], ["stop"], ["delete"], ["exec", "--", "true"]]
)
def test_unknown_sandbox_exits_3(admin: Admin, command: list[str]) -> None:
    missing = f"no-such-{uuid.uuid4().hex[:8]}"
    args = [command[0], missing, *command[1:]]
    done = admin.rock("sandbox", *args)
    assert done.returncode == 3, done.stdout + done.stderr
    assert (
        done.stderr.startswith("rock: no sandbox")
        and missing in done.stderr
        and admin.url in done.stderr
    )


@pytest.mark.parametrize("command", [["list"], ["status", "abc"], ["create"]])
def test_unreachable_server_exits_1(tmp_path: Path, command: list[str], free_port: Any) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    done = run_rock("sandbox", *command, "--base-url", url, state_dir=tmp_path)
    assert done.returncode == 1
    assert "unreachable" in done.stderr and url in done.stderr


def test_create_without_a_server_refuses_and_suggests_rock_admin_start(tmp_path: Path) -> None:
    done = run_rock("sandbox", "create", state_dir=tmp_path)
    assert done.returncode == 1
    assert "rock admin start" in done.stderr and "removed when this command exits" in done.stderr


def test_embedded_mode_lists_nothing_and_finds_nothing(tmp_path: Path) -> None:
    # No server anywhere: the `rock` process's own (empty) engine answers, and says so.
    listed = run_rock("sandbox", "list", "--json", state_dir=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)["items"] == []
    table = run_rock("sandbox", "list", state_dir=tmp_path)
    assert "embedded mode" in table.stderr and "rock admin start" in table.stderr
    status = run_rock("sandbox", "status", "abc", state_dir=tmp_path)
    assert status.returncode == 3 and "embedded mode" in status.stderr


def test_bad_usage_exits_2(tmp_path: Path) -> None:
    assert run_rock("sandbox", "exec", state_dir=tmp_path).returncode == 2
    assert run_rock("sandbox", "list", "--no-such-option", state_dir=tmp_path).returncode == 2
    bad_env = run_rock(
        "sandbox", "create", "--env", "NOEQUALS", "--base-url", "http://x", state_dir=tmp_path
    )
    assert bad_env.returncode == 2 and "KEY=VALUE" in bad_env.stderr


# -- rock log ---------------------------------------------------------------------------------------------


def test_log_shows_the_admins_log(admin: Admin) -> None:
    done = admin.rock("log", base_url=None)
    assert done.returncode == 0, done.stderr
    assert f"Uvicorn running on {admin.url}" in done.stdout
    quiet = admin.rock("log", "--level", "ERROR", base_url=None)
    assert quiet.returncode == 0 and "Uvicorn running" not in quiet.stdout


def test_log_level_filters_records_and_keeps_their_tracebacks(tmp_path: Path) -> None:
    (tmp_path / "admin.log").write_text(
        "2026-11-30 10:00:00,001 INFO rock.admin: started\n"
        "2026-11-30 10:00:01,002 WARNING rock.admin: slow start\n"
        "2026-11-30 10:00:02,003 ERROR rock.admin: reconcile failed\n"
        "Traceback (most recent call last):\n"
        "  ValueError: boom\n"
        'INFO:     127.0.0.1:5000 - "GET /healthz HTTP/1.1" 200 OK\n'
        "ERROR:    Exception in ASGI application\n"
        "2026-11-30 10:00:03,004 DEBUG rock.engine: tick\n"
    )
    errors = run_rock("log", "--level", "error", state_dir=tmp_path)
    assert errors.returncode == 0, errors.stderr
    assert errors.stdout.splitlines() == [
        "2026-11-30 10:00:02,003 ERROR rock.admin: reconcile failed",
        "Traceback (most recent call last):",
        "  ValueError: boom",
        "ERROR:    Exception in ASGI application",
    ]
    warnings = run_rock("log", "--level", "WARNING", "-n", "2", state_dir=tmp_path)
    assert warnings.stdout.splitlines() == [
        "  ValueError: boom",
        "ERROR:    Exception in ASGI application",
    ]
    everything = run_rock("log", state_dir=tmp_path)
    assert len(everything.stdout.splitlines()) == 8


def test_log_without_a_log_file_exits_3(tmp_path: Path) -> None:
    done = run_rock("log", state_dir=tmp_path / "never-ran")
    assert done.returncode == 3
    assert "no admin log" in done.stderr and "rock admin start" in done.stderr


def test_a_bad_size_or_cpu_count_is_a_usage_error_naming_the_option(tmp_path: Path) -> None:
    for args, option in (
        (("--memory", "lots"), "--memory"),
        (("--disk", "huge"), "--disk"),
        (("--cpus", "many"), "--cpus"),
    ):
        done = run_rock("sandbox", "create", *args, state_dir=tmp_path)
        assert done.returncode == 2, (args, done.stderr)  # one exit code for bad input
        assert option in done.stderr and args[1] in done.stderr
