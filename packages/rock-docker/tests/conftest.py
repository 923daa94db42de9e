"""Fixtures for rock-docker's tests: the local Docker engine and a few tiny test images.

Every container a test makes carries the label ``rock.test.run=<this session>``; whatever is
left of them is removed when the session ends. The images built here are kept (tagged
``rock-test/...``), so the next session finds them in Docker's cache.
"""

from __future__ import annotations

import io
import tarfile
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

#: The image with python3 the tests run (ROCK's default), built offline by `make test`.
IMAGE = "python:3.11"
NO_PYTHON_IMAGE = "rock-test/no-python:1"
NO_SHELL_IMAGE = "rock-test/no-shell:1"
RUN_LABEL = "rock.test.run"


@pytest.fixture(scope="session")
def run_labels(docker_client):
    """Labels unique to this session; every container carrying them is removed at its end."""
    labels = {RUN_LABEL: uuid.uuid4().hex}
    yield labels
    for container in docker_client.containers.list(
        all=True, filters={"label": f"{RUN_LABEL}={labels[RUN_LABEL]}"}, ignore_removed=True
    ):
        container.remove(force=True, v=True)


@pytest.fixture(scope="session")
def no_python_image(docker_client):
    """``python:3.11`` with every python binary deleted: /bin/sh works, python3 does not exist."""
    dockerfile = (
        f"FROM {IMAGE}\n"
        "RUN rm -f /usr/bin/python3* /usr/local/bin/python3* /usr/bin/python /usr/local/bin/python\n"
    )
    docker_client.images.build(
        fileobj=io.BytesIO(dockerfile.encode()), tag=NO_PYTHON_IMAGE, rm=True, pull=False
    )
    return NO_PYTHON_IMAGE


@pytest.fixture(scope="session")
def no_shell_image(docker_client):
    """An image holding one text file and nothing else: no /bin/sh, no python3."""
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        for name, data in (
            ("Dockerfile", b"FROM scratch\nCOPY hello.txt /hello.txt\n"),
            ("hello.txt", b"hello\n"),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    context.seek(0)
    docker_client.images.build(
        fileobj=context, custom_context=True, tag=NO_SHELL_IMAGE, rm=True, pull=False
    )
    return NO_SHELL_IMAGE


@pytest.fixture
def tag_and_a_commit(docker_client: Any) -> Iterator[tuple[str, str]]:
    """A tag naming a base image (``python:3.11``), and tenant ``a``'s commit (its own tag): an
    image labelled ``rock.commit.tenant=a``, as ``Sandbox.commit`` leaves one, holding /a-secret.
    Both are removed after the test."""
    run = uuid.uuid4().hex[:12]
    tag, commit = f"rock-test/retagged:{run}", f"rock-test/a-commit:{run}"
    docker_client.images.get(IMAGE).tag(tag)
    dockerfile = f"FROM {IMAGE}\nLABEL rock.commit.tenant=a\nRUN echo a-secret > /a-secret\n"
    docker_client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=commit, rm=True)
    yield tag, commit
    for name in (tag, commit):
        try:
            docker_client.images.remove(name, force=True)
        except Exception:  # noqa: BLE001 - gone already
            pass
