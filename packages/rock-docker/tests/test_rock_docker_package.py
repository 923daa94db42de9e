"""The placeholder distribution imports on its own and registers nothing."""

from importlib.metadata import distribution

import rock_docker


def test_version_matches_distribution():
    assert rock_docker.__version__ == distribution("rock-docker").version


def test_no_rock_entry_point_until_code_lands():
    eps = [ep for ep in distribution("rock-docker").entry_points if ep.group == "rock"]
    assert eps == []
