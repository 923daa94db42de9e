"""`rock bench cluster` as a user runs it, small: a subprocess that starts sandboxes through an
admin on the nomad runtime, its stand-in Nomad server in a process of its own, prints the
figures (with the admin's and the stand-in's CPU seconds) and leaves no container behind."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import docker
import pytest

# The bench makes its own admin and stand-in: the remote pass of `make test` would only repeat it.
pytestmark = [
    pytest.mark.docker,
    pytest.mark.skipif(
        os.environ.get("ROCK_TEST_REMOTE", "") not in ("", "0"),
        reason="starts its own admin and stand-in Nomad; it already ran in the embedded pass",
    ),
]

ROCK = Path(sys.executable).with_name("rock")
#: The bench at its smallest: 3 sandboxes on a 2-node stand-in Nomad, the nomad runtime only.
SMALL_BENCH = [
    str(ROCK),
    "bench",
    "cluster",
    "-n",
    "3",
    "--nodes",
    "2",
    "--image",
    "rock-test/python:3.11",
    "--runtime",
    "nomad",
]


def test_the_cluster_bench_measures_the_admin_and_the_stand_in_apart() -> None:
    pytest.importorskip("rock_nomad.testing", reason="rock-nomad's testing extra is not installed")
    run = subprocess.run(
        SMALL_BENCH,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    figures = json.loads(run.stdout)["nomad"]
    assert figures["sandboxes_running"] == 3
    assert figures["all_running_s"] > 0
    # The stand-in runs in a process of its own: its CPU is told apart from the admin's.
    assert (
        figures["stand_in_cpu_s_to_all_running"] >= 0 and figures["admin_cpu_s_to_all_running"] > 0
    )
    assert "stand-in Nomad CPU (s)" in run.stderr and "admin CPU (s)" in run.stderr
    # It waited for the admin to remove its sandboxes before it went on, and says how long that took.
    assert (
        isinstance(figures["all_removed_after_stop_s"], float)
        and "all removed after stop (s)" in run.stderr
    )
    # Its stand-in ended (on SIGTERM) and removed every container it made.
    pid = re.search(r"stand-in Nomad of 2 nodes at \S+ \(process (\d+)\)", run.stderr)
    assert pid, run.stderr[-2000:]
    assert not Path(f"/proc/{pid.group(1)}").exists()
    assert _containers_of_stand_in(pid.group(1)) == []


def test_a_cluster_bench_ended_with_sigterm_stops_what_it_started() -> None:
    """``timeout`` or a cancelled job ends a bench with SIGTERM: its admin and stand-in Nomad end,
    and no container of the run is left (a SIGTERM used to end the bench alone, leaving both
    running with their sandboxes)."""
    pytest.importorskip("rock_nomad.testing", reason="rock-nomad's testing extra is not installed")
    bench = subprocess.Popen(
        SMALL_BENCH,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        said = []
        for line in bench.stderr:  # type: ignore[union-attr]
            said.append(line)
            if "nomad: starting 3 sandboxes" in line:
                break
        pid = re.search(r"stand-in Nomad of 2 nodes at \S+ \(process (\d+)\)", "".join(said))
        assert pid, "".join(said)
        children = Path(f"/proc/{bench.pid}/task/{bench.pid}/children").read_text().split()
        assert pid.group(1) in children and len(children) >= 2  # the stand-in and the admin
        bench.send_signal(signal.SIGTERM)
        rest = bench.stderr.read()  # type: ignore[union-attr]
        assert bench.wait(timeout=240) != 0, rest[-2000:]
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.wait()
    assert [child for child in children if Path(f"/proc/{child}").exists()] == [], rest[-2000:]
    assert _containers_of_stand_in(pid.group(1)) == []


def _containers_of_stand_in(pid: str) -> list[str]:
    """Names of the containers the stand-in Nomad of process ``pid`` made that are still there."""
    owner = f"{socket.gethostname()}:{pid}:"
    client = docker.from_env()
    try:
        made = client.containers.list(all=True, filters={"label": "nomad-stand-in.owner"})
    finally:
        client.close()
    return [c.name for c in made if c.labels.get("nomad-stand-in.owner", "").startswith(owner)]
