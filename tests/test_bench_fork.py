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


def test_fork_bench_prints_every_figure_of_snapshots_forks_resets_and_resumes(docker_client):
    done = subprocess.run(
        [
            str(ROCK),
            "bench",
            "fork",
            "--count",
            "2",
            "--write-mib",
            "4",
            "--memory",
            "256m",
            "--rounds",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    document = json.loads(done.stdout)
    figures = document["figures"]
    assert figures["snapshot_bytes"] >= 4 << 20
    assert 0 < figures["parent_frozen_s"] <= figures["snapshot_s"]
    assert figures["cold_starts_all_running_s"] > 0 and figures["fork_all_running_s"] > 0
    assert figures["fork_call_s"] > 0 and figures["fork_starts_after_call_s"] > 0
    assert figures["fork_call_s"] + figures["fork_starts_after_call_s"] == pytest.approx(
        figures["fork_all_running_s"], abs=0.002
    )
    # The first fork's parent is unchanged since its snapshot: the fork starts from it.
    assert figures["fork_reused_snapshot"] is True and document["package_installed"] is True
    assert figures["fork_after_change_call_s"] > 0
    assert figures["fork_after_change_snapshot_frozen_s"] > 0
    assert figures["fork_after_change_call_s"] + figures[
        "fork_after_change_starts_after_call_s"
    ] == pytest.approx(figures["fork_after_change_all_running_s"], abs=0.002)
    assert figures["start_from_snapshot_pool_p50_ms"] > 0
    assert figures["reset_p50_ms"] > 0 and figures["cold_start_p50_ms"] > 0
    assert figures["reset_over_cold"] == pytest.approx(
        figures["reset_p50_ms"] / figures["cold_start_p50_ms"], abs=0.001
    )
    assert figures["resume_p50_ms"] > 0
    assert figures["disk_copies_bytes"] == 2 * figures["disk_snapshot_layer_bytes"]
    assert figures["disk_forks_writable_bytes"] is None or (
        figures["disk_forks_writable_bytes"] < figures["disk_snapshot_layer_bytes"]
    )
    # The exit code says whether the goal was met (a figure, not this test's bound).
    met = figures["goal_met"] and figures["goal_met_after_change"]
    assert done.returncode == (0 if met else 1), done.stderr
    # Its two snapshots (the one timed and forked from, the fork's after the change) are deleted
    # (other tests may make their own).
    assert len(document["snapshots"]) == 2
    for name in document["snapshots"]:
        assert not docker_client.images.list(filters={"label": f"rock.snapshot.name={name}"})
