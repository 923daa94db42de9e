"""Reaching a sandbox's own services through the admin (issue #13): HTTP, SSE and WebSocket
proxy, TCP port-forward, tenancy.

One real admin (``rock admin serve`` over a socket) with two API keys of two tenants and
``proxy_timeout = 5``; tenant A's sandbox on the local Docker engine runs real services
(``python3 -m http.server`` on the default port 8080, and ``sandbox_services.py``: an HTTP/1.1
echo and SSE server, a WebSocket echo server, a TCP echo server). Nothing is published: every
byte goes through the sandbox's rocklet.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from rock.actions import Command, WriteFileRequest
from rock.bench import sandbox_services
from rock.sdk.sandbox.client import Sandbox
from rock.sdk.sandbox.config import SandboxConfig
from rock_core.testing import eventually, eventually_async

pytestmark = [pytest.mark.docker, pytest.mark.anyio]

PREFIX = "/apis/envs/sandbox/v1"
KEY_A = "key-a-" + uuid.uuid4().hex
KEY_B = "key-b-" + uuid.uuid4().hex
SERVICES = Path(sandbox_services.__file__)
HTTP_PORT, WS_PORT, TCP_PORT = 8000, 8765, 9000
CLOSED_PORT = 8999  # nothing listens there


@pytest.fixture(scope="module")
def proxy_admin(
    tmp_path_factory: pytest.TempPathFactory, admin_launcher: Any, docker_client: Any
) -> Iterator[Any]:
    launch, stop = admin_launcher
    server = launch(
        tmp_path_factory.mktemp("proxy-admin"),
        config="[admin]\nproxy_timeout = 5\n",
        env={"ROCK_ADMIN_API_KEYS": f"team-a={KEY_A},team-b={KEY_B}"},
    )
    yield server
    stop(server, docker_client)


async def _start_services(sandbox: Sandbox) -> None:
    await sandbox.write_file(
        WriteFileRequest(content=SERVICES.read_text(), path="/srv/services.py")
    )
    script = (
        "cd /srv && echo 'hello from the sandbox' > index.html && "
        f"(nohup python3 services.py http {HTTP_PORT} >/tmp/http.log 2>&1 &) && "
        f"(nohup python3 services.py ws {WS_PORT} >/tmp/ws.log 2>&1 &) && "
        f"(nohup python3 services.py tcp {TCP_PORT} >/tmp/tcp.log 2>&1 &) && "
        "(nohup python3 -m http.server 8080 --bind 127.0.0.1 >/tmp/web.log 2>&1 &) && "
        'for i in $(seq 100); do python3 -c "import socket,sys;'
        f"[socket.create_connection(('127.0.0.1',p),1).close() for p in ({HTTP_PORT},{WS_PORT},{TCP_PORT},8080)]\" "
        "2>/dev/null && exit 0; sleep 0.1; done; exit 1"
    )
    result = await sandbox.execute(Command(command=["sh", "-c", script], timeout=60))
    assert result.exit_code == 0, result.stderr


@pytest.fixture(scope="module")
async def target(proxy_admin: Any) -> AsyncIterator[Sandbox]:
    """Tenant A's sandbox with the services running."""
    sandbox = Sandbox(
        SandboxConfig(
            image="python:3.11",
            memory="512m",
            cpus=0.5,
            base_url=proxy_admin.url,
            extra_headers={"X-API-Key": KEY_A},
        )
    )
    await sandbox.start()
    await _start_services(sandbox)
    yield sandbox
    await sandbox.stop()


@pytest.fixture
def base(proxy_admin: Any, target: Sandbox) -> str:
    return f"{proxy_admin.url}{PREFIX}/sandboxes/{target.sandbox_id}/proxy"


def _ws_base(proxy_admin: Any, sandbox_id: str, route: str = "proxy") -> str:
    return f"ws://127.0.0.1:{proxy_admin.port}{PREFIX}/sandboxes/{sandbox_id}/{route}"


A = {"X-API-Key": KEY_A}


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(trust_env=False, timeout=60, headers=A) as client:
        yield client


# ---------------------------------------------------------------------------------------------
# HTTP


