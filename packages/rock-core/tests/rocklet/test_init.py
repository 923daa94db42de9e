"""As a container's PID 1 the rocklet also reaps orphans, so finished jobs leave no zombies."""

from __future__ import annotations

import shutil
import time

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
