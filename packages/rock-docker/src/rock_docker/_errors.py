"""Docker's exceptions, translated once into rock's errors (``raise translate(...) from exc``)."""

from __future__ import annotations

from typing import Any

import docker.errors
import requests.exceptions

from rock_core.errors import (
    InvalidParameter,
    RockError,
    RuntimeFailure,
    SandboxAlreadyExists,
    SandboxNotFound,
)

__all__ = ["DOCKER_ERRORS", "explain", "translate"]

#: What a call of the docker SDK raises when Docker refuses or cannot be reached.
DOCKER_ERRORS = (docker.errors.DockerException, requests.exceptions.RequestException)


def explain(exc: BaseException) -> str:
    """Docker's own words for ``exc``: the daemon's message when there is one, else the exception's."""
    if isinstance(exc, docker.errors.APIError) and exc.explanation:
        text = exc.explanation
        return text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text)
    return str(exc) or type(exc).__name__


def translate(exc: BaseException, *, sandbox_id: str | None, attempted: str) -> RockError:
    """The rock error for a docker SDK (or transport) exception raised while doing ``attempted``.

    A missing container is :class:`SandboxNotFound`; on ``create`` (and ``restore``), a name in use is
    :class:`SandboxAlreadyExists` and a request Docker rejects as invalid is
    :class:`InvalidParameter`; an engine that cannot be reached, and anything else, is
    :class:`RuntimeFailure`.
    """
    if isinstance(exc, RockError):
        return exc
    where = f" for sandbox {sandbox_id}" if sandbox_id else ""
    kw: dict[str, Any] = {"sandbox_id": sandbox_id, "attempted": attempted}
    detail = explain(exc)
    if isinstance(exc, docker.errors.NotFound) and attempted not in ("create", "restore"):
        return SandboxNotFound(
            f"Sandbox {sandbox_id}: its container does not exist (docker: {detail})", **kw
        )
    if isinstance(exc, docker.errors.APIError):
        if attempted in ("create", "restore", "assign") and exc.status_code == 409:
            return SandboxAlreadyExists(
                f"Sandbox {sandbox_id} already exists: a container with that name exists (docker: {detail})",
                **kw,
            )
        if attempted in ("create", "restore") and exc.status_code == 400:
            field = _field_named_by(detail)
            return InvalidParameter(
                f"Docker refused the sandbox's settings{where}: {detail}",
                field=field,
                value=None,
                **kw,
            )
        return RuntimeFailure(f"docker {attempted} failed{where}: {detail}", **kw)
    # A timeout, also one met by the client's first call (the API version) and so wrapped.
    if isinstance(exc, requests.exceptions.Timeout) or (
        isinstance(exc, docker.errors.DockerException) and "timed out" in detail.lower()
    ):
        return RuntimeFailure(
            f"the Docker engine did not answer in time during {attempted}{where}: {detail} (if `docker info` "
            "hangs too, dockerd is wedged: Docker 20.10 before 20.10.27 can deadlock when many containers exit "
            "at once, moby/moby#46661; restart dockerd, or upgrade it)",
            **kw,
        )
    if isinstance(exc, (requests.exceptions.ConnectionError, docker.errors.DockerException)):
        return RuntimeFailure(
            f"cannot reach the Docker engine during {attempted}{where}: {detail} "
            "(is it running? set DOCKER_HOST or the runtime's base_url to its address)",
            **kw,
        )
    return RuntimeFailure(f"docker {attempted} failed{where}: {type(exc).__name__}: {detail}", **kw)


def _field_named_by(detail: str) -> str | None:
    """The spec field a Docker refusal is about, when its words say so."""
    text = detail.lower()
    if "container name" in text:
        return "sandbox_id"
    if "cpus" in text or "nanocpus" in text:
        return "cpus"
    if "memory" in text:
        return "memory"
    return None
