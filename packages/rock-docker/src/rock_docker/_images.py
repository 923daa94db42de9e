"""Images on the Docker engine: whether one is there, and pulling one. Both block (the runtime
calls them in worker threads); every failure is :class:`~rock_core.errors.ImagePullFailed`
naming the image, with Docker's reason. And :class:`UnitImages`, the runtime's
``unit_image_labels``: the labels of the image a container was made from, by its id."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import docker
import docker.errors
from docker.utils import parse_repository_tag

from rock_core.errors import ImagePullFailed
from rock_core.runtime import UnitHandle
from rock_docker._errors import DOCKER_ERRORS, explain

__all__ = ["UnitImages", "image_present", "pull_image"]


class UnitImages:
    """A mixin of :class:`~rock_docker.runtime.DockerRuntime`: ``unit_image_labels``."""

    _run: Callable[..., Any]
    _docker: Callable[[], docker.DockerClient]

    async def unit_image_labels(self, handle: UnitHandle) -> Mapping[str, str] | None:
        """The labels of the image the container was made from: the image id the container
        holds, inspected (two calls; ``None``: the container is gone)."""

        def labels() -> dict[str, str] | None:
            api = self._docker().api
            try:
                image = api.inspect_image(api.inspect_container(handle.unit_id)["Image"])
            except docker.errors.NotFound:
                return None
            return dict((image.get("Config") or {}).get("Labels") or {})

        result: dict[str, str] | None = await self._run(
            labels, attempted="create", sandbox_id=handle.sandbox_id
        )
        return result


def image_present(api: docker.APIClient, image: str, sandbox_id: str | None) -> bool:
    """Whether the engine has ``image``; a name Docker cannot parse fails like a pull would."""
    try:
        api.inspect_image(image)
    except docker.errors.NotFound:
        return False
    except docker.errors.APIError as exc:
        if exc.status_code != 400:
            raise
        reason = explain(exc).removeprefix(f"no such image: {image}: ")
        raise ImagePullFailed(
            f"Failed to pull image {image}: {reason}",
            sandbox_id=sandbox_id,
            attempted="image_pull",
        ) from exc
    return True


def pull_image(
    api: docker.APIClient, image: str, auth: dict[str, str] | None, sandbox_id: str | None
) -> None:
    """Pull ``image`` (its tag, ``latest`` when it names none)."""
    repository, tag = parse_repository_tag(image)
    try:
        # Without a tag the engine would pull every tag of the repository.
        for chunk in api.pull(
            repository, tag=tag or "latest", stream=True, decode=True, auth_config=auth
        ):
            if isinstance(chunk, dict) and chunk.get("error"):
                detail = (chunk.get("errorDetail") or {}).get("message") or chunk["error"]
                raise ImagePullFailed(
                    f"Failed to pull image {image}: {detail}",
                    sandbox_id=sandbox_id,
                    attempted="image_pull",
                )
    except DOCKER_ERRORS as exc:
        raise ImagePullFailed(
            f"Failed to pull image {image}: {explain(exc)}",
            sandbox_id=sandbox_id,
            attempted="image_pull",
        ) from exc
