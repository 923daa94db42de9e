"""deploy/ha end to end: two real ``rock admin serve`` processes started from deploy/ha's admin
TOMLs (their port, folder, database and cluster name moved by environment variables, as the
README allows) in one cluster on PostgreSQL, HAProxy in front of them with deploy/ha/haproxy.cfg
(its ports moved to free ones). ``GET /healthz`` and a listing answer through HAProxy, from
both admins in turn; after ``kill -9`` of one admin every call through HAProxy still answers,
at once (a refused connection is sent to the other admin) and after HAProxy's check has marked
it down, and the admin left leads the cluster. With Docker: a sandbox started through HAProxy
is driven through both admins in turn (commands, and a terminal over the /shell WebSocket) and,
after ``kill -9`` of the leader, through the other; once that one leads, a new sandbox is
started, driven and stopped through HAProxy.

Needs the ``haproxy`` binary (Debian: ``apt-get install haproxy``); skips without it. The
configuration files themselves are checked everywhere by tests/test_deploy_ha.py.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from rock.actions import Command
from rock.admin.config import load_settings
from rock.sdk.sandbox.client import Sandbox
from rock.sdk.sandbox.config import SandboxConfig
from rock_core.testing import eventually
from rock_postgres.testing import postgres_url  # noqa: F401

ROOT = Path(__file__).resolve().parents[1]
HA = ROOT / "deploy" / "ha"
HANG = 60  # a guard against a hang; nothing waits for it to pass
LIST = "/apis/envs/sandbox/v1/sandboxes"

#: The haproxy binary: on PATH, or in /usr/sbin (Debian's place, off a user's PATH).
HAPROXY = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin:/usr/local/sbin")

pytestmark = pytest.mark.skipif(
    HAPROXY is None,
    reason="haproxy is not installed (apt-get install haproxy); the files are checked by "
    "tests/test_deploy_ha.py",
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _Process:
    """A program in a session of its own, its output in ``log``."""

    def __init__(
        self, command: list[str], log: Path, env: dict[str, str] | None = None, url: str = ""
    ) -> None:
        self.log = log
        self.url = url  # an admin's own address
        with open(log, "ab") as out:
            self.process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def end(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _served(admin: _Process) -> float:
    """How many listings the admin answered, by its own /metrics (asked directly)."""
    text = httpx.get(f"{admin.url}/metrics", timeout=10).text
    found = re.search(
        r'^rock_http_requests_total\{[^}]*route="[^"]*/sandboxes"[^}]*\} (\S+)$', text, re.M
    )
    return float(found[1]) if found else 0.0


def _all_answer(url: str) -> None:
    """Ten calls through HAProxy, each answered."""
    for _ in range(5):
        assert httpx.get(f"{url}/healthz", timeout=30).status_code == 200
        answer = httpx.get(f"{url}{LIST}", timeout=30)
        assert answer.status_code == 200, answer.text


def _answers(url: str) -> int | None:
    try:
        return httpx.get(url, timeout=5).status_code
    except httpx.HTTPError:
        return None


@pytest.fixture
def cluster(
    tmp_path: Path,
    postgres_url: str,  # noqa: F811
) -> Iterator[tuple[str, list[_Process]]]:
    """The two admins of deploy/ha and HAProxy before them: HAProxy's URL, and the admins and
    HAProxy (last)."""
    exe = shutil.which("rock", path=os.path.dirname(sys.executable))
    rock = [exe] if exe else [sys.executable, "-m", "rock.cli"]
    configs = sorted(HA.glob("admin-*.toml"))
    started: list[_Process] = []
    moved: dict[str, str] = {}  # "127.0.0.1:8081" in haproxy.cfg -> the port this test uses
    cluster_name = f"ha-{uuid.uuid4().hex[:8]}"
    try:
        for config in configs:
            settings = load_settings(config, environ={})
            port = _free_port()
            moved[f"{settings.host}:{settings.port}"] = f"127.0.0.1:{port}"
            folder = tmp_path / config.stem
            folder.mkdir()
            environ = {
                **os.environ,
                "ROCK_ADMIN_PORT": str(port),
                "ROCK_ADMIN_STATE_DIR": str(folder),
                "ROCK_ENGINE_STORE": postgres_url,
                # A cluster (and owner of the sandboxes) of this test's own.
                "ROCK_ENGINE_CLUSTER": cluster_name,
            }
            command = [*rock, "admin", "serve", "--config", str(config)]
            address = f"http://127.0.0.1:{port}"
            started.append(_Process(command, folder / "admin.log", environ, address))
        for admin in started:
            eventually(
                lambda: _answers(f"{admin.url}/healthz"),
                until=lambda code: code == 200 or admin.process.poll() is not None,
                what=f"the admin on {admin.url}",
                timeout=HANG,
            )
            assert admin.process.poll() is None, admin.text()
        text = (HA / "haproxy.cfg").read_text()
        for old, new in moved.items():
            assert old in text, old
            text = text.replace(old, new)
        front = _free_port()
        text, bound = re.subn(r"^(\s*bind\s+)\S+", rf"\g<1>127.0.0.1:{front}", text, flags=re.M)
        assert bound == 1
        cfg = tmp_path / "haproxy.cfg"
        cfg.write_text(text)
        started.append(_Process([str(HAPROXY), "-db", "-f", str(cfg)], tmp_path / "haproxy.log"))
        url = f"http://127.0.0.1:{front}"
        code = eventually(lambda: _answers(f"{url}/healthz"), what="haproxy", timeout=HANG)
        assert code == 200, started[-1].text()
        yield url, started
    finally:
        for process in started:
            process.end()


def test_two_admins_behind_haproxy_keep_answering_after_one_is_killed(
    cluster: tuple[str, list[_Process]],
) -> None:
    url, (*admins, haproxy) = cluster
    # Round-robin: both admins answer through HAProxy (each counts its requests in /metrics).
    before = [_served(admin) for admin in admins]
    for _ in range(6):
        answer = httpx.get(f"{url}{LIST}", timeout=30)
        assert answer.status_code == 200, answer.text
        assert answer.json()["status"] == "Success"
    after = [_served(admin) for admin in admins]
    assert all(b > a for a, b in zip(before, after)), (before, after)
    # kill -9 of one: the very next calls are answered (the refused connection goes to the
    # other admin), and so are those after HAProxy's check has taken it out.
    admins[0].process.kill()
    admins[0].process.wait()
    _all_answer(url)
    eventually(
        lambda: re.search(r"Server \S+/admin-a is DOWN", haproxy.text()),
        what="HAProxy's check takes admin-a out",
        timeout=HANG,
    )
    _all_answer(url)
    assert admins[1].process.poll() is None
    # The one left leads (it did, or takes the lease once the dead one's runs out).
    eventually(
        lambda: "leader of the cluster under epoch" in admins[1].text(),
        what="the admin left leads",
        timeout=HANG,
    )


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _leader(admins: list[_Process]) -> _Process:
    """The admin whose log says it leads (the first to take the lease)."""
    return eventually(
        lambda: next((a for a in admins if "leader of the cluster under epoch" in a.text()), None),
        what="a leader",
        timeout=HANG,
    )


def _containers(sandbox_id: str) -> list[str]:
    return subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=rock.sandbox_id={sandbox_id}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()


def _sandbox(url: str) -> Sandbox:
    return Sandbox(SandboxConfig(image="python:3.11", base_url=url, memory="512m", cpus=0.5))


async def _echo(sandbox: Sandbox, times: int) -> None:
    for n in range(times):
        answer = await sandbox.execute(Command(command=["echo", str(n)]))
        assert answer.stdout.strip() == str(n)


async def _shell(sandbox: Sandbox) -> None:
    """A terminal over the admin's /shell WebSocket, through HAProxy (the upgrade carried)."""
    async with await sandbox.open_shell(rows=33, cols=111, command="stty size; exit 9") as shell:
        out = b""
        while (data := await shell.receive()) is not None:
            out += data
    assert b"33 111" in out and shell.exit_code == 9


