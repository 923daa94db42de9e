"""deploy/ha end to end: two real ``rock admin serve`` processes started from deploy/ha's admin
TOMLs (their port, folder, database and cluster name moved by environment variables, as the
README allows) in one cluster on PostgreSQL, a load balancer in front of them with deploy/ha's
config (its ports moved to free ones).

- HAProxy (haproxy.cfg): ``GET /healthz`` and a listing answer, from both admins in turn;
  after ``kill -9`` of one admin every call still answers, at once (a refused connection is
  sent to the other admin) and after HAProxy's check has marked it down, and the admin left
  leads the cluster.
- nginx (nginx.conf): both admins in turn; every call answered after ``kill -9`` of one.
- With Docker, through either: a sandbox started through the balancer is driven through both
  admins in turn (commands, and a terminal over the /shell WebSocket) and, after ``kill -9``
  of the leader, through the other; once that one leads, a new sandbox is started, driven and
  stopped through the balancer.

Needs the ``haproxy`` or ``nginx`` binary (Debian: ``apt-get install haproxy nginx-light``;
scripts/prepare.sh installs haproxy); a test skips, saying so, without its own. The
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


def _binary(name: str) -> str | None:
    """A program on PATH, or in /usr/sbin (Debian's place for it, off a user's PATH)."""
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/local/sbin")


HAPROXY = _binary("haproxy")
NGINX = _binary("nginx")
needs_haproxy = pytest.mark.skipif(
    HAPROXY is None,
    reason="haproxy is not installed (apt-get install haproxy); the files are checked by "
    "tests/test_deploy_ha.py",
)
needs_nginx = pytest.mark.skipif(
    NGINX is None,
    reason="nginx is not installed (apt-get install nginx-light); the files are checked by "
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


def _moved(text: str, moved: dict[str, str], listen: str, front: int) -> str:
    """A balancer's config sending to the test's admins and listening on ``front``."""
    for old, new in moved.items():
        assert old in text, old
        text = text.replace(old, new)
    text, bound = re.subn(
        rf"^(\s*{listen}\s+)[\d.]+:\d+", rf"\g<1>127.0.0.1:{front}", text, flags=re.M
    )
    assert bound == 1
    return text


def _haproxy(folder: Path, moved: dict[str, str], front: int) -> _Process:
    """HAProxy with deploy/ha/haproxy.cfg, in the foreground."""
    cfg = folder / "haproxy.cfg"
    cfg.write_text(_moved((HA / "haproxy.cfg").read_text(), moved, "bind", front))
    return _Process([str(HAPROXY), "-db", "-f", str(cfg)], folder / "haproxy.log")


def _nginx(folder: Path, moved: dict[str, str], front: int) -> _Process:
    """nginx with deploy/ha/nginx.conf, in the foreground, its files in ``folder``."""
    text = _moved((HA / "nginx.conf").read_text(), moved, "listen", front)
    local = "".join(
        f"    {kind}_temp_path {folder / kind};\n"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    text = text.replace("http {\n", f"http {{\n    access_log {folder / 'access.log'};\n{local}")
    cfg = folder / "nginx.conf"
    cfg.write_text(text)
    command = [str(NGINX), "-c", str(cfg), "-p", str(folder), "-e", str(folder / "error.log")]
    command += ["-g", f"daemon off; pid {folder / 'nginx.pid'};"]
    return _Process(command, folder / "nginx.log")


@pytest.fixture(params=["haproxy"])
def cluster(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    postgres_url: str,  # noqa: F811
) -> Iterator[tuple[str, list[_Process]]]:
    """The two admins of deploy/ha and a balancer before them (the parameter: HAProxy or
    nginx, with deploy/ha's config): the balancer's URL, and the admins and it (last)."""
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
        front = _free_port()
        balancer = _haproxy if request.param == "haproxy" else _nginx
        started.append(balancer(tmp_path, moved, front))
        url = f"http://127.0.0.1:{front}"
        code = eventually(lambda: _answers(f"{url}/healthz"), what=request.param, timeout=HANG)
        assert code == 200, started[-1].text()
        yield url, started
    finally:
        for process in started:
            process.end()


@needs_haproxy
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
    """A terminal over the admin's /shell WebSocket, through the balancer (the upgrade carried)."""
    async with await sandbox.open_shell(rows=33, cols=111, command="stty size; exit 9") as shell:
        out = b""
        while (data := await shell.receive()) is not None:
            out += data
    assert b"33 111" in out and shell.exit_code == 9


@pytest.mark.docker
@pytest.mark.anyio
@pytest.mark.parametrize(
    "cluster",
    [pytest.param("haproxy", marks=needs_haproxy), pytest.param("nginx", marks=needs_nginx)],
    indirect=True,
)
async def test_sandboxes_are_driven_started_and_stopped_through_the_balancer_after_the_leader_is_killed(
    cluster: tuple[str, list[_Process]], docker_client: Any
) -> None:
    url, (*admins, _) = cluster
    leader = _leader(admins)
    other = admins[1] if leader is admins[0] else admins[0]
    first = _sandbox(url)
    second = _sandbox(url)
    made: list[str] = []
    try:
        # Started through the balancer (whichever admin got it, the leader made it), then
        # driven through both admins in turn.
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


@needs_nginx
@pytest.mark.parametrize("cluster", ["nginx"], indirect=True)
def test_two_admins_behind_nginx_keep_answering_after_one_is_killed(
    cluster: tuple[str, list[_Process]],
) -> None:
    """nginx.conf instead: round-robin to both, and after kill -9 of one, every call answered
    (a refused connection goes to the other: proxy_next_upstream)."""
    url, (*admins, _) = cluster
    before = [_served(admin) for admin in admins]
    for _ in range(6):
        answer = httpx.get(f"{url}{LIST}", timeout=30)
        assert answer.status_code == 200, answer.text
    after = [_served(admin) for admin in admins]
    assert all(b > a for a, b in zip(before, after)), (before, after)
    admins[0].process.kill()
    admins[0].process.wait()
    _all_answer(url)
    _all_answer(url)
