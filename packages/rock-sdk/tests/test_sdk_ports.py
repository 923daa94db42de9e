"""``port_mapping``: host ports on 127.0.0.1 that reach a sandbox's ports 22555 and 8080.

The engine serves them itself and carries each connection through the sandbox's rocklet (no
``docker-proxy``, no port published by Docker), so they behave as published ports do: a web
server started in the sandbox on 8080 answers at ``127.0.0.1:<port_mapping[8080]>`` on the
host, with bodies of any size, and the ports close when the sandbox stops. Runs embedded and,
with ``ROCK_TEST_REMOTE=1``, through a real admin (whose engine then holds the ports).
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

import httpx
import pytest
from rock.actions import Command
from rock.sdk.sandbox.client import Sandbox
from rock.sdk.sandbox.config import SandboxConfig

pytestmark = [pytest.mark.docker, pytest.mark.anyio]


async def _get_when_up(url: str, timeout: float = 30.0) -> httpx.Response:
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient(trust_env=False) as http:
        while True:
            try:
                return await http.get(url, timeout=10)
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                await _sleep(0.1)


async def _sleep(seconds: float) -> None:
    import asyncio

    await asyncio.sleep(seconds)


async def test_port_mapping_reaches_a_web_server_in_the_sandbox(engine: Any, small: dict[str, Any]) -> None:
    sandbox = Sandbox(SandboxConfig(**small))
    async with sandbox:
        status = await sandbox.get_status()
        assert {22555, 8080} <= set(status.port_mapping), status.port_mapping
        web, rocklet = status.port_mapping[8080], status.port_mapping[22555]
        # The rocklet itself, as ROCK's port 22555 (is_alive needs no secret).
        alive = await _get_when_up(f"http://127.0.0.1:{rocklet}/is_alive")
        assert alive.status_code == 200 and alive.json()["is_alive"] is True
        # Nothing listens on 8080 yet: the connection is accepted, then closed.
        async with httpx.AsyncClient(trust_env=False) as http:
            with pytest.raises(httpx.TransportError):
                await http.get(f"http://127.0.0.1:{web}/", timeout=10)
        script = (
            "mkdir -p /srv && cd /srv && echo 'hello from the sandbox' > index.html && "
            "head -c 8388608 /dev/urandom > big.bin && sha256sum big.bin | cut -d' ' -f1 > big.sha && "
            "(nohup python3 -m http.server 8080 --bind 127.0.0.1 >/tmp/web.log 2>&1 &) && echo started"
        )
        started = await sandbox.execute(Command(command=["sh", "-c", script], timeout=60))
        assert started.exit_code == 0, started.stderr
        page = await _get_when_up(f"http://127.0.0.1:{web}/index.html")
        assert page.status_code == 200 and page.text == "hello from the sandbox\n"
        # 8 MiB through the forward, intact.
        async with httpx.AsyncClient(trust_env=False) as http:
            big = await http.get(f"http://127.0.0.1:{web}/big.bin", timeout=60)
            digest = (await http.get(f"http://127.0.0.1:{web}/big.sha", timeout=10)).text.strip()
        assert len(big.content) == 8 * 1024 * 1024 and hashlib.sha256(big.content).hexdigest() == digest
    # Stopped: nothing listens on its host ports any more.
    async with httpx.AsyncClient(trust_env=False) as http:
        for port in (web, rocklet):
            with pytest.raises(httpx.ConnectError):
                await http.get(f"http://127.0.0.1:{port}/", timeout=5)