async def test_default_port_is_8080_served_by_python_http_server(
    base: str, http: httpx.AsyncClient
) -> None:
    page = await http.get(f"{base}/index.html")
    assert page.status_code == 200 and page.text == "hello from the sandbox\n"
    script = await http.get(f"{base}/services.py")
    assert script.status_code == 200 and script.text == SERVICES.read_text()
    missing = await http.get(f"{base}/no-such-file")
    assert missing.status_code == 404  # the service's own answer, passed on
    # One Date header: the admin's (Python's http.server dates its answers too).
    assert len(page.headers.get_list("date")) == 1, page.headers


async def test_port_comes_from_path_header_or_query(base: str, http: httpx.AsyncClient) -> None:
    by_path = await http.get(f"{base}/port/{HTTP_PORT}/echo?a=1")
    by_header = await http.get(f"{base}/echo?a=1", headers={"X-ROCK-Target-Port": str(HTTP_PORT)})
    by_query = await http.get(f"{base}/echo?a=1&rock_target_port={HTTP_PORT}")
    for answer in (by_path, by_header, by_query):
        assert answer.status_code == 200, answer.text
        seen = answer.json()
        assert seen["path"] == "/echo" and seen["query"] == "a=1"
        assert "x-rock-target-port" not in seen["headers"]


async def test_more_than_one_port_source_is_refused_naming_them(
    base: str, http: httpx.AsyncClient
) -> None:
    answer = await http.get(f"{base}/port/{HTTP_PORT}/echo", headers={"X-ROCK-Target-Port": "8000"})
    assert answer.status_code == 400
    assert (
        answer.json()["detail"] == "Cannot specify target port via multiple sources: path, header"
    )
    answer = await http.get(
        f"{base}/echo?rock_target_port=8000", headers={"X-ROCK-Target-Port": "8000"}
    )
    assert answer.status_code == 400 and "header, query" in answer.json()["detail"]


async def test_methods_bodies_query_and_headers_are_forwarded_hop_by_hop_dropped(
    base: str, http: httpx.AsyncClient
) -> None:
    for method in ("GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"):
        answer = await http.request(
            method,
            f"{base}/port/{HTTP_PORT}/echo?x=1&y=two",
            content=b"payload-" + method.encode(),
            headers={
                "X-Custom": "kept",
                "Connection": "keep-alive, X-Dropped",
                "X-Dropped": "no",
                "Keep-Alive": "timeout=5",
            },
        )
        assert answer.status_code == 200, (method, answer.text)
        seen = answer.json()
        assert seen["method"] == method and seen["query"] == "x=1&y=two"
        assert seen["body"] == "payload-" + method
        assert seen["headers"]["x-custom"] == "kept"
        for gone in ("x-dropped", "keep-alive", "x-api-key"):
            assert gone not in seen["headers"], (method, gone)
        assert seen["headers"]["x-forwarded-prefix"].endswith(f"/proxy/port/{HTTP_PORT}")
        assert answer.headers["x-service"] == "echo"
    head = await http.head(f"{base}/port/{HTTP_PORT}/echo")
    assert head.status_code == 200 and head.content == b""
    # A chunked request body arrives whole.

    async def parts() -> AsyncIterator[bytes]:
        for piece in (b"one,", b"two,", b"three"):
            yield piece

    chunked = await http.post(f"{base}/port/{HTTP_PORT}/echo", content=parts())
    assert chunked.json()["body"] == "one,two,three"


