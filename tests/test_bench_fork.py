"""`rock bench fork` as a user runs it: a subprocess that prints its figures as JSON and leaves
no sandbox and no snapshot behind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.docker

ROCK = Path(sys.executable).with_name("rock")


def test_fork_bench_prints_snapshot_fork_and_cold_start_figures(docker_client):
    before = {image.id for image in docker_client.images.list(name="rock-snapshot")}
    done = subprocess.run(
        [str(ROCK), "bench", "fork", "--count", "2", "--write-mib", "4", "--memory", "256m"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    figures = json.loads(done.stdout)["figures"]
    assert figures["snapshot_bytes"] >= 4 << 20
    assert 0 < figures["parent_frozen_s"] <= figures["snapshot_s"]
    assert figures["cold_starts_all_running_s"] > 0 and figures["fork_all_running_s"] > 0
    assert figures["start_from_snapshot_pool_p50_ms"] > 0
    assert figures["disk_copies_bytes"] == 2 * figures["disk_snapshot_layer_bytes"]
    assert figures["disk_forks_writable_bytes"] is None or (
        figures["disk_forks_writable_bytes"] < figures["disk_snapshot_layer_bytes"]
    )
    # The exit code says whether the goal was met (a figure, not this test's bound).
    assert done.returncode == (0 if figures["goal_met"] else 1), done.stderr
    assert {image.id for image in docker_client.images.list(name="rock-snapshot")} <= before
