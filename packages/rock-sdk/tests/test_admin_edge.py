"""The admin's edge (issue #22, points 3 and 4): a keyless admin never serves a browser, and
nothing a client or a sandbox sends makes it hold unbounded memory.

One real keyless admin (``rock admin serve`` on 127.0.0.1, over a real socket) with small limits,
and one sandbox on the local Docker engine. Each test replays an attack and checks what a
user would notice: the refusal, its words, the admin's peak memory (``VmHWM`` of its process,
reset before the attack through ``/proc/<pid>/clear_refs``) and that another client is served
meanwhile.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect as ws_connect

pytestmark = [pytest.mark.docker]

PREFIX = "/apis/envs/sandbox/v1"
MiB = 1 << 20
HEADER_TIMEOUT = 3
MAX_CONNECTIONS = 24
CONFIG = f"""
[admin]
allowed_origins = ["https://dashboard.example"]
allowed_hosts = ["rock.internal"]
header_timeout = {HEADER_TIMEOUT}
max_connections = {MAX_CONNECTIONS}
max_concurrent_uploads = 2
[engine]
max_rocklet_answer = "8m"
"""
#: What the admin may grow by while it refuses an oversize input (its caps are 8 MiB or less).
FLAT = 40 * MiB


@pytest.fixture(scope="module")
def edge_admin(
    tmp_path_factory: pytest.TempPathFactory, admin_launcher: Any, docker_client: Any
) -> Iterator[Any]:
    launch, stop = admin_launcher
    server = launch(tmp_path_factory.mktemp("edge-admin"), config=CONFIG)
    yield server
    stop(server, docker_client)


@pytest.fixture(scope="module")
def http(edge_admin: Any) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=edge_admin.url, trust_env=False, timeout=120) as client:
        yield client


@pytest.fixture(scope="module")
def sandbox_id(http: httpx.Client) -> Iterator[str]:
    answer = http.post(
        f"{PREFIX}/start", json={"image": "python:3.11", "memory": "1g", "cpus": 0.5}
    ).json()
    assert answer["status"] == "Success", answer
    sandbox = answer["result"]["sandbox_id"]
    yield sandbox
    http.post(f"{PREFIX}/stop", json={"sandbox_id": sandbox})


def _sandboxes(http: httpx.Client) -> list[str]:
    return [
        item["sandbox_id"] for item in http.get(f"{PREFIX}/sandboxes").json()["result"]["items"]
    ]


def _execute(
    http: httpx.Client, sandbox_id: str, command: str, timeout: float = 60
) -> dict[str, Any]:
    return http.post(
        f"{PREFIX}/execute",
        json={"sandbox_id": sandbox_id, "command": ["sh", "-c", command], "timeout": timeout},
    ).json()


# ---------------------------------------------------------------------------------------------
# Point 3: a web page never drives the admin


def test_a_cross_site_text_plain_start_is_refused_415(http: httpx.Client) -> None:
    before = set(_sandboxes(http))
    # What a page's fetch(..., {mode: "no-cors"}) sends without a preflight.
    answer = http.post(
        f"{PREFIX}/start_async",
        content=b'{"image": "python:3.11"}',
        headers={"Content-Type": "text/plain"},
    )
    assert answer.status_code == 415, answer.text
    body = answer.json()
    assert body["status"] == "Failed" and body["result"]["rock_code"] == 4015
    assert "application/json" in body["error"] and "'text/plain'" in body["error"]
    assert set(_sandboxes(http)) == before


def test_a_request_from_a_foreign_origin_is_refused_403(http: httpx.Client) -> None:
    before = set(_sandboxes(http))
    answer = http.post(
        f"{PREFIX}/start_async",
        json={"image": "python:3.11"},
        headers={"Origin": "http://evil.example"},
    )
    assert answer.status_code == 403, answer.text
    assert answer.json()["result"]["rock_code"] == 4031
    assert (
        "http://evil.example" in answer.json()["error"]
        and "allowed_origins" in answer.json()["error"]
    )
    assert set(_sandboxes(http)) == before
    # Reading is refused too, and an origin the operator listed is served.
    assert (
        http.get(f"{PREFIX}/sandboxes", headers={"Origin": "http://evil.example"}).status_code
        == 403
    )
    assert (
        http.get(f"{PREFIX}/sandboxes", headers={"Origin": "https://dashboard.example"}).status_code
        == 200
    )


def test_dns_rebinding_a_foreign_host_name_is_refused(http: httpx.Client, edge_admin: Any) -> None:
    port = edge_admin.port
    refused = http.get(f"{PREFIX}/sandboxes", headers={"Host": f"evil.example:{port}"})
    assert refused.status_code == 403 and "allowed_hosts" in refused.json()["error"]
    for host in (
        f"localhost:{port}",
        f"127.0.0.1:{port}",
        f"[::1]:{port}",
        "rock.internal",
        f"ROCK.internal:{port}",
    ):
        assert http.get(f"{PREFIX}/sandboxes", headers={"Host": host}).status_code == 200, host
    # Liveness answers any name (it reveals nothing): probes and nodes use whatever they were given.
    assert http.get("/healthz", headers={"Host": "evil.example"}).status_code == 200


def _handshake(port: int, path: str, headers: dict[str, str]) -> bytes:
    """The status line the admin answers a WebSocket handshake with."""
    lines = [
        f"GET {path} HTTP/1.1",
        "Upgrade: websocket",
        "Connection: Upgrade",
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
        "Sec-WebSocket-Version: 13",
    ]
    lines += [f"{k}: {v}" for k, v in {"Host": f"127.0.0.1:{port}", **headers}.items()]
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        return sock.recv(65536).split(b"\r\n", 1)[0]


def test_a_page_cannot_open_a_sandboxs_shell_over_websocket(
    edge_admin: Any, sandbox_id: str
) -> None:
    path = f"{PREFIX}/sandboxes/{sandbox_id}/shell"
    assert _handshake(edge_admin.port, path, {"Origin": "http://evil.example"}).startswith(
        b"HTTP/1.1 403"
    )
    assert _handshake(
        edge_admin.port, path, {"Host": f"evil.example:{edge_admin.port}"}
    ).startswith(b"HTTP/1.1 403")

    async def shell() -> bytes:  # the rock CLI's own client sends no Origin: the shell opens
        async with ws_connect(
            f"ws://127.0.0.1:{edge_admin.port}{path}", proxy=None, open_timeout=60
        ) as ws:
            await ws.send(b"echo opened-$((6*7))\n")
            seen = b""
            while b"opened-42" not in seen:
                seen += await ws.recv()  # type: ignore[operator]
            return seen

    assert b"opened-42" in asyncio.run(shell())


def _serve(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    rock = shutil.which("rock", path=os.path.dirname(sys.executable))
    command = [rock] if rock else [sys.executable, "-m", "rock.cli"]
    return subprocess.run(
        [*command, "admin", *args], capture_output=True, text=True, timeout=120, env=env
    )


def test_keyless_on_a_non_loopback_address_is_refused_unless_the_operator_says_so(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "ROCK_ADMIN_STATE_DIR": str(tmp_path)}
    env.pop("ROCK_ADMIN_API_KEYS", None)
    for command in ("serve", "start"):
        done = _serve([command, "--host", "0.0.0.0", "--port", "1"], env)
        assert done.returncode == 1, done.stdout + done.stderr
        assert (
            "without API keys" in done.stderr
            and "--insecure-no-keys" in done.stderr
            and "api_keys" in done.stderr
        )
    assert not (tmp_path / "admin.pid").exists()
    # With the flag (or with keys) the check passes and the server goes on to bind: this address
    # (TEST-NET, on no interface) fails there, so nothing listens beyond this machine.
    for extra, more_env in (
        (["--insecure-no-keys"], {}),
        ([], {"ROCK_ADMIN_API_KEYS": "ops=" + "k" * 32}),
    ):
        done = _serve(
            ["serve", "--host", "192.0.2.1", "--port", "18099", *extra], {**env, **more_env}
        )
        assert "without API keys" not in done.stderr
        assert done.returncode != 0 and "192.0.2.1" in (done.stdout + done.stderr)


# ---------------------------------------------------------------------------------------------
# Point 4: bounded memory for what a client or a sandbox sends


def _peak(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def _reset_peak(pid: int) -> int:
    """Reset the process's peak resident memory to its current one; return that."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    return _peak(pid)


