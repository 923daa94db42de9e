"""As a container's PID 1 the rocklet also reaps orphans, so finished jobs leave no zombies."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import httpx
import pytest


def zombies(rocklet) -> list[str]:
    script = "for f in /proc/[0-9]*/stat; do read -r line < $f 2>/dev/null && echo \"$line\"; done"
    out = rocklet.ok("/execute", command=script, shell=True)["stdout"]
    return [line for line in out.splitlines() if line.rsplit(")", 1)[-1].split()[0:1] == ["Z"]]


def test_pid_1_reaps_orphans_and_stops_cleanly(launch, pyz, plain_python):
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.fail("util-linux unshare is needed to run the rocklet as PID 1 of a new PID namespace")
    rocklet = launch([unshare, "--fork", "--pid", "--mount-proc", plain_python, "-I", str(pyz)])
    assert rocklet.ok("/execute", command="echo $$ $PPID", shell=True)["stdout"].split()[1] != "1"
    # Orphan a job: its parent shell exits at once, the job is re-parented to PID 1.
    rocklet.ok("/execute", command="sleep 0.2 & echo started", shell=True)
    rocklet.ok("/create_session", session="s")
    rocklet.ok("/run_in_session", session="s", command="nohup sleep 0.2 >/dev/null 2>&1 & disown")
    rocklet.ok("/close_session", session="s")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        alive = rocklet.ok("/execute", command="pgrep -x sleep || true", shell=True)["stdout"].split()
        if not alive:
            break
        time.sleep(0.05)
    assert zombies(rocklet) == []
    # SIGTERM to PID 1 reaches the rocklet, which shuts down with status 0.
    try:
        rocklet.post("/execute", command=["kill", "-TERM", "1"])
    except httpx.TransportError:
        pass  # the rocklet may stop before it answers the request that stopped it
    assert rocklet.proc.wait(timeout=30) == 0


def test_shutdown_ends_the_whole_sandbox_after_answering(launch, pyz, plain_python):
    """``POST /shutdown`` answers, then PID 1 and every process of the namespace are gone."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.fail("util-linux unshare is needed to run the rocklet as PID 1 of a new PID namespace")
    rocklet = launch([unshare, "--fork", "--pid", "--mount-proc", plain_python, "-I", str(pyz)])
    marker = f"rock-shutdown-{time.monotonic_ns()}"
    rocklet.ok("/execute", command=f"nohup sleep 300 {marker} >/dev/null 2>&1 & echo ok", shell=True)
    rocklet.ok("/create_session", session="s")
    response = rocklet.post("/shutdown")
    assert response.status_code == 200 and response.json() == {}
    assert rocklet.proc.wait(timeout=30) == 0
    # The kernel killed the namespace's other processes with its PID 1.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        survivors = [p for p in Path("/proc").glob("[0-9]*/cmdline") if marker.encode() in _read(p)]
        if not survivors:
            break
        time.sleep(0.05)
    assert survivors == []


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""
