"""`rock bench egress` as a user runs it: a subprocess that prints its figures as JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.docker

ROCK = Path(sys.executable).with_name("rock")


def test_egress_bench_prints_start_connect_and_scale_figures_and_leaves_no_rule(docker_client):
    done = subprocess.run(
        [str(ROCK), "bench", "egress", "--rounds", "3", "--connects", "20", "--scale", "10"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    document = json.loads(done.stdout)
    figures = document["figures"]
    for key in (
        "start_without_policy_ms",
        "start_with_policy_ms",
        "connect_without_policy_us",
        "connect_with_policy_us",
    ):
        assert 0 < figures[key]["p50"] <= figures[key]["p95"], key
    assert figures["scale_sandboxes"] == 10 and figures["scale_starts_per_second"] > 0
    assert figures["scale_rule_lines"] >= 10 * 10  # two chains and their jumps per sandbox
    assert figures["scale_rule_lines_left_after_stop"] == 0
    assert figures["goal_start_p50_ratio"] == 1.1
    # The exit code says whether the goal was met (a figure, not this test's bound).
    assert done.returncode == (0 if figures["goal_met"] else 1), done.stderr