@pytest.mark.docker
@pytest.mark.anyio
async def test_sandboxes_are_driven_started_and_stopped_through_haproxy_after_the_leader_is_killed(
    cluster: tuple[str, list[_Process]], docker_client: Any
) -> None:
    url, (*admins, _) = cluster
    leader = _leader(admins)
    other = admins[1] if leader is admins[0] else admins[0]
    first = _sandbox(url)
    second = _sandbox(url)
    made: list[str] = []
    try:
        # Started through HAProxy (whichever admin got it, the leader made it), then driven
        # through both admins in turn.
        await first.start()
        assert first.sandbox_id is not None
        made.append(first.sandbox_id)
        await _echo(first, 4)
        await _shell(first)
        # kill -9 of the leader: the sandbox runs on and answers through the other admin.
        leader.process.kill()
        leader.process.wait()
        await _echo(first, 4)
        await _shell(first)
        # Once the other admin leads, the cluster starts and stops sandboxes again.
        eventually(
            lambda: "leader of the cluster under epoch" in other.text(),
            what="the admin left leads",
            timeout=HANG,
        )
        await second.start()
        assert second.sandbox_id is not None
        made.append(second.sandbox_id)
        await _echo(second, 2)
        await second.stop()
        status = httpx.get(
            f"{url}/apis/envs/sandbox/v1/get_status",
            params={"sandbox_id": second.sandbox_id, "include_all_states": "true"},
            timeout=30,
        ).json()
        assert status["result"]["state"] in ("stopped", "deleted"), status
        eventually(lambda: _containers(made[1]), until=lambda found: not found, timeout=HANG)
    finally:
        for sandbox in (first, second):
            await sandbox.close()
        for sandbox_id in made:  # the test's own containers, whatever the admins did
            for container in _containers(sandbox_id):
                subprocess.run(["docker", "rm", "-f", container], capture_output=True)
