"""``port_mapping``: host ports on 127.0.0.1 that reach a sandbox's port 8080 (and 22555, the
rocklet's own, only with the engine's ``forward_rocklet_port``).

The engine serves them itself and carries each connection through the sandbox's rocklet (no
``docker-proxy``, no port published by Docker), so they behave as published ports do: a web
server started in the sandbox on 8080 answers at ``127.0.0.1:<port_mapping[8080]>`` on the
host, with bodies of any size, and the ports close when the sandbox stops. Runs embedded and,
with ``ROCK_TEST_REMOTE=1``, through a real admin (whose engine then holds the ports).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import httpx
import pytest

from rock.actions import Command
from rock.sdk.sandbox.client import Sandbox
from rock.sdk.sandbox.config import SandboxConfig
from rock_core.testing import eventually_async

pytestmark = [pytest.mark.docker, pytest.mark.anyio]


async def _get_when_up(url: str, timeout: float = 30.0) -> httpx.Response:
    async with httpx.AsyncClient(trust_env=False) as http:

        async def get() -> httpx.Response | httpx.TransportError:
            try:
                return await http.get(url, timeout=10)
            except httpx.TransportError as exc:
                return exc  # not up yet: shown if it never comes up

        answer = await eventually_async(
            get,
            until=lambda answer: isinstance(answer, httpx.Response),
            what=f"an answer from {url}",
            timeout=timeout,
            interval=0.1,
        )
    assert isinstance(answer, httpx.Response)
    return answer


async def test_port_mapping_reaches_a_web_server_in_the_sandbox(
    engine: Any, small: dict[str, Any]
) -> None:
    sandbox = Sandbox(SandboxConfig(**small))
    async with sandbox:
        status = await sandbox.get_status()
        # No client of rock's needs the rocklet's own port on the host: not forwarded by default.
        assert set(status.port_mapping) == {8080}, status.port_mapping
        web = status.port_mapping[8080]
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
        assert (
            len(big.content) == 8 * 1024 * 1024
            and hashlib.sha256(big.content).hexdigest() == digest
        )
    # Stopped: nothing listens on its host port any more.
    async with httpx.AsyncClient(trust_env=False) as http:
        with pytest.raises(httpx.ConnectError):
            await http.get(f"http://127.0.0.1:{web}/", timeout=5)


def test_forward_rocklet_port_gives_rocks_port_22555_back(
    tmp_path: Path, docker_client: Any, admin_launcher: Any
) -> None:
    """``[engine] forward_rocklet_port = true``: ``port_mapping`` has 22555 again, as ROCK's,
    reaching the sandbox's own rocklet, which asks for the sandbox's secret."""
    launch_admin, stop_admin = admin_launcher
    admin = launch_admin(tmp_path, config="[engine]\nforward_rocklet_port = true\n")
    try:
        with httpx.Client(
            base_url=f"{admin.url}/apis/envs/sandbox/v1", timeout=120, trust_env=False
        ) as client:
            started = client.post(
                "/start_async", json={"image": "python:3.11", "memory": "512m", "cpus": 0.5}
            ).json()
            sandbox_id = started["result"]["sandbox_id"]
            status = client.get(
                "/get_status", params={"sandbox_id": sandbox_id, "wait": 60}
            ).json()["result"]
            assert status["is_alive"], status
            assert {"22555", "8080"} <= set(status["port_mapping"]), status["port_mapping"]
            rocklet = int(status["port_mapping"]["22555"])
            assert (
                httpx.get(
                    f"http://127.0.0.1:{rocklet}/is_alive", timeout=10, trust_env=False
                ).json()["is_alive"]
                is True
            )
            refused = httpx.post(
                f"http://127.0.0.1:{rocklet}/execute",
                json={"command": "id"},
                timeout=10,
                trust_env=False,
            )
            assert refused.status_code == 401
            client.post("/stop", json={"sandbox_id": sandbox_id})
    finally:
        stop_admin(admin, docker_client)
