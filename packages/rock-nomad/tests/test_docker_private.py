"""The private name of docker-py the stand-in relies on (:mod:`rock_nomad.testing._docker_private`)
is there and does what the stand-in expects; on a docker-py without it, this fails naming the version."""

from __future__ import annotations

import docker
import pytest

from rock_nomad.testing._docker_private import create_container_args


def test_docker_py_still_has_create_container_args() -> None:
    import docker.models.containers as containers

    assert hasattr(containers, "_create_container_args"), (
        f"docker-py {docker.__version__} lacks docker.models.containers._create_container_args: "
        "rock_nomad.testing._docker_private needs replacing"
    )


def test_create_container_args_translates_the_high_level_arguments() -> None:
    client = docker.DockerClient(
        base_url="unix:///nonexistent.sock", version="1.41"
    )  # no call is made
    args = create_container_args(
        client,
        "python:3.11",
        {"command": ["sleep", "1"], "labels": {"a": "b"}, "mem_limit": "64m", "detach": True},
    )
    assert (args["image"], args["command"], args["labels"]) == (
        "python:3.11",
        ["sleep", "1"],
        {"a": "b"},
    )
    assert args["host_config"]["Memory"] == 64 * 1024 * 1024, (
        f"docker-py {docker.__version__}: {args}"
    )


def test_a_docker_py_without_it_fails_naming_its_version(monkeypatch: pytest.MonkeyPatch) -> None:
    import docker.models.containers as containers

    monkeypatch.delattr(containers, "_create_container_args")
    client = docker.DockerClient(base_url="unix:///nonexistent.sock", version="1.41")
    with pytest.raises(
        RuntimeError, match=rf"docker-py {docker.__version__} has no .*_create_container_args"
    ):
        create_container_args(client, "python:3.11", {})
