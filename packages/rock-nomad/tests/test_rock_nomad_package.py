"""The placeholder distribution imports on its own and registers nothing."""

from importlib.metadata import distribution

import rock_nomad


def test_version_matches_distribution():
    assert rock_nomad.__version__ == distribution("rock-nomad").version


def test_no_rock_entry_point_until_code_lands():
    eps = [ep for ep in distribution("rock-nomad").entry_points if ep.group == "rock"]
    assert eps == []
