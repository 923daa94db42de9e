"""ROCK's commit: a sandbox's files as a new image tag on its node, in the background, its
status polled (ROCK 1.11's ``POST /commit`` and ``GET /commit/{sandbox_id}``).

A commit is a snapshot (:func:`rock_core.engine.snapshots.snapshot`'s runtime call, capability
``snapshot_image``: the files over the image, not the processes; the rocklet's secret blanked)
named as the caller asked instead of ``rock-snapshot:<id>``, and labelled with the caller's
tenant and the source sandbox. It is not one of the tenant's snapshots (no snapshot name).

- ``image_tag`` is a Docker reference ``[registry/]repository[:tag]`` (no digest); a bad one is
  refused at once, naming it. The repository ``rock-snapshot`` is rock's own.
- An ``image_tag`` whose first part names a registry (a host with a ``.`` or a port, or
  ``localhost``) is pushed there after the commit, with ``username`` and ``password`` for that
  push only (never kept or logged). Only the registries of the engine's ``commit_registries``
  setting are pushed to; with none configured, a push is refused at once, naming the setting.
- An image of that name already on the node is replaced only if it is a commit of the same
  tenant (a tenant cannot rename a base image or another tenant's commit).
- One commit at a time per sandbox (``COMMIT_CONFLICT``); the last status of each sandbox is
  kept in the leader's memory (a new leader knows none: ``STATUS_NOT_FOUND``).
- A sandbox of another tenant is an unknown sandbox.
"""

from __future__ import annotations

import logging
import re
import weakref
from datetime import UTC, datetime

import attrs

from rock_core.actions import CommitErrorCode, CommitPhase, CommitStatusResponse
from rock_core.engine.admission import LABEL_COMMIT_TENANT, commit_refusal
from rock_core.engine.core import EngineCore
from rock_core.engine.snapshots import _record_of, _require
from rock_core.errors import BadRequestRockError, InvalidParameter
from rock_core.rocklet.server import TOKEN_ENV
from rock_core.runtime import UnitHandle
from rock_core.states import State

__all__ = [
    "LABEL_SANDBOX",
    "LABEL_TENANT",
    "check_commit_tenant",
    "commit_status",
    "registry_of",
    "start_commit",
]

log = logging.getLogger("rock.engine")

LABEL_ENGINE = "rock.commit.engine"
LABEL_TENANT = LABEL_COMMIT_TENANT
LABEL_SANDBOX = "rock.commit.sandbox"
LABEL_TAG = "rock.commit.image_tag"

_DOMAIN_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*(?::[0-9]+)?"
_PATH = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REFERENCE = re.compile(rf"^(?:{_DOMAIN}/)?{_PATH}(?:/{_PATH})*(?::[\w][\w.-]{{0,127}})?$")
_RESERVED = "rock-snapshot"


@attrs.define
class _Job:
    tenant: str
    status: CommitStatusResponse


_jobs: weakref.WeakKeyDictionary[EngineCore, dict[str, _Job]] = weakref.WeakKeyDictionary()


def _now() -> str:
    return datetime.now(tz=UTC).isoformat()


def registry_of(image_tag: str) -> str | None:
    """The registry ``image_tag`` names (``None``: none, the image stays on the node)."""
    first, slash, _ = image_tag.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        return first
    return None


async def check_commit_tenant(core: EngineCore, image: str, tenant: str | None) -> None:
    """Under keys, a start naming a commit of another tenant (the image's
    :data:`LABEL_TENANT`) is refused as an unknown image, not saying whose: it would start a
    sandbox with that tenant's files. One look at the image's labels on the node (none when the
    runtime cannot tell, or the image is not there: a pull brings no commit of this node's).
    Checked again on the unit made for the start (:func:`rock_core.engine.bringup.bring_up`):
    a tag moved in between is seen there.

    :raises InvalidParameter: (field ``image``) another tenant's commit.
    """
    if tenant is None:
        return
    refusal = commit_refusal(image, tenant, await core.runtime.image_labels(image))
    if refusal is not None:
        raise refusal


def _check_tag(core: EngineCore, image_tag: str) -> str | None:
    """The registry to push to, after checking ``image_tag`` (raises naming what is wrong)."""
    if len(image_tag) > 255 or not _REFERENCE.match(image_tag):
        raise InvalidParameter(
            f"image_tag: {image_tag!r} is not an image tag ([registry/]repository[:tag]: lower-case "
            "letters, digits and separators '.', '_', '-' in the repository, a tag of letters, "
            "digits, '_', '.', '-'; no digest)",
            field="image_tag",
            value=image_tag,
            attempted="commit",
        )
    registry = registry_of(image_tag)
    path = image_tag.split("/", 1)[1] if registry else image_tag
    if path.split(":", 1)[0] == _RESERVED:
        raise InvalidParameter(
            f"image_tag: {image_tag!r}: the repository {_RESERVED!r} is rock's own (snapshots); "
            "choose another",
            field="image_tag",
            value=image_tag,
            attempted="commit",
        )
    if registry is None:
        return None
    allowed = core.config.commit_registries
    if not allowed:
        raise InvalidParameter(
            f"image_tag: {image_tag!r} names the registry {registry!r}, and no registry is "
            "configured to push to: set commit_registries in the [engine] section of rock's "
            f'configuration (commit_registries = ["{registry}"]), or commit to a tag without a '
            "registry to keep the image on the node",
            field="image_tag",
            value=image_tag,
            attempted="commit",
        )
    if registry not in allowed:
        raise InvalidParameter(
            f"image_tag: the registry {registry!r} is not among the configured commit_registries "
            f"{list(allowed)!r} ([engine] section)",
            field="image_tag",
            value=image_tag,
            attempted="commit",
        )
    return registry


