"""`rock bench claim` as a user runs it: a subprocess that prints its figures as JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.docker

ROCK = Path(sys.executable).with_name("rock")


def test_claim_bench_prints_claim_and_cold_start_figures_embedded_and_through_an_admin(
    docker_client,
):
    done = subprocess.run(
        [str(ROCK), "bench", "claim", "--rounds", "2", "--pool-size", "2", "--memory", "256m"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    document = json.loads(done.stdout)
    for mode, goal in (("embedded", 20.0), ("remote", 30.0)):
        figures = document[mode]
        for key in ("cold_ms", "pool_full_ms", "refilling_ms"):
            assert figures[key]["n"] == 2, (mode, key)
            assert 0 < figures[key]["p50"] <= figures[key]["p95"], (mode, key)
        # Every claim of the two phases was served by the pool, not by a cold start.
        assert figures["pool_full_ms"]["served_by_pool"] == 2, mode
        assert figures["refilling_ms"]["served_by_pool"] == 2, mode
        assert figures["pool_fill_seconds"] > 0, mode
        assert figures["goal_p50_ms"] == goal
    # The exit code says whether the goals were met (a figure, not this test's bound).
    assert done.returncode == (0 if document["goal_met"] else 1), done.stderr
