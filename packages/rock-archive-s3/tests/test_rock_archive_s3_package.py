"""The placeholder distribution imports on its own and registers nothing."""

from importlib.metadata import distribution

import rock_archive_s3


def test_version_matches_distribution():
    assert rock_archive_s3.__version__ == distribution("rock-archive-s3").version


def test_no_rock_entry_point_until_code_lands():
    eps = [ep for ep in distribution("rock-archive-s3").entry_points if ep.group == "rock"]
    assert eps == []
