"""Reading sandbox jobs back from Nomad: a listed job's unit state, the ports of running
allocations, and a task's output."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from rock_core.errors import RockError
from rock_core.models import UnitState
from rock_nomad._api import NomadApi, NomadError

__all__ = ["FirstListing", "listed_state", "task_logs"]

log = logging.getLogger("rock.nomad")


#: Seconds the first listing's word on a job's allocation stands for its first inspect.
LISTING_FRESH = 60.0


class FirstListing:
    """What the runtime's first listing (an admin's start, before it takes its sandboxes back)
    read of every sandbox allocation in one call (``GET /v1/allocations?resources=true``): the
    running ones' ports, which never change, and each job's newest allocation, which the job's
    first inspect within :data:`LISTING_FRESH` seconds takes as it is. An admin taking back
    thousands of sandboxes then asks Nomad nothing for each (each one's rocklet is asked
    whether it is alive all the same). A failure gives nothing (each is read on its own)."""

    def __init__(self) -> None:
        self.done = False
        self._at = 0.0
        self._newest: dict[str, dict[str, Any]] = {}

    async def read(self, api: NomadApi, job_prefix: str, ports: dict[str, Any]) -> None:
        self.done = True
        try:
            allocs = await api.get_json("allocations", params={"resources": True}, attempted="list")
        except RockError as exc:
            log.info("could not read the sandboxes' allocations at once: %s", exc)
            return
        self._at = time.monotonic()
        for alloc in allocs or ():
            job_id = str(alloc.get("JobID") or "")
            if not job_id.startswith(job_prefix):
                continue
            known = self._newest.get(job_id)
            if known is None or (known.get("CreateIndex") or 0) < (alloc.get("CreateIndex") or 0):
                self._newest[job_id] = alloc
            shared = (alloc.get("AllocatedResources") or {}).get("Shared") or {}
            if alloc.get("ClientStatus") == "running" and shared.get("Ports"):
                ports[alloc["ID"]] = list(shared["Ports"])

    def take(self, job_id: str) -> dict[str, Any] | None:
        """The job's newest allocation as listed, once, while the listing is fresh."""
        alloc = self._newest.pop(job_id, None)
        return alloc if time.monotonic() - self._at <= LISTING_FRESH else None


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
