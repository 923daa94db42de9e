"""The rocklet's delivery, as any runtime uses it: one checksummed file per content, and the
launch command a unit runs, here run as a plain process on 127.0.0.1 (no container)."""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
from pathlib import Path

import httpx

from rock_core.rocklet.server import TOKEN_ENV, TOKEN_HEADER
from rock_core.rocklet_delivery import ROCKLET_PYZ, launch_command, prepare_rocklet
from rock_core.testing import eventually


def test_one_file_per_content_with_its_checksum(tmp_path: Path) -> None:
    first = prepare_rocklet(tmp_path, url="http://admin.example:8080/rocklet.pyz")
    again = prepare_rocklet(tmp_path)
    assert first.path == again.path and first.path.name == ROCKLET_PYZ
    assert sorted(p.name for p in first.path.parent.iterdir()) == [
        ROCKLET_PYZ
    ]  # a mount shows nothing else
    assert hashlib.sha256(first.read()).hexdigest() == first.sha256
    assert first.checksum == f"sha256:{first.sha256}"
    assert first.url == "http://admin.example:8080/rocklet.pyz" and again.url is None
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".staging-")]


def test_the_launch_command_starts_a_rocklet_that_asks_for_its_secret(tmp_path: Path) -> None:
    delivery = prepare_rocklet(tmp_path)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = launch_command(str(delivery.path), host="127.0.0.1", port=port)
    env = {**os.environ, TOKEN_ENV: "s3cret", "HOME": str(tmp_path)}
    process = subprocess.Popen(
        command, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        url = f"http://127.0.0.1:{port}"

        def alive() -> httpx.Response | None:
            try:
                return httpx.get(f"{url}/is_alive", timeout=1)
            except httpx.TransportError:
                assert process.poll() is None, process.stderr.read() if process.stderr else ""
                return None

        # readiness needs no secret
        ready = eventually(
            alive, until=lambda r: r is not None, what="the rocklet listening", timeout=30
        )
        assert ready is not None and ready.status_code == 200
        body = {"command": ["echo", "hi"], "shell": False}
        assert httpx.post(f"{url}/execute", json=body, timeout=10).status_code == 401
        assert (
            httpx.post(
                f"{url}/execute", json=body, headers={TOKEN_HEADER: "wrong"}, timeout=10
            ).status_code
            == 401
        )
        ran = httpx.post(f"{url}/execute", json=body, headers={TOKEN_HEADER: "s3cret"}, timeout=10)
        assert ran.status_code == 200 and ran.json()["stdout"].strip() == "hi"
    finally:
        process.terminate()
        process.wait(10)


def test_the_launch_command_explains_an_image_without_python3(tmp_path: Path) -> None:
    command = launch_command("/nowhere/rocklet.pyz")
    done = subprocess.run(
        command, env={"PATH": str(tmp_path)}, capture_output=True, text=True, timeout=10
    )
    assert done.returncode == 127 and "has no python3" in done.stderr
