"""What Docker says about a sandbox's container: its status (with the fix for an image that
cannot run the rocklet), and the handles of the containers ``docker ps`` lists. Both block (the
runtime calls them in worker threads)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import docker
import docker.errors

from rock_core.models import RuntimeStatus, UnitState
from rock_core.runtime import UnitHandle
from rock_docker._container import (
    INIT_EXEC_FAILED,
    NO_PYTHON_EXIT_CODE,
    NO_PYTHON_LOG_LINE,
    explain_start_failure,
    no_python_error,
    status_from_inspect,
)

__all__ = ["handle_of", "image_of", "inspect_unit"]

# `docker ps`'s State column, as a unit state (the rest, e.g. "removing", read as exited).
_STATES = {
    "created": UnitState.CREATED,
    "running": UnitState.RUNNING,
    "paused": UnitState.RUNNING,
    "restarting": UnitState.RUNNING,
    "exited": UnitState.EXITED,
    "dead": UnitState.EXITED,
    "removing": UnitState.EXITED,
}


def inspect_unit(api: docker.APIClient, unit_id: str, *, publish_host: str) -> RuntimeStatus:
    """The container's state, exit code, OOM kill, times and published ports (``missing`` if
    gone); a container that could not start its rocklet says why and what to do."""
    try:
        doc = api.inspect_container(unit_id)
    except docker.errors.NotFound:
        return RuntimeStatus(
            state=UnitState.MISSING, error=f"container {unit_id[:12]} does not exist"
        )
    status = status_from_inspect(doc, publish_host=publish_host)
    image = (doc.get("Config") or {}).get("Image") or "?"
    if status.error:
        better = explain_start_failure(image, status.error)
        if better is not None:
            status = attrs.evolve(status, error=better)
    if status.state is UnitState.EXITED and status.exit_code == NO_PYTHON_EXIT_CODE:
        # 127: the launch command found no python3, or (under Docker's init, which
        # execs the command itself) there was no /bin/sh to run it with.
        tail = api.logs(unit_id, stdout=True, stderr=True, tail=20).decode("utf-8", "replace")
        if NO_PYTHON_LOG_LINE in tail:
            status = attrs.evolve(status, error=no_python_error(image))
        else:
            lines = [line for line in tail.splitlines() if INIT_EXEC_FAILED in line]
            better = explain_start_failure(image, lines[-1]) if lines else None
            if better is not None:
                status = attrs.evolve(status, error=better)
    return status


def handle_of(runtime: str, row: Mapping[str, Any]) -> UnitHandle:
    """The handle of a container as ``docker ps`` lists it, with its labels."""
    names = row.get("Names") or []
    # The container is named after its sandbox (Docker lists names with a leading slash).
    sandbox_id = names[0].lstrip("/") if names else row["Id"]
    state = _STATES.get(str(row.get("State") or "").lower())
    return UnitHandle(
        runtime=runtime,
        unit_id=row["Id"],
        sandbox_id=sandbox_id,
        labels=dict(row.get("Labels") or {}),
        state=state,
    )


def image_of(api: docker.APIClient, unit_id: str) -> str:
    """The image a container was made from (``?`` when Docker cannot say)."""
    try:
        return str(api.inspect_container(unit_id)["Config"]["Image"])
    except (docker.errors.DockerException, KeyError, TypeError):
        return "?"
