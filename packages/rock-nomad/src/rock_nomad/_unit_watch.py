"""The runtime's ``watch``: units that stop (their allocation fails, is lost, OOM-killed or
ends) or vanish (their job purged), as Nomad's event stream tells it (:class:`EventFeed`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from rock_core.errors import SandboxNotFound
from rock_core.models import RuntimeStatus, UnitState
from rock_core.runtime import UnitHandle
from rock_nomad._api import NomadApi
from rock_nomad._events import EventFeed
from rock_nomad._job import job_path, status_of

__all__ = ["KnownJobs", "watch_units"]

#: Each known job's sandbox id and labels (its ``Name`` and ``Meta``), by job id.
KnownJobs = dict[str, tuple[str, dict[str, str]]]


async def watch_units(
    feed: EventFeed,
    api: NomadApi,
    labels: dict[str, str],
    *,
    runtime: str,
    job_prefix: str,
    known: KnownJobs,
    stopped: set[str],
) -> AsyncIterator[tuple[UnitHandle, RuntimeStatus]]:
    """``(handle, status)`` of each unit carrying ``labels`` that stops (``exited`` with its
    allocation's reason) or vanishes (``missing``).

    :param known: the runtime's book of its jobs (read, and kept up to date here).
    :param stopped: the jobs the runtime stopped itself (their end is no error).
    """
    queue = feed.subscribe(_stops_or_vanishes, registrations=False)
    try:
        await feed.ready()
        while True:
            topic, kind, obj = await queue.get()
            job_id = str((obj.get("JobID") if topic == "Allocation" else obj.get("ID")) or "")
            if not job_id.startswith(job_prefix):
                continue
            if topic == "Allocation":
                if (
                    obj.get("ClientStatus") in ("pending", "running")
                    and obj.get("DesiredStatus") == "run"
                ):
                    continue
                job = await _known_job(api, known, job_id)
                if job is None or any(job[1].get(k) != v for k, v in labels.items()):
                    continue
                status = status_of(obj, ports=None, stopped_by_us=job_id in stopped)
            elif topic == "Job" and kind == "JobDeregistered":
                job = known.get(job_id) or (
                    str(obj.get("Name") or job_id),
                    dict(obj.get("Meta") or {}),
                )
                if any(job[1].get(k) != v for k, v in labels.items()):
                    continue
                try:
                    await api.get_json(job_path(job_id), attempted="watch", not_found="gone")
                    continue  # stopped, not purged: its allocation's end tells the rest
                except SandboxNotFound:
                    status = RuntimeStatus(
                        state=UnitState.MISSING, error=f"Nomad job {job_id} was purged"
                    )
                known.pop(job_id, None)
            else:
                continue
            yield (
                UnitHandle(runtime=runtime, unit_id=job_id, sandbox_id=job[0], labels=job[1]),
                status,
            )
    finally:
        feed.unsubscribe(queue)


def _stops_or_vanishes(topic: str, kind: str, obj: dict[str, Any]) -> bool:
    """The events :func:`watch_units` reads: an allocation that is no longer pending or running
    as wanted, a job deregistered (not each start's five or six events)."""
    if topic == "Allocation":
        return not (
            obj.get("ClientStatus") in ("pending", "running") and obj.get("DesiredStatus") == "run"
        )
    return topic == "Job" and kind == "JobDeregistered"


async def _known_job(
    api: NomadApi, known: KnownJobs, job_id: str
) -> tuple[str, dict[str, str]] | None:
    """Job ``job_id``'s sandbox id and labels, asked of Nomad once; ``None`` when it is gone."""
    job = known.get(job_id)
    if job is None:
        try:
            found = await api.get_json(job_path(job_id), attempted="watch", not_found="gone")
        except SandboxNotFound:
            return None
        job = known[job_id] = (str(found.get("Name") or job_id), dict(found.get("Meta") or {}))
    return job