class Meanwhile:
    """Another client's requests, sent over and over on fresh connections while an attack runs."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.statuses: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            with httpx.Client(trust_env=False, timeout=60) as client:
                self.statuses.append(client.get(f"{self.url}{PREFIX}/sandboxes").status_code)

    def __enter__(self) -> Meanwhile:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(120)


def _flat(edge_admin: Any, attack: Callable[[], Any]) -> Any:
    """Run ``attack`` while another client is served; check the admin stayed flat; its result."""
    pid = edge_admin.process.pid
    before = _reset_peak(pid)
    with Meanwhile(edge_admin.url) as other:
        result = attack()
    growth = _peak(pid) - before
    assert growth < FLAT, f"the admin grew by {growth / MiB:.1f} MiB"
    assert other.statuses and set(other.statuses) == {200}, other.statuses
    return result


def _send_until_closed(sock: socket.socket, head: bytes, filler: bytes, total: int) -> int:
    """Send ``head`` then ``filler`` until ``total`` bytes or the server closes; bytes sent."""
    sent = 0
    try:
        sock.sendall(head)
        while sent < total:
            sock.sendall(filler)
            sent += len(filler)
    except OSError:
        pass
    return sent


def _answer(sock: socket.socket) -> bytes:
    sock.settimeout(120)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except OSError:
        pass
    return data


def test_a_100mib_header_is_refused_431_and_the_admin_stays_flat(edge_admin: Any) -> None:
    def attack() -> tuple[int, bytes]:
        with socket.create_connection(("127.0.0.1", edge_admin.port)) as sock:
            sent = _send_until_closed(
                sock,
                f"GET {PREFIX}/sandboxes HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Endless: ".encode(),
                b"a" * MiB,
                100 * MiB,
            )
            return sent, _answer(sock)

    sent, answer = _flat(edge_admin, attack)
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
    assert b"max_request_head" in answer and sent < 100 * MiB


def test_a_client_trickling_its_headers_is_cut_off(edge_admin: Any) -> None:
    def attack() -> tuple[int, bytes]:
        with socket.create_connection(("127.0.0.1", edge_admin.port)) as sock:
            sock.sendall(f"GET {PREFIX}/sandboxes HTTP/1.1\r\nHost: 127.0.0.1\r\n".encode())
            trickled = 0
            try:  # a header byte a fifth of a second, for at most 20 times the admin's deadline
                for _ in range(HEADER_TIMEOUT * 5 * 20):
                    sock.sendall(b"X-Slow: 1\r\n"[trickled % 11 : trickled % 11 + 1])
                    trickled += 1
                    sock.settimeout(0.2)
                    try:
                        if sock.recv(1 << 16, socket.MSG_PEEK):
                            break
                    except TimeoutError:
                        continue
            except OSError:
                pass
            return trickled, _answer(sock)

    trickled, answer = _flat(edge_admin, attack)
    assert answer.startswith(b"HTTP/1.1 408 "), (trickled, answer[:200])
    assert b"header_timeout" in answer


def test_connections_past_max_connections_are_answered_503(edge_admin: Any) -> None:
    request = f"GET {PREFIX}/sandboxes HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()
    held: list[socket.socket] = []
    statuses = []
    try:
        # Kept alive after their answer, connections count; other tests' may still be closing.
        for _ in range(MAX_CONNECTIONS + 8):
            sock = socket.create_connection(("127.0.0.1", edge_admin.port))
            held.append(sock)
            sock.sendall(request)
            sock.settimeout(60)
            statuses.append(sock.recv(65536).split(b"\r\n", 1)[0])
            if statuses[-1].startswith(b"HTTP/1.1 503 "):
                break
        assert statuses[-1].startswith(b"HTTP/1.1 503 "), statuses
        assert 1 <= len(statuses) - 1 <= MAX_CONNECTIONS - 1
        assert all(status.startswith(b"HTTP/1.1 200 ") for status in statuses[:-1])
    finally:
        for sock in held:
            sock.close()
    with httpx.Client(trust_env=False, timeout=60) as client:
        for _ in range(600):  # until the admin has seen the connections close
            if client.get(f"{edge_admin.url}{PREFIX}/sandboxes").status_code == 200:
                break
        else:
            pytest.fail("the admin still answered 503 after the held connections closed")


SERVICE = r"""
import socket
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("127.0.0.1", 8000))
server.listen(8)
while True:
    conn, _ = server.accept()
    try:
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\nX-Endless: ")
        for _ in range(100):
            conn.sendall(b"a" * (1 << 20))
        conn.sendall(b"\r\n\r\n")
    except OSError:
        pass
    conn.close()
