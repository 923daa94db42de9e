"""Reading sandbox jobs back from Nomad: a listed job's unit state, the ports of running
allocations, and a task's output."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from rock_core.errors import RockError
from rock_core.models import UnitState
from rock_nomad._api import NomadApi, NomadError

__all__ = ["listed_state", "running_ports", "task_logs"]

log = logging.getLogger("rock.nomad")


async def running_ports(api: NomadApi, job_prefix: str) -> dict[str, list[dict[str, Any]]]:
    """Every running sandbox allocation's ports (``AllocatedResources.Shared.Ports``, which
    never change), by allocation id, in one call (``GET /v1/allocations?resources=true``): an
    admin taking back thousands of sandboxes then asks Nomad once for each, not twice. A
    failure gives none (each is then read on its own)."""
    try:
        allocs = await api.get_json(
            "allocations", params={"resources": True, "task_states": False}, attempted="list"
        )
    except RockError as exc:
        log.info("could not read the allocations' ports at once: %s", exc)
        return {}
    found: dict[str, list[dict[str, Any]]] = {}
    for alloc in allocs or ():
        if not str(alloc.get("JobID") or "").startswith(job_prefix):
            continue
        if alloc.get("ClientStatus") != "running" or alloc.get("DesiredStatus") != "run":
            continue
        ports = ((alloc.get("AllocatedResources") or {}).get("Shared") or {}).get("Ports")
        if ports:
            found[alloc["ID"]] = list(ports)
    return found


async def task_logs(api: NomadApi, alloc_id: str, sandbox_id: str, tail: int | None) -> str:
    """The task's stdout then stderr (Nomad keeps them apart), the last ``tail`` lines; a node
    that is gone or wrote nothing gives nothing."""
    texts = []
    for kind in ("stdout", "stderr"):
        try:
            response = await api.request(
                "GET",
                f"client/fs/logs/{alloc_id}",
                params={"task": "rocklet", "type": kind, "plain": True},
                attempted="logs",
                sandbox_id=sandbox_id,
            )
        except NomadError as exc:
            if exc.status == 404:
                continue  # the node is gone, or nothing was written
            raise
        texts.append(response.text)
    text = "".join(t if t.endswith("\n") or not t else t + "\n" for t in texts)
    if tail is None:
        return text
    lines = text.splitlines(keepends=True)
    return "".join(lines[-tail:]) if tail > 0 else ""


def listed_state(stub: Mapping[str, Any]) -> UnitState | None:
    """A job stub's unit state, where the listing says it: ``running``, ``exited`` or unknown."""
    summary = ((stub.get("JobSummary") or {}).get("Summary") or {}).get("sandbox") or {}
    if stub.get("Stop") or stub.get("Status") == "dead":
        return UnitState.EXITED
    if summary.get("Running") and not (
        summary.get("Failed") or summary.get("Lost") or summary.get("Complete")
    ):
        return UnitState.RUNNING
    return None