async def test_redirects_are_rewritten_under_the_proxy_prefix(
    base: str, http: httpx.AsyncClient
) -> None:
    path_prefix = f"{PREFIX}/sandboxes/{base.rsplit('/sandboxes/', 1)[1].split('/')[0]}/proxy"
    relative = await http.get(f"{base}/port/{HTTP_PORT}/redirect")
    assert relative.status_code == 302
    assert relative.headers["location"] == f"{path_prefix}/port/{HTTP_PORT}/echo?from=redirect"
    absolute = await http.get(f"{base}/port/{HTTP_PORT}/redirect-absolute")
    assert absolute.headers["location"] == f"{path_prefix}/port/{HTTP_PORT}/echo?from=absolute"
    by_query = await http.get(f"{base}/redirect?rock_target_port={HTTP_PORT}")
    assert (
        by_query.headers["location"]
        == f"{path_prefix}/echo?from=redirect&rock_target_port={HTTP_PORT}"
    )
    by_header = await http.get(f"{base}/redirect", headers={"X-ROCK-Target-Port": str(HTTP_PORT)})
    assert by_header.headers["location"] == f"{path_prefix}/echo?from=redirect"
    away = await http.get(f"{base}/port/{HTTP_PORT}/redirect-away")
    assert away.headers["location"] == "https://example.invalid/elsewhere"
    # Followed, the rewritten location lands on the service again.
    followed = await http.get(f"{base}/port/{HTTP_PORT}/redirect", follow_redirects=True)
    assert followed.status_code == 200 and followed.json()["query"] == "from=redirect"


async def test_server_sent_events_arrive_one_by_one(base: str, http: httpx.AsyncClient) -> None:
    # The service writes event N+1 only after /sse-next; were the proxy to hold the stream
    # back, the first event would never arrive and this would time out.
    events = []
    async with http.stream("GET", f"{base}/port/{HTTP_PORT}/sse?n=4") as stream:
        assert stream.headers["content-type"] == "text/event-stream"
        async for line in stream.aiter_lines():
            if line.startswith("data: "):
                events.append(line[len("data: ") :])
                if len(events) < 4:
                    release = await http.get(f"{base}/port/{HTTP_PORT}/sse-next")
                    assert release.status_code == 200
    assert events == ["event 0", "event 1", "event 2", "event 3"]


async def test_bad_ports_unknown_sandboxes_and_closed_ports(
    base: str, http: httpx.AsyncClient, proxy_admin: Any
) -> None:
    for bad in ("0", "65536", "abc", "-1"):
        answer = await http.get(f"{base}/port/{bad}/x")
        assert (
            answer.status_code == 400
            and "expected a port number 1..65535" in answer.json()["detail"]
        ), answer.text
        answer = await http.get(f"{base}/x", headers={"X-ROCK-Target-Port": bad})
        assert answer.status_code == 400 and "X-ROCK-Target-Port" in answer.json()["detail"]
    rocklet = await http.get(f"{base}/port/22555/is_alive")
    assert rocklet.status_code == 400 and "rocklet's own" in rocklet.json()["detail"]
    closed = await http.get(f"{base}/port/{CLOSED_PORT}/")
    assert closed.status_code == 502
    assert f"nothing listens on port {CLOSED_PORT}" in closed.json()["detail"]
    unknown = await http.get(
        f"{proxy_admin.url}{PREFIX}/sandboxes/no-such-sandbox/proxy/port/{HTTP_PORT}/echo"
    )
    assert (
        unknown.status_code == 404
        and unknown.json()["detail"] == "Sandbox no-such-sandbox not found"
    )


async def test_a_request_past_proxy_timeout_is_answered_504(
    base: str, http: httpx.AsyncClient
) -> None:
    answer = await http.get(f"{base}/port/{HTTP_PORT}/slow?s=30")
    assert answer.status_code == 504 and "proxy_timeout" in answer.json()["detail"]


async def test_each_proxied_request_counts_as_activity(
    base: str, http: httpx.AsyncClient, target: Sandbox
) -> None:
    before = (await target.get_status()).auto_stop_time
    await _clock_past(time.time())
    assert (await http.get(f"{base}/port/{HTTP_PORT}/echo")).status_code == 200
    after = (await target.get_status()).auto_stop_time
    assert before is not None and after is not None and after > before


async def _clock_past(seen: float) -> None:
    """Wait for the clock to pass ``seen`` (a gate on the clock, not a guessed pause): activity
    after this is stamped later than any the status read before ``seen`` showed."""
    await eventually_async(lambda: time.time() > seen, what="the clock past the status read")


