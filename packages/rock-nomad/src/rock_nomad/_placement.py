"""Following a registered sandbox job until it runs: its evaluation until the scheduler has
placed it (or Nomad's reason why not), then its allocation until the node has the image and the
task runs. News comes from the event stream (:class:`~rock_nomad._events.JobWatch`); after
``poll`` seconds of silence, or at once without a stream, Nomad itself is asked with blocking
queries."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from rock_core.errors import ImagePullFailed, RuntimeFailure
from rock_nomad._api import NomadApi
from rock_nomad._events import JobWatch
from rock_nomad._job import describe_placement_failure, failure_of, latest_alloc, status_of

__all__ = ["BLOCK", "follow", "heard", "placed", "start_failure"]

#: Seconds one blocking query waits before it is asked again.
BLOCK = 30.0


async def heard(watch: JobWatch, poll: float, until: Callable[[], bool] | None = None) -> bool:
    """Wait for news of the watched job (with ``until``: for news that makes it true);
    ``False`` when none came within ``poll`` seconds (then the caller reads Nomad itself).
    ``poll`` 0: no stream, read at once (blocking)."""
    return poll > 0 and await watch.changed(poll, until)


def _deciding(evaluation: Mapping[str, Any] | None) -> bool:
    """Whether the scheduler is still at an evaluation (not told yet: it is)."""
    return (
        evaluation is None
        or evaluation.get("Status") in ("pending", "blocked")
        and not evaluation.get("FailedTGAllocs")
    )


def _pending(alloc: Mapping[str, Any]) -> bool:
    """Whether an allocation's client is still getting its task going, as wanted."""
    return alloc.get("ClientStatus") == "pending" and alloc.get("DesiredStatus") == "run"


async def placed(
    api: NomadApi, watch: JobWatch, eval_id: str, sandbox_id: str, poll: float
) -> dict[str, Any]:
    """Follow the register evaluation until the scheduler is done; the allocation it placed.

    :raises RuntimeFailure: nothing fits: Nomad's reason (``FailedTGAllocs``).
    """
    index = 1

    def decided() -> bool:  # the stream's news that ends the wait; other news does not wake it
        return not _deciding(watch.evals.get(eval_id))

    while True:
        evaluation = watch.evals.get(eval_id)
        if _deciding(evaluation):
            if not await heard(watch, poll, decided):
                # No stream, or no news for a while: ask Nomad (blocking only without a stream).
                read, index = await api.blocking(
                    f"evaluation/{eval_id}",
                    index if poll == 0 else 0,
                    BLOCK,
                    attempted="start",
                    sandbox_id=sandbox_id,
                    namespaced=False,
                )
                watch.update("Evaluation", read)
            continue
        assert evaluation is not None
        status = evaluation.get("Status")
        if evaluation.get("FailedTGAllocs"):
            raise RuntimeFailure(
                describe_placement_failure(evaluation["FailedTGAllocs"]),
                sandbox_id=sandbox_id,
                attempted="start",
            )
        if status in ("failed", "canceled"):
            raise RuntimeFailure(
                f"Nomad's evaluation of job {watch.job_id} {status}: "
                f"{evaluation.get('StatusDescription') or 'no reason given'}",
                sandbox_id=sandbox_id,
                attempted="start",
            )
        break
    alloc = latest_alloc([a for a in watch.allocs.values() if a.get("EvalID") == eval_id])
    if alloc is None:
        allocs = await api.get_json(
            f"evaluation/{eval_id}/allocations",
            attempted="start",
            sandbox_id=sandbox_id,
            namespaced=False,
        )
        alloc = latest_alloc([a for a in allocs if a.get("JobID") == watch.job_id])
    if alloc is None:
        raise RuntimeFailure(
            f"Nomad's evaluation of job {watch.job_id} completed without placing it",
            sandbox_id=sandbox_id,
            attempted="start",
        )
    return dict(alloc)


async def follow(
    api: NomadApi, watch: JobWatch, alloc: Mapping[str, Any], sandbox_id: str, poll: float
) -> dict[str, Any]:
    """Follow an allocation until its client is done pulling and starting: ``running``, or ended."""
    alloc_id = alloc["ID"]
    index = 1

    def moved() -> bool:  # the stream's news that ends the wait; other news does not wake it
        told = watch.allocs.get(alloc_id)
        return told is not None and not _pending(told)

    while True:
        current = watch.allocs.get(alloc_id) or alloc
        if not _pending(current):
            return dict(current)
        if not await heard(watch, poll, moved):
            read, index = await api.blocking(
                f"allocation/{alloc_id}",
                index if poll == 0 else 0,
                BLOCK,
                attempted="start",
                sandbox_id=sandbox_id,
            )
            watch.update("Allocation", read)


def start_failure(alloc: Mapping[str, Any], image: str, sandbox_id: str) -> RuntimeFailure:
    """Why an allocation did not reach ``running``: :class:`ImagePullFailed` when its node
    could not get the image, else the task's error or exit."""
    reason, image_failed = failure_of(alloc)
    if image_failed:
        return ImagePullFailed(
            f"Failed to pull image {image} on Nomad node {alloc.get('NodeName')}: {reason}",
            sandbox_id=sandbox_id,
            attempted="start",
        )
    status = status_of(alloc, ports=None, stopped_by_us=False)
    why = status.error or (
        f"exit code {status.exit_code}"
        if status.exit_code is not None
        else alloc.get("ClientStatus")
    )
    return RuntimeFailure(
        f"the sandbox's Nomad task did not start on node {alloc.get('NodeName')}: {why}",
        sandbox_id=sandbox_id,
        attempted="start",
    )