"""


def test_a_service_answering_with_100mib_of_headers_is_a_502(
    http: httpx.Client, edge_admin: Any, sandbox_id: str
) -> None:
    http.post(
        f"{PREFIX}/write_file",
        json={"sandbox_id": sandbox_id, "path": "/srv/headers.py", "content": SERVICE},
    )
    started = _execute(
        http,
        sandbox_id,
        "(nohup python3 /srv/headers.py >/tmp/headers.log 2>&1 &); "
        "for i in $(seq 100); do python3 -c \"import socket;socket.create_connection(('127.0.0.1',8000),1).close()\" "
        "2>/dev/null && exit 0; sleep 0.1; done; exit 1",
    )
    assert started["result"]["exit_code"] == 0, started

    def attack() -> httpx.Response:
        with httpx.Client(trust_env=False, timeout=120) as client:
            return client.get(f"{edge_admin.url}{PREFIX}/sandboxes/{sandbox_id}/proxy/port/8000/")

    answer = _flat(edge_admin, attack)
    assert answer.status_code == 502, answer.text[:300]
    assert "headers are larger than" in answer.json()["detail"]


def test_a_command_printing_64mib_is_a_clear_error_and_the_admin_stays_flat(
    http: httpx.Client, edge_admin: Any, sandbox_id: str
) -> None:
    answer = _flat(
        edge_admin,
        lambda: _execute(http, sandbox_id, "head -c 64000000 /dev/zero | tr '\\0' a", timeout=120),
    )
    assert answer["status"] == "Failed", str(answer)[:300]
    assert "max_rocklet_answer" in answer["error"] and str(8 * MiB) in answer["error"]
    assert "download" in answer["error"]  # what to do instead
    # The sandbox is still served.
    assert _execute(http, sandbox_id, "echo still here")["result"]["stdout"] == "still here\n"


def test_uploads_are_streamed_and_at_most_max_concurrent_uploads_are_read_at_once(
    http: httpx.Client, edge_admin: Any, sandbox_id: str
) -> None:
    size = 60 * MiB

    def upload(n: int) -> dict[str, Any]:
        def body() -> Iterator[bytes]:
            yield (
                b'--b\r\nContent-Disposition: form-data; name="sandbox_id"\r\n\r\n'
                + sandbox_id.encode()
                + b'\r\n--b\r\nContent-Disposition: form-data; name="target_path"\r\n\r\n/tmp/up'
                + str(n).encode()
                + b'\r\n--b\r\nContent-Disposition: form-data; name="file"; filename="f"\r\n'
                b"Content-Type: application/octet-stream\r\n\r\n"
            )
            for _ in range(size // MiB):
                yield b"u" * MiB
            yield b"\r\n--b--\r\n"

        with httpx.Client(trust_env=False, timeout=300) as client:
            return client.post(
                f"{edge_admin.url}{PREFIX}/upload",
                content=body(),
                headers={"Content-Type": "multipart/form-data; boundary=b"},
            ).json()

    def attack() -> list[dict[str, Any]]:
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            return list(pool.map(upload, range(4)))

    answers = _flat(edge_admin, attack)
    assert all(a["status"] == "Success" for a in answers), answers
    sizes = _execute(http, sandbox_id, "stat -c %s /tmp/up0 /tmp/up1 /tmp/up2 /tmp/up3")["result"][
        "stdout"
    ].split()
    assert sizes == [str(size)] * 4
