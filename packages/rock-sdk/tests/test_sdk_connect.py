"""The SDK's way into a sandbox's services: ``get_url``, ``open_port`` and ``open_shell``.

Embedded (the default), ``get_url`` is a port on 127.0.0.1 this process opens on demand and
the shell talks to the rocklet directly; with ``ROCK_TEST_REMOTE=1`` the same tests run through
a real admin (its proxy URL and WebSockets). The services are real: ``python3 -m http.server``
and a TCP echo server in the sandbox (:mod:`rock.bench.sandbox_services`).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from rock.actions import Command, WriteFileRequest
from rock.bench import sandbox_services
from rock_core.errors import InvalidParameter, RockError, SandboxNotFound
from rock_core.testing import eventually_async

from .conftest import REMOTE

pytestmark = [pytest.mark.docker, pytest.mark.anyio]

WEB_PORT, TCP_PORT = 8000, 9000


@pytest.fixture(scope="module")
async def services(sandbox: Any) -> Any:
    await sandbox.write_file(
        WriteFileRequest(
            content=Path(sandbox_services.__file__).read_text(), path="/srv/services.py"
        )
    )
    script = (
        "cd /srv && echo 'page from the sandbox' > page.html && "
        f"(nohup python3 -m http.server {WEB_PORT} --bind 127.0.0.1 >/tmp/web.log 2>&1 &) && "
        f"(nohup python3 services.py tcp {TCP_PORT} >/tmp/tcp.log 2>&1 &) && "
        'for i in $(seq 100); do python3 -c "import socket;'
        f"[socket.create_connection(('127.0.0.1',p),1).close() for p in ({WEB_PORT},{TCP_PORT})]\" "
        "2>/dev/null && exit 0; sleep 0.1; done; exit 1"
    )
    result = await sandbox.execute(Command(command=["sh", "-c", script], timeout=60))
    assert result.exit_code == 0, result.stderr
    return sandbox


async def test_get_url_reaches_a_web_server_in_the_sandbox(services: Any) -> None:
    url = await services.get_url(WEB_PORT, "page.html")
    if REMOTE:
        assert f"/sandboxes/{services.sandbox_id}/proxy/port/{WEB_PORT}/page.html" in url
    else:
        assert url.startswith("http://127.0.0.1:") and url.endswith("/page.html")
        assert (
            await services.get_url(WEB_PORT) == url[: -len("page.html")]
        )  # the same local port, reused
    async with httpx.AsyncClient(trust_env=False, timeout=30) as http:
        page = await http.get(url)
    assert page.status_code == 200 and page.text == "page from the sandbox\n"


async def test_get_url_refuses_what_is_not_a_sandbox_port(services: Any) -> None:
    for port in (0, 65536, 22555, "80"):
        with pytest.raises(InvalidParameter):
            await services.get_url(port)


async def test_open_port_carries_raw_bytes_with_half_close(services: Any) -> None:
    async with await services.open_port(TCP_PORT) as conn:
        payload = bytes(range(256)) * 2048
        await conn.send(payload)
        await conn.send_eof()
        echoed = b""
        while data := await conn.receive():
            echoed += data
    assert echoed == payload
    with pytest.raises(RockError):
        await services.open_port(8999)  # nothing listens there


async def _drain(shell: Any) -> bytes:
    out = b""
    while (data := await shell.receive()) is not None:
        out += data
    return out


async def test_open_shell_runs_a_terminal_with_its_size_and_exit_code(services: Any) -> None:
    async with await services.open_shell(rows=33, cols=111, command="stty size; exit 9") as shell:
        out = await _drain(shell)
    assert b"33 111" in out and shell.exit_code == 9
    async with await services.open_shell(command="python3 -q") as shell:
        await shell.resize(50, 140)
        await shell.send(
            b"import os; print('cols', os.get_terminal_size().columns); raise SystemExit(6)\r"
        )
        out = await _drain(shell)
    assert b"cols 140" in out and shell.exit_code == 6


async def test_open_shell_refuses_unknown_users_and_sandboxes(services: Any, engine: Any) -> None:
    with pytest.raises(InvalidParameter, match="nobody-at-all"):
        shell = await services.open_shell(user="nobody-at-all")
        await _drain(shell)
    with pytest.raises(SandboxNotFound):
        shell = await engine.open_shell("no-such-sandbox")
        await _drain(shell)


async def test_a_connection_through_get_url_counts_as_activity(services: Any) -> None:
    url = await services.get_url(
        WEB_PORT, "page.html"
    )  # asking for the URL is activity too: before the clock
    before = (await services.get_status()).auto_stop_time
    # A gate on the clock, not a guessed pause: the connection below is stamped later than any
    # activity ``before`` shows once the clock has passed this reading.
    seen = time.time()
    await eventually_async(lambda: time.time() > seen, what="the clock past the status read")
    async with httpx.AsyncClient(trust_env=False, timeout=30) as http:
        assert (await http.get(url)).status_code == 200
    after = (await services.get_status()).auto_stop_time
    assert before is not None and after is not None and after > before
