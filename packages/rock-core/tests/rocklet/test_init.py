"""As a container's PID 1 the rocklet also reaps orphans, so finished jobs leave no zombies."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from pathlib import Path

import httpx
import pytest

from rock_core.testing import eventually


def zombies(rocklet) -> list[str]:
    script = 'for f in /proc/[0-9]*/stat; do read -r line < $f 2>/dev/null && echo "$line"; done'
    out = rocklet.ok("/execute", command=script, shell=True)["stdout"]
    return [line for line in out.splitlines() if line.rsplit(")", 1)[-1].split()[0:1] == ["Z"]]


def test_pid_1_reaps_orphans_and_stops_cleanly(launch, pyz, plain_python):
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.fail(
            "util-linux unshare is needed to run the rocklet as PID 1 of a new PID namespace"
        )
    rocklet = launch([unshare, "--fork", "--pid", "--mount-proc", plain_python, "-I", str(pyz)])
    assert rocklet.ok("/execute", command="echo $$ $PPID", shell=True)["stdout"].split()[1] != "1"
    # Orphan a job: its parent shell exits at once, the job is re-parented to PID 1.
    rocklet.ok("/execute", command="sleep 0.2 & echo started", shell=True)
    rocklet.ok("/create_session", session="s")
    rocklet.ok("/run_in_session", session="s", command="nohup sleep 0.2 >/dev/null 2>&1 & disown")
    rocklet.ok("/close_session", session="s")
    eventually(
        lambda: (
            not rocklet.ok("/execute", command="pgrep -x sleep || true", shell=True)[
                "stdout"
            ].split()
        ),
        what="every orphaned sleep ended",
        timeout=30,
    )
    assert zombies(rocklet) == []
    # SIGTERM to PID 1 reaches the rocklet, which shuts down with status 0.
    try:
        rocklet.post("/execute", command=["kill", "-TERM", "1"])
    except httpx.TransportError:
        pass  # the rocklet may stop before it answers the request that stopped it
    assert rocklet.proc.wait(timeout=30) == 0


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def test_end_processes_kills_every_other_process_and_the_rocklet_stays(launch, pyz, plain_python):
    """``POST /end_processes`` of a sandbox's agent (``--sandbox``): background jobs, a session's
    shell and an orphan re-parented to PID 1 are all killed; the rocklet and PID 1 remain and
    still answer (the container exits only when it is removed)."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.fail("util-linux unshare is needed to run the rocklet in a new PID namespace")
    rocklet = launch(
        [unshare, "--fork", "--pid", "--mount-proc", plain_python, "-I", str(pyz), "--sandbox"]
    )
    marker = f"rock-end-{time.monotonic_ns()}"
    rocklet.ok("/create_session", session="s")
    # A job of the session, and an orphan in a session of its own (re-parented to PID 1).
    rocklet.ok(
        "/run_in_session",
        session="s",
        command=f"sh -c 'sleep 300; : {marker}' & (setsid sh -c 'sleep 300; : {marker}' >/dev/null 2>&1 &)",
    )
    # Both shells run and each has exec'd its sleep (until then a shell's child, between its
    # fork and its exec, still carries the shell's command line).
    sleeps = eventually(
        lambda: s if len(s := _sleeps_of(marker)) >= 2 else None,
        what="both sleeps running",
        timeout=10,
    )
    assert len(sleeps) == 2
    answer = rocklet.post("/end_processes")
    assert (
        answer.status_code == 200 and answer.json()["killed"] >= 5
    )  # two shells, their sleeps, the session's bash
    assert _with_marker(marker) == []
    assert not [pid for pid in sleeps if _alive(pid)]
    assert rocklet.proc.poll() is None
    assert (
        rocklet.ok("/execute", command="echo still here", shell=True)["stdout"].strip()
        == "still here"
    )


def test_a_rocklet_that_is_not_a_sandboxs_agent_ends_no_process(launch, pyz, plain_python):
    rocklet = launch([plain_python, "-I", str(pyz)])
    marker = f"rock-keep-{time.monotonic_ns()}"
    rocklet.ok("/create_session", session="s")
    rocklet.ok("/run_in_session", session="s", command=f"sh -c 'sleep 30; : {marker}' &")
    eventually(lambda: _with_marker(marker), what="the session's sleep running", timeout=10)
    try:
        answer = rocklet.post("/end_processes")
        assert answer.status_code == 409 and "--sandbox" in answer.json()["detail"]
        assert len(_with_marker(marker)) == 1
    finally:
        for path in _with_marker(marker):
            with contextlib.suppress(OSError):
                os.kill(int(path.parent.name), signal.SIGKILL)


def _with_marker(marker: str) -> list[Path]:
    """``/proc/<pid>/cmdline`` files of the live processes whose command line holds ``marker``."""
    found = []
    for path in Path("/proc").glob("[0-9]*/cmdline"):
        if marker.encode() in _read(path):
            try:
                state = (path.parent / "stat").read_bytes().rsplit(b")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state != b"Z":
                found.append(path)
    return found


def _sleeps_of(marker: str) -> list[int]:
    """Pids of the ``sleep 300`` processes whose parent's command line holds ``marker``."""
    parents = {int(path.parent.name) for path in _with_marker(marker)}
    found = []
    for path in Path("/proc").glob("[0-9]*/cmdline"):
        if _read(path) != b"sleep\x00300\x00":
            continue
        try:
            ppid = int((path.parent / "stat").read_bytes().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if ppid in parents:
            found.append(int(path.parent.name))
    return found


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie counts as ended)."""
    try:
        return (Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]) != b"Z"
    except (OSError, IndexError):
        return False
