"""Reading sandbox jobs back from Nomad: a listed job's unit state, and its task's output."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rock_core.models import UnitState
from rock_nomad._api import NomadApi, NomadError

__all__ = ["listed_state", "task_logs"]


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
