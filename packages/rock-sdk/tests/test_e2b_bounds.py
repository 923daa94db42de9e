"""What one E2B caller may make the admin do for it, bounded (E2B's unmodified SDK against a real
admin with API keys and real Docker sandboxes): directory watchers, each a listing every 0.25 s,
are at most :data:`rock_e2b.watching.MAX_WATCHERS` per sandbox; a stopped one makes room."""

from __future__ import annotations

import json
import socket
import struct
import urllib.parse
from pathlib import Path
from typing import Any

import httpx

from rock_core.testing import eventually

from .test_e2b_sdk import KEY_A, e2b, e2b_python, keyed_admin  # noqa: F401 - fixtures


def test_a_sandbox_has_a_bounded_number_of_directory_watchers(
    e2b_python: str, keyed_admin: Any
) -> None:
    from rock_e2b.watching import MAX_WATCHERS

    out = e2b(e2b_python, keyed_admin, KEY_A, script="drive_watch_bounds.py")
    assert out["made"] == MAX_WATCHERS
    assert f"at most {MAX_WATCHERS} directory watchers" in out["refused"], out["refused"]
    assert out["after_stop"] == "made"


def _rss(pid: int) -> int:
    """Resident memory of process ``pid``, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_a_command_stream_its_caller_does_not_read_does_not_grow_in_the_admin(
    keyed_admin: Any,
) -> None:
    # A caller starts a command that writes 400 MB and never reads the stream: the admin keeps
    # the command's last output (KEPT_OUTPUT), not all it wrote.
    url = urllib.parse.urlsplit(keyed_admin.url)
    api = httpx.Client(base_url=keyed_admin.url, headers={"X-API-Key": KEY_A}, timeout=120)
    made = api.post("/e2b/sandboxes", json={"templateID": "python:3.11", "timeout": 300})
    assert made.status_code == 201, made.text
    sandbox_id, token = made.json()["sandboxID"], made.json()["envdAccessToken"]
    plane = {"E2b-Sandbox-Id": sandbox_id, "X-Access-Token": token}
    try:
        before = _rss(keyed_admin.process.pid)
        script = "yes 0123456789abcdef | head -c 400000000; touch /tmp/done"
        message = json.dumps({"process": {"cmd": "/bin/sh", "args": ["-c", script]}}).encode()
        body = b"\0" + struct.pack(">I", len(message)) + message
        head = (
            "POST /e2b/envd/process.Process/Start HTTP/1.1\r\n"
            f"Host: {url.hostname}:{url.port}\r\n"
            "Content-Type: application/connect+json\r\n"
            f"E2b-Sandbox-Id: {sandbox_id}\r\nX-Access-Token: {token}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        with socket.create_connection((url.hostname, url.port)) as unread:
            unread.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            unread.sendall(head.encode() + body)

            def done() -> bool:
                answer = api.get("/e2b/envd/files", params={"path": "/tmp/done"}, headers=plane)
                return answer.status_code == 200

            eventually(done, what="the command wrote its output", timeout=300, interval=1.0)
            grown = _rss(keyed_admin.process.pid) - before
        assert grown < 150 * 1024 * 1024, f"the admin grew by {grown >> 20} MiB"
    finally:
        api.delete(f"/e2b/sandboxes/{sandbox_id}")
        api.close()