def _peak_rss(pid: int) -> int:
    """The process's peak resident memory so far (VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


async def test_a_256mib_download_and_upload_stream_without_growing_the_admin(
    base: str, http: httpx.AsyncClient, proxy_admin: Any
) -> None:
    pid = proxy_admin.process.pid
    # 256 MiB each way: four times the growth allowed below, so an admin that held a whole
    # body (or a quarter of it) fails; bigger adds only time. `rock bench proxy` streams 1 GiB.
    mib = 256
    size = mib << 20
    # Warm up the path first: what is measured is growth during the transfers.
    assert len((await http.get(f"{base}/port/{HTTP_PORT}/bytes?n=1048576")).content) == 1 << 20
    baseline = max(_rss(pid), _peak_rss(pid))
    received = 0
    digest = hashlib.sha256()
    async with http.stream("GET", f"{base}/port/{HTTP_PORT}/bytes?n={size}") as stream:
        assert stream.headers["content-length"] == str(size)
        async for chunk in stream.aiter_raw():
            received += len(chunk)
            digest.update(chunk)
    assert received == size
    block = b"\x5a" * (1 << 20)
    assert digest.hexdigest() == hashlib.sha256(block * mib).hexdigest()

    async def upload() -> AsyncIterator[bytes]:
        for _ in range(mib):
            yield block

    answer = await http.post(
        f"{base}/port/{HTTP_PORT}/upload", content=upload(), headers={"Content-Length": str(size)}
    )
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"bytes": size, "sha256": digest.hexdigest()}
    growth = _peak_rss(pid) - baseline
    assert growth < 64 * 1024 * 1024, (
        f"the admin grew by {growth / 2**20:.1f} MiB during 2 x {mib} MiB of transfers"
    )


# ---------------------------------------------------------------------------------------------
# WebSocket


async def test_websocket_echo_text_binary_and_16mib_messages(
    proxy_admin: Any, target: Sandbox
) -> None:
    url = _ws_base(proxy_admin, target.sandbox_id) + f"/port/{WS_PORT}/echo"
    async with ws_connect(
        url, additional_headers=A, max_size=None, subprotocols=["chat"], proxy=None
    ) as ws:
        assert ws.subprotocol == "chat"
        await ws.send("hello, sandbox")
        assert await ws.recv() == "hello, sandbox"
        await ws.send(b"\x00\x01binary\xff")
        assert await ws.recv() == b"\x00\x01binary\xff"
        big = os.urandom(16 * 1024 * 1024)
        await ws.send(big)
        assert await ws.recv() == big
        text = "ü" * (8 * 1024 * 1024)  # 16 MiB of UTF-8
        await ws.send(text)
        assert await ws.recv() == text
    by_header = _ws_base(proxy_admin, target.sandbox_id) + "/echo"
    async with ws_connect(
        by_header, additional_headers={**A, "X-ROCK-Target-Port": str(WS_PORT)}, proxy=None
    ) as ws:
        await ws.send("via header")
        assert await ws.recv() == "via header"


async def _flood_stalled(sandbox: Sandbox, still_for: float = 2.0) -> int:
    """How many MiB the WebSocket service's flood has sent, once that count has not grown for
    ``still_for`` seconds: the service has sent all that the way to the client takes, and a
    client that does not read holds it there."""
    seen: dict[str, float] = {"sent": -1.0, "since": time.monotonic()}

    async def progress() -> tuple[int, float]:
        read = await sandbox.execute(
            Command(command=["cat", sandbox_services.FLOOD_SENT], timeout=30)
        )
        sent = int(read.stdout) if read.exit_code == 0 and read.stdout.strip() else -1
        if sent != seen["sent"]:
            seen["sent"], seen["since"] = sent, time.monotonic()
        return sent, time.monotonic() - seen["since"]

    sent, _ = await eventually_async(
        progress,
        until=lambda answer: answer[0] >= 0 and answer[1] >= still_for,
        what="the flood's sent count to stop growing",
        timeout=120,
        interval=0.2,
    )
    return sent


async def test_websocket_back_pressure_a_client_that_does_not_read_holds_the_service(
    proxy_admin: Any, target: Sandbox
) -> None:
    # The service sends 128 MiB (random: compression does not shrink it) as fast as it can; the
    # client reads none of it until the service is held (its count of sent MiB stops growing,
    # short of the flood). The proxy passes messages one at a time and waits for the client, so
    # the admin holds a few MiB at most, not the flood; then every message arrives.
    pid = proxy_admin.process.pid
    url = _ws_base(proxy_admin, target.sandbox_id) + f"/port/{WS_PORT}/"
    async with ws_connect(url, additional_headers=A, max_size=None, max_queue=1, proxy=None) as ws:
        before = _rss(pid)
        await ws.send("flood 128")
        sent = await _flood_stalled(target)
        assert sent < 128, "the whole flood left the service for a client that reads nothing"
        held = _rss(pid) - before
        assert held < 64 * 1024 * 1024, (
            f"the admin holds {held / 2**20:.0f} MiB of a client's unread messages"
        )
        count = 0
        while (message := await ws.recv()) != "flood done":
            assert len(message) == 1 << 20
            count += 1
        assert count == 128


async def _close_of(url: str, headers: dict[str, str]) -> tuple[int, str]:
    async with ws_connect(url, additional_headers=headers, proxy=None) as ws:
        with pytest.raises(ConnectionClosed) as closed:
            await ws.recv()
    assert closed.value.rcvd is not None
    return closed.value.rcvd.code, closed.value.rcvd.reason


async def test_websocket_refusals_carry_rocks_close_codes(
    proxy_admin: Any, target: Sandbox
) -> None:
    ws = _ws_base(proxy_admin, target.sandbox_id)
    code, reason = await _close_of(f"{ws}/port/70000/", A)
    assert code == 1008 and "1..65535" in reason
    code, reason = await _close_of(f"{ws}/port/22555/", A)
    assert code == 1008 and "rocklet" in reason
    code, reason = await _close_of(f"{ws}/port/{WS_PORT}/?rock_target_port=1", A)
    assert code == 1008 and "multiple sources" in reason
    code, reason = await _close_of(f"{ws}/port/{CLOSED_PORT}/", A)
    assert code == 1011 and "nothing listens" in reason
    code, reason = await _close_of(f"{ws}/port/{HTTP_PORT}/echo", A)  # not a WebSocket service
    assert code == 1011 and "refused the WebSocket handshake" in reason
    code, reason = await _close_of(
        _ws_base(proxy_admin, "no-such-sandbox") + f"/port/{WS_PORT}/", A
    )
    assert code == 1008 and "not found" in reason


# ---------------------------------------------------------------------------------------------
# Port-forward


async def test_portforward_websocket_carries_raw_tcp_with_half_close(
    proxy_admin: Any, target: Sandbox
) -> None:
    url = _ws_base(proxy_admin, target.sandbox_id, "portforward") + f"?port={TCP_PORT}"
    async with ws_connect(url, additional_headers=A, max_size=None, proxy=None) as ws:
        payload = os.urandom(3 * 1024 * 1024 + 7)
        await ws.send(payload)
        await ws.send(b"")  # no more from us: the echo server answers everything, then closes
        echoed = b""
        while True:
            data = await ws.recv()
            if data == b"":
                break
            echoed += data
        assert echoed == payload
        with pytest.raises(ConnectionClosed) as closed:
            await ws.recv()
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1000
    base = _ws_base(proxy_admin, target.sandbox_id, "portforward")
    assert (await _close_of(f"{base}?port={CLOSED_PORT}", A))[0] == 1011
    assert (await _close_of(f"{base}?port=0", A))[0] == 1008
    assert (await _close_of(f"{base}?port=22555", A))[0] == 1008
    assert (await _close_of(base, A))[0] == 1008


def _rock(*args: str) -> list[str]:
    exe = shutil.which("rock", path=os.path.dirname(sys.executable)) or shutil.which("rock")
    assert exe, "the rock command is not installed"
    return [exe, *args]


async def test_rock_sandbox_port_forward_serves_a_plain_socket_client(
    proxy_admin: Any, target: Sandbox
) -> None:
    await asyncio.to_thread(_port_forward_session, proxy_admin, str(target.sandbox_id))


def _port_forward_session(proxy_admin: Any, sandbox_id: str) -> None:
    env = {**os.environ, "ROCK_API_KEY": KEY_A, "ROCK_BASE_URL": proxy_admin.url}
    process = subprocess.Popen(
        _rock("sandbox", "port-forward", sandbox_id, f":{TCP_PORT}", f":{HTTP_PORT}"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        lines = [process.stdout.readline() for _ in range(2)]  # type: ignore[union-attr]
        ports = {}
        for line in lines:
            assert line.startswith("Forwarding from 127.0.0.1:"), (
                line,
                process.stderr.read() if process.poll() is not None else "",
            )  # type: ignore[union-attr]
            local, remote = line.split("127.0.0.1:", 1)[1].split(" -> ")
            ports[int(remote)] = int(local)
        # Two clients at once, each with its own connection in the sandbox.
        with (
            socket.create_connection(("127.0.0.1", ports[TCP_PORT]), timeout=30) as one,
            socket.create_connection(("127.0.0.1", ports[TCP_PORT]), timeout=30) as two,
        ):
            one.sendall(b"first client\n")
            two.sendall(b"second client\n")
            assert _read_exactly(one, 13) == b"first client\n"
            assert _read_exactly(two, 14) == b"second client\n"
            payload = os.urandom(1 << 20)
            one.sendall(payload)
            one.shutdown(socket.SHUT_WR)
            assert _read_to_end(one) == payload
        # HTTP through the forward: what a browser would do.
        answer = httpx.get(
            f"http://127.0.0.1:{ports[HTTP_PORT]}/echo?via=forward", trust_env=False, timeout=30
        )
        assert answer.json()["query"] == "via=forward"
    finally:
        process.terminate()
        code = process.wait(30)
        assert code == 0, process.stderr.read()  # type: ignore[union-attr]


def test_rock_sandbox_port_forward_of_an_unknown_sandbox_exits_3(proxy_admin: Any) -> None:
    env = {**os.environ, "ROCK_API_KEY": KEY_A, "ROCK_BASE_URL": proxy_admin.url}
    done = subprocess.run(
        _rock("sandbox", "port-forward", "no-such-sandbox", "9000"),
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 3 and "not found" in done.stderr


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, f"connection closed after {len(data)} of {n} bytes"
        data += chunk
    return data


def _read_to_end(sock: socket.socket) -> bytes:
    parts = []
    while True:
        chunk = sock.recv(1 << 16)
        if not chunk:
            return b"".join(parts)
        parts.append(chunk)


# ---------------------------------------------------------------------------------------------
# Sandboxes without a network, and tenancy


async def test_proxy_reaches_a_sandbox_without_a_network(
    proxy_admin: Any, http: httpx.AsyncClient
) -> None:
    sandbox = Sandbox(
        SandboxConfig(
            image="python:3.11",
            memory="256m",
            cpus=0.5,
            base_url=proxy_admin.url,
            network="none",
            extra_headers=A,
        )
    )
    async with sandbox:
        await _start_services(sandbox)
        url = f"{proxy_admin.url}{PREFIX}/sandboxes/{sandbox.sandbox_id}/proxy"
        assert (await http.get(f"{url}/index.html")).text == "hello from the sandbox\n"
        assert (await http.get(f"{url}/port/{HTTP_PORT}/echo?n=1")).json()["query"] == "n=1"
        async with ws_connect(
            _ws_base(proxy_admin, str(sandbox.sandbox_id)) + f"/port/{WS_PORT}/",
            additional_headers=A,
            proxy=None,
        ) as ws:
            await ws.send("offline")
            assert await ws.recv() == "offline"
    stopped = await http.get(f"{url}/index.html")
    assert stopped.status_code == 409 and "not running" in stopped.json()["detail"], stopped.text


async def client_get(url: str, headers: dict[str, str]) -> httpx.Response:
    async with httpx.AsyncClient(trust_env=False, timeout=30) as client:
        return await client.get(url, headers=headers)


async def test_another_tenants_key_reaches_nothing(
    proxy_admin: Any, target: Sandbox, base: str
) -> None:
    b = {"X-API-Key": KEY_B}
    async with httpx.AsyncClient(trust_env=False, timeout=30) as client:
        for headers in (b, {"Authorization": f"Bearer {KEY_B}"}):
            answer = await client.get(f"{base}/port/{HTTP_PORT}/echo", headers=headers)
            assert answer.status_code == 404
            assert (
                answer.json()["detail"] == f"Sandbox {target.sandbox_id} not found"
            )  # as an unknown id
        assert (await client.get(f"{base}/port/{HTTP_PORT}/echo")).status_code == 401
        assert (
            await client.get(f"{base}/port/{HTTP_PORT}/echo", headers={"X-API-Key": "wrong"})
        ).status_code == 401
        # The admin's key is the admin's: a Bearer key is not passed on to the sandbox.
        seen = (
            await client.get(
                f"{base}/port/{HTTP_PORT}/echo", headers={"Authorization": f"Bearer {KEY_A}"}
            )
        ).json()
        assert "authorization" not in seen["headers"]
    sid = str(target.sandbox_id)
    vnc = await client_get(f"{proxy_admin.url}{PREFIX}/sandboxes/{sid}/vnc/", b)
    assert vnc.status_code == 404 and vnc.json()["detail"] == f"Sandbox {sid} not found"
    for route, query in (
        ("proxy", f"/port/{WS_PORT}/"),
        ("vnc", "/"),
        ("portforward", f"?port={TCP_PORT}"),
        ("shell", ""),
    ):
        code, reason = await _close_of(_ws_base(proxy_admin, sid, route) + query, b)
        assert code == 1008 and reason == f"Sandbox {sid} not found", (route, code, reason)
        with pytest.raises(InvalidStatus) as refused:
            async with ws_connect(_ws_base(proxy_admin, sid, route) + query, proxy=None):
                pass
        assert refused.value.response.status_code == 403
    # Through the SDK with B's key: nothing either.
    other = Sandbox(SandboxConfig(base_url=proxy_admin.url, extra_headers=b))
    from rock_core.errors import SandboxNotFound

    with pytest.raises(SandboxNotFound):
        await other.attach(sid)


async def test_json_routes_still_answer_beside_the_proxy(
    proxy_admin: Any, target: Sandbox, http: httpx.AsyncClient
) -> None:
    status = await http.get(
        f"{proxy_admin.url}{PREFIX}/get_status", params={"sandbox_id": target.sandbox_id}
    )
    assert status.json()["status"] == "Success"
    unknown = await http.get(f"{proxy_admin.url}{PREFIX}/sandboxes/{target.sandbox_id}/proxyish")
    assert unknown.status_code == 404
    assert json.loads((await http.get(f"{proxy_admin.url}/healthz")).text)["status"] == "ok"


# ---------------------------------------------------------------------------------------------
# `rock sandbox shell`: a real terminal through the admin, driven from a pseudo-terminal here


class _Pty:
    """``rock sandbox shell`` running on a pseudo-terminal this test holds the other end of."""

    def __init__(self, args: list[str], env: dict[str, str], rows: int, cols: int) -> None:
        import fcntl
        import pty
        import struct
        import termios

        self.master, slave = pty.openpty()
        fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

        def controlling_terminal() -> None:
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        self.process = subprocess.Popen(
            args,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            preexec_fn=controlling_terminal,
            close_fds=True,
        )
        os.close(slave)
        self.output = b""

    def resize(self, rows: int, cols: int) -> None:
        import fcntl
        import struct
        import termios

        fcntl.ioctl(
            self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0)
        )  # SIGWINCH to rock

    def send(self, data: bytes) -> None:
        os.write(self.master, data)

    def expect(self, text: bytes, timeout: float = 30.0) -> bytes:
        import select

        deadline = time.monotonic() + timeout
        while text not in self.output:
            left = deadline - time.monotonic()
            assert left > 0, f"no {text!r} from the shell; it printed: {self.output[-800:]!r}"
            if select.select([self.master], [], [], min(left, 0.5))[0]:
                try:
                    chunk = os.read(self.master, 65536)
                except OSError:  # EIO: the command ended
                    chunk = b""
                assert chunk or self.process.poll() is None, (
                    f"rock ended before {text!r}: {self.output[-800:]!r}"
                )
                self.output += chunk
        found = self.output
        self.output = self.output[self.output.index(text) + len(text) :]
        return found

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        os.close(self.master)


def _shell_session(proxy_admin: Any, sandbox_id: str) -> None:
    env = {**os.environ, "ROCK_API_KEY": KEY_A, "ROCK_BASE_URL": proxy_admin.url, "TERM": "xterm"}
    term = _Pty(_rock("sandbox", "shell", sandbox_id), env, rows=30, cols=100)
    try:
        term.expect(b"# ")  # the prompt: keys typed before it may be flushed by the shell's start
        term.send(b"echo shell-$((6*7))\r")
        term.expect(b"shell-42")
        term.send(b"python3 -q\r")
        term.expect(b">>> ")
        term.send(b"import os, time; print('size', tuple(os.get_terminal_size()))\r")
        term.expect(b"size (100, 30)")
        # A window resize here reaches the program there (SIGWINCH, then the new size).
        term.resize(45, 132)

        def resized() -> bool:
            term.send(b"print('now', tuple(os.get_terminal_size()))\r")
            return b"now (132, 45)" in term.expect(b">>> ")

        eventually(resized, what="the new window size in the program", timeout=30, interval=0.2)
        # Ctrl-C interrupts the foreground program, not the shell.
        term.send(b"print('in ' + 'sleep'); time.sleep(120)\r")
        term.expect(
            b"in sleep"
        )  # the program's own output (the echoed line reads 'in ' + 'sleep'): it runs
        term.send(b"\x03")
        term.expect(b"KeyboardInterrupt")
        term.expect(b">>> ")
        term.send(b"exit()\r")
        term.send(b"exit 3\r")
        assert term.process.wait(30) == 3  # the shell's exit code is rock's
    finally:
        term.close()


async def test_rock_sandbox_shell_drives_python_interactively(
    proxy_admin: Any, target: Sandbox
) -> None:
    await asyncio.to_thread(_shell_session, proxy_admin, str(target.sandbox_id))


async def test_rock_sandbox_shell_as_another_user_and_unknown_users(
    proxy_admin: Any, target: Sandbox
) -> None:
    created = await target.execute(
        Command(command=["useradd", "-m", "-s", "/bin/bash", "agent"], timeout=30)
    )
    assert created.exit_code in (0, 9), created.stderr  # 9: already there
    env = {**os.environ, "ROCK_API_KEY": KEY_A, "ROCK_BASE_URL": proxy_admin.url}
    run = lambda *args: subprocess.run(
        _rock("sandbox", "shell", str(target.sandbox_id), *args),  # noqa: E731
        capture_output=True,
        env=env,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    done = await asyncio.to_thread(run, "--user", "agent", "--command", "id -un; pwd; exit 4")
    assert done.returncode == 4 and b"agent" in done.stdout and b"/home/agent" in done.stdout, done
    refused = await asyncio.to_thread(run, "--user", "nobody-here")
    assert refused.returncode == 1 and b"nobody-here" in refused.stderr, refused


async def test_rocks_vnc_route_reaches_port_8006(
    proxy_admin: Any, target: Sandbox, http: httpx.AsyncClient
) -> None:
    started = await target.execute(
        Command(
            command=[
                "sh",
                "-c",
                (
                    "cd /srv && (nohup python3 -m http.server 8006 --bind 127.0.0.1 >/tmp/vnc.log 2>&1 &) && "
                    "for i in $(seq 100); do python3 -c \"import socket;socket.create_connection(('127.0.0.1',8006),1)\" "
                    "2>/dev/null && exit 0; sleep 0.1; done; exit 1"
                ),
            ],
            timeout=60,
        )
    )
    assert started.exit_code == 0, started.stderr
    page = await http.get(f"{proxy_admin.url}{PREFIX}/sandboxes/{target.sandbox_id}/vnc/index.html")
    assert page.status_code == 200 and page.text == "hello from the sandbox\n"
