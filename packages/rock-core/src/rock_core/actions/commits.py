"""ROCK's commit: a sandbox's files as a new image tag (``POST /commit``, then
``GET /commit/{sandbox_id}`` polled until the phase is no longer ``RUNNING``), with ROCK 1.11's
field names and values (``rock/admin/proto/request.py`` ``CommitRequest``,
``rock/actions/sandbox/response.py`` ``CommitPhase``, ``CommitErrorCode``,
``CommitStatusResponse``)."""

from __future__ import annotations

import enum

import attrs

from rock_core.actions._fields import sandbox_id_field
from rock_core.models import NonBlankStr, constrained

__all__ = ["CommitErrorCode", "CommitPhase", "CommitRequest", "CommitStatusResponse"]


class CommitPhase(str, enum.Enum):
    """Where a commit is: ROCK's three phases."""

    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"


class CommitErrorCode(str, enum.Enum):
    """Why a commit failed (ROCK's codes; rock uses the ones that can happen here)."""

    SANDBOX_NOT_FOUND = "SANDBOX_NOT_FOUND"
    WORKER_NOT_FOUND = "WORKER_NOT_FOUND"
    WORKER_UNREACHABLE = "WORKER_UNREACHABLE"
    SANDBOX_CONTAINER_NOT_FOUND = "SANDBOX_CONTAINER_NOT_FOUND"
    COMMIT_CONFLICT = "COMMIT_CONFLICT"
    DISPATCH_FAILED = "DISPATCH_FAILED"
    LOGIN_FAILED = "LOGIN_FAILED"
    COMMIT_FAILED = "COMMIT_FAILED"
    PUSH_FAILED = "PUSH_FAILED"
    TIMEOUT = "TIMEOUT"
    PROCESS_LOST = "PROCESS_LOST"
    STATUS_NOT_FOUND = "STATUS_NOT_FOUND"
    STATUS_CORRUPTED = "STATUS_CORRUPTED"


@attrs.frozen(kw_only=True)
class CommitRequest:
    """``POST /commit``: the sandbox, the tag its files become (``[registry/]repository[:tag]``),
    and the registry's ``username`` and ``password`` (used for a push only; never kept or
    logged)."""

    sandbox_id: NonBlankStr = sandbox_id_field()
    image_tag: NonBlankStr = constrained(NonBlankStr)
    username: str = attrs.field(default="", repr=False)
    password: str = attrs.field(default="", repr=False)


@attrs.frozen(kw_only=True)
class CommitStatusResponse:
    """A commit's status: ``phase`` ``RUNNING``, ``SUCCEEDED`` or ``FAILED`` (then
    ``failed_stage``: ``commit`` or ``push``, ``error_code`` and ``error_message``); times are
    ISO 8601 text, as ROCK's."""

    sandbox_id: str
    image_tag: str
    phase: CommitPhase
    started_at: str
    completed_at: str | None = None
    exit_code: int | None = None
    failed_stage: str | None = None
    error_code: CommitErrorCode | None = None
    error_message: str | None = None
