"""`rock bench e2b` as a user runs it: E2B's SDK (its own virtual environment) and rock's SDK
against one admin of the bench's own, figures printed as JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[1]
ROCK = Path(sys.executable).with_name("rock")


def test_e2b_bench_prints_both_sdks_figures_and_their_ratios(docker_client):
    subprocess.run([str(ROOT / "scripts" / "ensure-e2b-sdk.sh")], check=True, timeout=600)
    e2b_python = ROOT / ".rock-state" / "e2b-sdk-venv" / "bin" / "python"
    done = subprocess.run(
        [str(ROCK), "bench", "e2b", "--rounds", "3", "--parallel", "3"]
        + ["--e2b-python", str(e2b_python)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.stdout, done.stderr
    figures = json.loads(done.stdout)["figures"]
    for sdk in ("rock", "e2b"):
        assert (
            0 < figures[sdk]["first_command_ms"]["p50"] <= figures[sdk]["first_command_ms"]["p95"]
        )
        assert figures[sdk]["parallel_wall_ms"] > 0
    assert figures["first_command_p50_ratio"] > 0 and figures["parallel_wall_ratio"] > 0
    # The exit code says whether the goal was met (a figure, not this test's bound).
    assert done.returncode == (0 if figures["goal_met"] else 1), done.stderr
    assert figures["goal_ratio"] == 1.2
