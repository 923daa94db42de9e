"""The Docker engine and the offline test image work, through the docker SDK."""

from __future__ import annotations

import pytest

TEST_IMAGE = "python:3.11"  # ROCK's default sandbox image, built offline by `make test`

pytestmark = pytest.mark.docker


def test_python_image_runs_a_command(docker_client):
    out = docker_client.containers.run(
        TEST_IMAGE,
        ["python3", "-c", "import sys, platform; print(sys.version_info[:2], platform.system())"],
        remove=True,
        network_mode="none",
    )
    assert out.decode().strip() == "(3, 11) Linux"


def test_image_has_what_sandboxes_need(docker_client):
    # The rocklet needs python3; ROCK's scripts and the rollout benchmark use bash, ps and `python`.
    script = "command -v python3 && command -v python && command -v bash && command -v ps && python3 -m pip --version"
    out = docker_client.containers.run(
        TEST_IMAGE, ["sh", "-c", script], remove=True, network_mode="none"
    )
    lines = out.decode().split("\n")
    assert lines[0] == "/usr/bin/python3" or lines[0].endswith("/python3")
    assert "pip" in out.decode()
