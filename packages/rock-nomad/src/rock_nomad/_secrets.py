"""Each sandbox's secret as its job's own Nomad Variable (``nomad/jobs/<job id>``), which the
job's template reads through the task's workload identity: the secret is nowhere in the job."""

from __future__ import annotations

import logging

import anyio

from rock_core.errors import RuntimeFailure
from rock_nomad._api import NomadApi
from rock_nomad._job import SECRET_ITEM, secret_path

__all__ = ["forget_secret", "put_secret"]

log = logging.getLogger("rock.nomad")


async def put_secret(
    api: NomadApi, namespace: str, job_id: str, token: str, sandbox_id: str
) -> None:
    """Write the sandbox's secret as its job's Nomad Variable (the job's template reads it)."""
    path = secret_path(job_id)
    await api.request(
        "PUT",
        f"var/{path}",
        json={"Namespace": namespace, "Path": path, "Items": {SECRET_ITEM: token}},
        attempted="start",
        sandbox_id=sandbox_id,
    )


async def forget_secret(api: NomadApi, job_id: str, sandbox_id: str | None) -> None:
    """Delete the sandbox's secret (gone already is fine); a failure is logged, not raised."""
    with anyio.CancelScope(shield=True):
        try:
            await api.request(
                "DELETE",
                f"var/{secret_path(job_id)}",
                attempted="remove",
                sandbox_id=sandbox_id,
            )
        except RuntimeFailure as exc:
            log.warning("could not delete the Nomad Variable %s: %s", secret_path(job_id), exc)
