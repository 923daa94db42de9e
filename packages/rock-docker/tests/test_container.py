"""The container's launch command and the status read from Docker's inspect document, without Docker."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime

from rock_core.models import UnitState
from rock_core.rocklet_delivery import BOOT
from rock_docker._container import NO_PYTHON_LOG_LINE, launch_command, status_from_inspect


def test_launch_command_explains_a_missing_python3(tmp_path):
    """Where no python3 is on PATH, the command says so on stderr and exits 127."""
    argv = launch_command(host="0.0.0.0", port=22555)
    result = subprocess.run(argv, env={"PATH": str(tmp_path)}, capture_output=True, text=True)
    assert result.returncode == 127
    assert result.stderr.strip() == NO_PYTHON_LOG_LINE


def test_launch_command_execs_python3_with_the_rocklet(tmp_path):
    """With python3 present, the shell is replaced by ``python3 -I -S -c BOOT /rock/rocklet.pyz
    --host H --port P --sandbox`` (the archive put on the path by ``-c``, without runpy's start;
    the rocklet is the sandbox's agent: it may end the sandbox's other processes)."""
    fake = tmp_path / "python3"
    fake.write_text('#!/bin/sh\necho "$$ $*"\n')
    fake.chmod(0o755)
    argv = launch_command(host="127.0.0.1", port=4242)
    result = subprocess.run(argv, env={"PATH": str(tmp_path)}, capture_output=True, text=True)
    assert result.returncode == 0
    assert (
        result.stdout.split(" ", 1)[1].strip()
        == f"-I -S -c {BOOT} /rock/rocklet.pyz --host 127.0.0.1 --port 4242 --sandbox"
    )


def _doc(status, **state):
    return {
        "State": {
            "Status": status,
            "ExitCode": 0,
            "OOMKilled": False,
            "Error": "",
            "StartedAt": "0001-01-01T00:00:00Z",
            "FinishedAt": "0001-01-01T00:00:00Z",
            **state,
        },
        "Config": {"Image": "python:3.11", "Labels": {}},
        "NetworkSettings": {"Ports": {}},
    }


def test_status_of_a_running_container():
    doc = _doc("running", StartedAt="2025-03-04T05:06:07.123456789Z")
    doc["NetworkSettings"]["Ports"] = {
        "22555/tcp": [{"HostIp": "127.0.0.1", "HostPort": "32768"}],
        "8080/tcp": [{"HostIp": "127.0.0.1", "HostPort": "32769"}],
        "22/udp": [{"HostIp": "127.0.0.1", "HostPort": "40000"}],
    }
    status = status_from_inspect(doc, publish_host="127.0.0.1")
    assert status.state is UnitState.RUNNING
    assert status.exit_code is None
    assert status.port_mapping == {22555: 32768, 8080: 32769}
    assert status.rocklet_address == ("127.0.0.1", 32768)
    assert status.started_at == datetime(2025, 3, 4, 5, 6, 7, 123456, tzinfo=UTC)
    assert status.finished_at is None


def test_status_of_an_exited_container():
    doc = _doc("exited", ExitCode=137, OOMKilled=True, FinishedAt="2025-03-04T05:06:08Z")
    status = status_from_inspect(doc, publish_host="127.0.0.1")
    assert (status.state, status.exit_code, status.oom_killed) == (UnitState.EXITED, 137, True)
    assert status.rocklet_address is None and status.port_mapping == {}
    assert status.finished_at == datetime(2025, 3, 4, 5, 6, 8, tzinfo=UTC)


def test_status_of_a_created_container_has_no_exit_code():
    status = status_from_inspect(_doc("created"), publish_host="127.0.0.1")
    assert (status.state, status.exit_code, status.rocklet_address) == (
        UnitState.CREATED,
        None,
        None,
    )
