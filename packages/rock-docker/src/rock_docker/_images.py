"""Images on the Docker engine: whether one is there, and pulling one. Both block (the runtime
calls them in worker threads); every failure is :class:`~rock_core.errors.ImagePullFailed`
naming the image, with Docker's reason."""

from __future__ import annotations

import docker
import docker.errors
from docker.utils import parse_repository_tag

from rock_core.errors import ImagePullFailed
from rock_docker._errors import DOCKER_ERRORS, explain

__all__ = ["image_present", "pull_image"]


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
