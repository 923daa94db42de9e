"""`rock bench pause` as a user runs it: a subprocess that prints its figures as JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.docker

ROCK = Path(sys.executable).with_name("rock")


def test_pause_bench_prints_pause_and_resume_figures_and_keeps_the_process(docker_client):
    done = subprocess.run(
        [str(ROCK), "bench", "pause", "--rounds", "5", "--memory", "256m", "--cpus", "0.5"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    document = json.loads(done.stdout)
    figures = document["figures"]
    assert figures["process_kept"] is True
    for key in ("pause_ms", "resume_ms", "first_command_after_resume_ms"):
        assert 0 < figures[key]["p50"] <= figures[key]["p95"], key
    # The exit code says whether the goal was met (a figure, not this test's bound).
    assert done.returncode == (0 if figures["goal_met"] else 1), done.stderr
    assert figures["goal_resume_p50_ms"] == 50.0
