"""The one private name of docker-py the stand-in Nomad uses, in one place.

``docker.models.containers._create_container_args`` turns the keyword arguments of the public
``containers.create`` into those of the low-level ``APIClient.create_container``. The stand-in
calls the low-level method to skip the inspect ``containers.create`` makes of every new container
(one Docker call less per task). No public function does this translation; if a docker-py release
drops or changes it, :func:`create_container_args` fails naming the version, and
``tests/test_docker_private.py`` says so before anything else does.
"""

from __future__ import annotations

from typing import Any

import docker

__all__ = ["create_container_args"]


def create_container_args(
    client: docker.DockerClient, image: str, kwargs: dict[str, Any]
) -> dict[str, Any]:
    """The arguments of ``client.api.create_container`` for ``containers.create(image, **kwargs)``.

    :raises RuntimeError: this docker-py has no ``_create_container_args`` (naming its version).
    """
    try:
        from docker.models.containers import _create_container_args
    except ImportError as exc:
        raise RuntimeError(
            f"docker-py {docker.__version__} has no docker.models.containers._create_container_args, "
            f"which rock_nomad.testing._docker_private relies on: pin docker to a release that has it "
            f"or replace the adapter"
        ) from exc
    args: dict[str, Any] = _create_container_args(
        {**kwargs, "image": image, "version": client.api.api_version}
    )
    return args