async def start_commit(
    core: EngineCore,
    sandbox_id: str,
    image_tag: str,
    username: str = "",
    password: str = "",
    *,
    tenant: str | None = None,
) -> CommitStatusResponse:
    """Begin committing ``sandbox_id``'s files as ``image_tag`` (and push it when it names a
    configured registry); answers the ``RUNNING`` status at once.

    :raises NotSupported: the runtime lacks the capability ``snapshot_image``.
    :raises SandboxNotFound: no such sandbox of ``tenant``.
    :raises InvalidParameter: a bad ``image_tag``, or a push no registry is configured for.
    :raises BadRequestRockError: the sandbox cannot be committed now, or a commit of it runs
        (``COMMIT_CONFLICT``).
    """
    _require(core, "commit")
    record = _record_of(core, sandbox_id, tenant, "commit")
    owner = record.spec.tenant or core.owner
    registry = _check_tag(core, image_tag)
    live = core.live.get(sandbox_id)
    handle = live.handle if live is not None and not live.removing else None
    if handle is None or record.state not in (State.RUNNING, State.STOPPED):
        raise BadRequestRockError(
            f"Sandbox {sandbox_id} cannot be committed: current state is {record.state.value}; "
            "only a running sandbox, or a stopped one whose unit is kept, can be",
            sandbox_id=sandbox_id,
            attempted="commit",
        )
    jobs = _jobs.setdefault(core, {})
    running = jobs.get(sandbox_id)
    if running is not None and running.status.phase is CommitPhase.RUNNING:
        raise BadRequestRockError(
            f"{CommitErrorCode.COMMIT_CONFLICT.value}: a commit of sandbox {sandbox_id} to "
            f"{running.status.image_tag} is running",
            sandbox_id=sandbox_id,
            attempted="commit",
        )
    status = CommitStatusResponse(
        sandbox_id=sandbox_id, image_tag=image_tag, phase=CommitPhase.RUNNING, started_at=_now()
    )
    job = _Job(tenant=owner, status=status)
    jobs[sandbox_id] = job
    core.task_group().start_soon(_run, core, job, handle, registry, username, password)
    return status


async def _run(
    core: EngineCore,
    job: _Job,
    handle: UnitHandle,
    registry: str | None,
    username: str,
    password: str,
) -> None:
    status = job.status
    runtime = core.runtime
    scope = {LABEL_ENGINE: core.config.engine_label, LABEL_TENANT: job.tenant}
    labels = {**scope, LABEL_SANDBOX: status.sandbox_id, LABEL_TAG: status.image_tag}
    stage, code = "commit", CommitErrorCode.COMMIT_FAILED
    try:
        image = await runtime.snapshot_image(handle, labels=labels, strip_env=[TOKEN_ENV])
        try:
            await runtime.tag_image(
                image.image_id, status.image_tag, untag=image.reference, replaceable=scope
            )
        except BaseException:
            await runtime.delete_snapshot_image(image.image_id)
            raise
        if registry is not None:
            stage, code = "push", CommitErrorCode.PUSH_FAILED
            await runtime.push_image(status.image_tag, username=username, password=password)
    except Exception as exc:
        log.warning(
            "commit of %s to %s failed at %s: %s", status.sandbox_id, status.image_tag, stage, exc
        )
        job.status = attrs.evolve(
            status,
            phase=CommitPhase.FAILED,
            completed_at=_now(),
            exit_code=1,
            failed_stage=stage,
            error_code=code,
            error_message=str(exc),
        )
        return
    job.status = attrs.evolve(status, phase=CommitPhase.SUCCEEDED, completed_at=_now(), exit_code=0)


def commit_status(
    core: EngineCore, sandbox_id: str, *, tenant: str | None = None
) -> CommitStatusResponse:
    """The last commit's status of ``sandbox_id`` (of ``tenant``).

    :raises NotSupported: the runtime lacks the capability ``snapshot_image``.
    :raises SandboxNotFound: no such sandbox of ``tenant``.
    :raises BadRequestRockError: ``STATUS_NOT_FOUND``: no commit of it is known here.
    """
    _require(core, "get_commit_status")
    job = _jobs.get(core, {}).get(sandbox_id)
    if job is None or (tenant is not None and job.tenant != tenant):
        _record_of(core, sandbox_id, tenant, "get_commit_status")
        raise BadRequestRockError(
            f"{CommitErrorCode.STATUS_NOT_FOUND.value}: no commit of sandbox {sandbox_id} is known",
            sandbox_id=sandbox_id,
            attempted="get_commit_status",
        )
    return job.status
