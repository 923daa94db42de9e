"""E2B's unmodified Python SDK (its own virtual environment, ``scripts/ensure-e2b-sdk.sh``)
against a real admin over a socket with API keys and real Docker sandboxes (issue #29): only
``E2B_API_URL``, ``E2B_SANDBOX_URL`` and ``E2B_API_KEY`` set. The sandboxes it makes are rock's:
ROCK's API sees them under the same key, another key does not."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPTS = Path(__file__).resolve().parent / "e2b_scripts"
KEY_A, KEY_B = (f"key-{t}-" + uuid.uuid4().hex for t in ("a", "b"))
STATUS = "/apis/envs/sandbox/v1/get_status"

pytestmark = pytest.mark.skipif(
    os.environ.get("ROCK_TEST_REMOTE", "") not in ("", "0"),
    reason="runs an admin of its own; ran in the embedded pass",
)


@pytest.fixture(scope="module")
def e2b_python() -> str:
    subprocess.run([str(ROOT / "scripts" / "ensure-e2b-sdk.sh")], check=True, timeout=600)
    return str(ROOT / ".rock-state" / "e2b-sdk-venv" / "bin" / "python")


@pytest.fixture(scope="module")
def keyed_admin(
    tmp_path_factory: pytest.TempPathFactory, docker_client: Any, admin_launcher: Any
) -> Iterator[Any]:
    from rock.admin.auth import hash_key

    launch_admin, stop_admin = admin_launcher
    config = (
        f'[admin]\napi_keys = [{{ tenant = "a", sha256 = "{hash_key(KEY_A)}" }},'
        f' {{ tenant = "b", sha256 = "{hash_key(KEY_B)}" }}]\n'
    )
    server = launch_admin(tmp_path_factory.mktemp("e2b"), config=config)
    try:
        yield server
    finally:
        stop_admin(server, docker_client)


def e2b(python: str, server: Any, key: str, *args: str, script: str = "drive_sync.py") -> Any:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "E2B_API_URL": f"{server.url}/e2b",
        "E2B_SANDBOX_URL": f"{server.url}/e2b/envd",
        "E2B_API_KEY": key,
    }
    done = subprocess.run(
        [python, str(SCRIPTS / script), *args], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, f"{done.stderr[-4000:]}\n--- admin log:\n{server.log_tail()}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_e2b_sdk_creates_runs_commands_and_files_in_a_rock_sandbox(
    e2b_python: str, keyed_admin: Any
) -> None:
    tag = uuid.uuid4().hex[:8]
    out = e2b(e2b_python, keyed_admin, KEY_A, tag)
    sid = out["sandbox_id"]
    assert out["info_state"] == "running"
    assert out["listed"] == [sid] and out["listed_other"] == []
    assert out["fg"] == {
        "exit": 0,
        "stdout": "out-hi-y\n/tmp\n",
        "stderr": "err\n",
        "cb_out": "out-hi-y\n/tmp\n",
        "cb_err": "err\n",
    }
    assert out["exit3"] == 3
    assert out["bg_listed"] is True
    assert out["bg"] == {"exit": 0, "stdout": "done-bg\n"}
    assert out["killed"] is True and out["killed_exit"] != 0
    assert out["stdin"].startswith("NotFoundException: process with pid")  # it ended
    assert out["read_text"] == "hello text"
    assert out["read_bytes"] == list(b"\x00\x01bytes")
    assert out["list"] == ["a.txt", "b.bin", "c.txt", "d.txt"]
    assert out["exists"] == [True, False]
    assert out["info"] == {"name": "a.txt", "type": "file", "size": 10}
    assert out["mkdir"] == [True, False]
    assert out["renamed"] == "/tmp/e2b/sub/c2.txt"
    assert out["after_remove"] == ["a.txt", "b.bin", "sub"]
    assert "missing.txt" in out["missing"]
    assert out["connected_run"] == "hello text"
    assert out["unknown"] == "SandboxNotFoundException"
    assert out["bad_template"] and "rock-no-such-template-e2b" in out["bad_template"]

    # The same sandbox is rock's: ROCK's API sees it under the same key, not under another.
    with httpx.Client(base_url=keyed_admin.url, timeout=30, trust_env=False) as http:
        mine = http.get(STATUS, params={"sandbox_id": sid}, headers={"X-API-Key": KEY_A})
        assert mine.json()["status"] == "Success", mine.text
        theirs = http.get(STATUS, params={"sandbox_id": sid}, headers={"X-API-Key": KEY_B})
        assert theirs.json()["status"] == "Failed"
    # Another key's E2B SDK does not see it either, and cannot kill it; its own key can.
    assert e2b(e2b_python, keyed_admin, KEY_B, sid, script="kill.py") == {"killed": False}
    assert e2b(e2b_python, keyed_admin, KEY_A, sid, script="kill.py") == {"killed": True}
    with httpx.Client(base_url=keyed_admin.url, timeout=30, trust_env=False) as http:
        gone = http.get(STATUS, params={"sandbox_id": sid}, headers={"X-API-Key": KEY_A})
        assert gone.json()["status"] == "Failed"


def test_e2b_async_sdk_runs_a_command_and_files_in_a_rock_sandbox(
    e2b_python: str, keyed_admin: Any
) -> None:
    out = e2b(e2b_python, keyed_admin, KEY_A, script="drive_async.py")
    assert out == {
        "stdout": "one\n",
        "stderr": "two\n",
        "seen": "one\n",
        "text": "async text",
        "listed": True,
        "watched": [["made.txt", "create"]],
        "stdin": "typed\n",
        "killed": True,
    }


def test_e2b_sdk_pause_snapshots_metrics_and_refusals_on_rock(
    e2b_python: str, keyed_admin: Any
) -> None:
    tag = uuid.uuid4().hex[:8]
    out = e2b(e2b_python, keyed_admin, KEY_A, tag, script="drive_episodes.py")
    sid = out["sandbox_id"]
    # commands.connect follows a running command to its end.
    assert out["connected"] == {"exit": 4, "stdout": "later\n"}
    # pause is rock's: the processes freeze and go on after connect; a second pause is E2B's 409.
    assert out["pause"] is True and out["paused_state"] == ["paused"]
    assert out["pause_again"] is False and out["counter_goes_on"] is True
    # a filesystem snapshot is rock's, and starts a sandbox with its files; full ones are refused.
    assert out["snapshot_id"] == f"e2b-{tag}" and out["snapshots_listed"] == [f"e2b-{tag}"]
    assert out["child_file"] == "from the snapshot"
    assert "rock's snapshots keep a sandbox's files, not its memory" in out["full_snapshot"]
    assert out["fork"].startswith("SandboxException: 501: fork: E2B's forks carry")
    assert out["snapshot_deleted"] is True
    assert out["metrics"] == {"n": 1, "mem_total": True, "cpus": 2}
    assert "cannot lengthen it to 3600 s" in out["long_timeout"]
    # bad input is E2B's exceptions, saying what is wrong or missing.
    assert out["read_dir"].startswith("InvalidArgumentException: path '/tmp'")
    assert out["list_file"] == ("InvalidArgumentException: path '/etc/hostname' is not a directory")
    assert out["read_missing"].startswith("FileNotFoundException: path '/no/such/file' not found")
    assert out["stdin"] == "hello world\nend\n"
    assert "was started without stdin: start it with stdin=True" in out["no_stdin"]
    assert out["watched"] == [["new.txt", "create"], ["new.txt", "remove"]]
    assert "running them as another user is not served" in out["user"]
    assert "acting as another user is not served" in out["file_user"]
    assert "acting as another user is not served" in out["list_user"]
    assert out["kill_unknown_pid"] is False
    # killed mid-stream: the waiting command ends, with what happened, instead of hanging.
    assert out["mid_stream"]["stdout"] == "started\n" and out["mid_stream"]["exit"] != 0
    assert out["after_kill"].startswith(f"SandboxNotRunningException: The sandbox {sid} ")


def _rock(server: Any, key: str, command: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``rock sandbox COMMAND --base-url <admin> ARGS...`` with ``ROCK_API_KEY=key``."""
    env = {**os.environ, "ROCK_API_KEY": key}
    env.pop("ROCK_BASE_URL", None)
    rock = str(ROOT / ".venv" / "bin" / "rock")
    return subprocess.run(
        [rock, "sandbox", command, "--base-url", server.url, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _ids(listing: str) -> set[str]:
    return {s["sandbox_id"] for s in json.loads(listing)["items"]}


def test_sandboxes_made_by_rock_and_by_e2b_are_the_same_sandboxes_per_key(
    e2b_python: str, keyed_admin: Any
) -> None:
    tag = uuid.uuid4().hex[:8]
    rock_made = f"e2b-vis-{tag}"
    base = "/apis/envs/sandbox/v1"
    with httpx.Client(
        base_url=keyed_admin.url, timeout=120, trust_env=False, headers={"X-API-Key": KEY_A}
    ) as http:
        started = http.post(
            f"{base}/start",
            json={"image": "python:3.11", "sandbox_id": rock_made, "metadata": {"suite": tag}},
        )
        assert started.json()["status"] == "Success", started.text
        wrote = http.post(
            f"{base}/write_file",
            json={"sandbox_id": rock_made, "path": "/tmp/from-rock.txt", "content": "rock"},
        )
        assert wrote.json()["status"] == "Success", wrote.text
    out = e2b(e2b_python, keyed_admin, KEY_A, rock_made, tag, script="visibility.py")
    assert out["listed"] == [rock_made] and out["ran"] == "rock"
    e2b_made = out["e2b_made"]
    assert out["pages"] == [[rock_made], [e2b_made]]  # a page at a time, oldest first
    # rock's CLI, with the same key, lists it and runs a command in it; another key sees neither.
    listed = _rock(keyed_admin, KEY_A, "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert {rock_made, e2b_made} <= _ids(listed.stdout)
    ran = _rock(keyed_admin, KEY_A, "exec", e2b_made, "--", "cat", "/tmp/from-e2b.txt")
    assert (ran.returncode, ran.stdout) == (0, "written by e2b"), ran.stderr
    other = _rock(keyed_admin, KEY_B, "list", "--json")
    assert not {rock_made, e2b_made} & _ids(other.stdout)
    other_e2b = e2b(e2b_python, keyed_admin, KEY_B, rock_made, tag, script="visibility.py")
    assert other_e2b["listed"] == []
    assert other_e2b["ran"].startswith("SandboxNotFoundException")
    # The data plane takes the sandbox's own token, no API key: a wrong one, or another
    # sandbox's, is refused the same way.
    rpc = f"{keyed_admin.url}/e2b/envd/process.Process/List"
    headers = {"Content-Type": "application/json", "Connect-Protocol-Version": "1"}
    with httpx.Client(timeout=30, trust_env=False) as http:
        # The control plane takes API keys as the admin's own routes do.
        assert http.get(f"{keyed_admin.url}/e2b/v2/sandboxes").status_code == 401
        good = http.post(
            rpc,
            content=b"{}",
            headers={**headers, "E2b-Sandbox-Id": e2b_made, "X-Access-Token": out["token"]},
        )
        assert good.status_code == 200, good.text
        assert good.json() == {}, good.text  # no command runs there
        for sandbox_id, token in ((e2b_made, "wrong"), (rock_made, out["token"]), (e2b_made, "")):
            bad = http.post(
                rpc,
                content=b"{}",
                headers={**headers, "E2b-Sandbox-Id": sandbox_id, "X-Access-Token": token},
            )
            assert bad.status_code == 401, bad.text
            assert "unknown sandbox or wrong access token" in bad.json()["message"]
