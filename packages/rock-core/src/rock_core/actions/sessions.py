"""Bash sessions: create, run in, interrupt and close a persistent shell, with ROCK's
request models, their server variants and the responses."""

from __future__ import annotations

from typing import Literal

import attrs

from rock_core.actions._fields import sandbox_id_field
from rock_core.actions._operation import Operation
from rock_core.models import (
    NonBlankStr,
)

__all__ = [
    "CreateBashSessionRequest",
    "CreateSessionRequest",
    "SandboxCreateBashSessionRequest",
    "BashAction",
    "Action",
    "SandboxBashAction",
    "CloseBashSessionRequest",
    "CloseSessionRequest",
    "SandboxCloseBashSessionRequest",
    "InterruptSessionRequest",
    "BashObservation",
    "Observation",
    "CreateBashSessionResponse",
    "CreateSessionResponse",
    "CloseBashSessionResponse",
    "CloseSessionResponse",
    "InterruptSessionResponse",
    "ExecuteBashSessionResponse",
    "CloseResponse",
]


@attrs.frozen(kw_only=True)
class CreateBashSessionRequest:
    """Open a persistent bash session named ``session``.

    ``startup_source`` files are sourced first; the shell starts with an empty environment unless
    ``env_enable``; ``env`` is added on top; ``remote_user`` runs the shell as that user.
    """

    session_type: Literal["bash"] = "bash"
    session: str = "default"
    startup_source: list[str] = attrs.field(factory=list)
    env_enable: bool = False
    env: dict[str, str] | None = None
    remote_user: str | None = None


#: ROCK's name for the (one-member) union of create-session requests.
CreateSessionRequest = CreateBashSessionRequest


@attrs.frozen(kw_only=True)
class SandboxCreateBashSessionRequest(CreateBashSessionRequest):
    """:class:`CreateBashSessionRequest` with ``sandbox_id``, the prompt wait ``startup_timeout``
    (seconds) and the shell reader's ``max_read_size``."""

    startup_timeout: float = 1.0
    max_read_size: int = 2000
    sandbox_id: NonBlankStr = sandbox_id_field()


@attrs.frozen(kw_only=True)
class BashAction:
    """Run ``command`` in bash session ``session`` (``POST /run_in_session``).

    ``check``: ``"raise"`` fails on a non-zero exit code, ``"silent"`` reports it,
    ``"ignore"`` does not collect it. ``timeout`` in seconds, ``None`` for no limit.
    """

    action_type: Literal["bash"] = "bash"
    command: str
    session: str = "default"
    timeout: float | None = None
    check: Literal["silent", "raise", "ignore"] = "raise"


#: ROCK's alias of :class:`BashAction`.
Action = BashAction


@attrs.frozen(kw_only=True)
class SandboxBashAction(BashAction):
    """:class:`BashAction` with ``sandbox_id`` and interactive-program options: ``expect`` lists
    extra outputs to wait for besides the prompt; ``is_interactive_command`` /
    ``is_interactive_quit`` talk to a program that does not return to the prompt (gdb, python)."""

    sandbox_id: NonBlankStr = sandbox_id_field()
    is_interactive_command: bool = False
    is_interactive_quit: bool = False
    error_msg: str = ""
    expect: list[str] = attrs.field(factory=list)


@attrs.frozen(kw_only=True)
class CloseBashSessionRequest:
    """Close bash session ``session``."""

    session_type: Literal["bash"] = "bash"
    session: str = "default"


#: ROCK's name for the (one-member) union of close-session requests.
CloseSessionRequest = CloseBashSessionRequest


@attrs.frozen(kw_only=True)
class SandboxCloseBashSessionRequest(CloseBashSessionRequest):
    """:class:`CloseBashSessionRequest` with ``sandbox_id``."""

    sandbox_id: NonBlankStr = sandbox_id_field()


@attrs.frozen(kw_only=True)
class InterruptSessionRequest:
    """(rock) Ctrl-C whatever runs in bash session ``session``; the session stays usable."""

    session: str = "default"


@attrs.frozen(kw_only=True)
class BashObservation:
    """Result of ``/run_in_session``: ``output``, ``exit_code`` (``None`` with ``check="ignore"``),
    ``failure_reason`` and, for interactive commands, the ``expect_string`` that matched."""

    session_type: Literal["bash"] = "bash"
    output: str = ""
    exit_code: int | None = None
    failure_reason: str = ""
    expect_string: str = ""


#: ROCK's alias of :class:`BashObservation`.
Observation = BashObservation


@attrs.frozen(kw_only=True)
class CreateBashSessionResponse:
    """Result of ``/create_session``: what the shell printed before its first prompt."""

    output: str = ""
    session_type: Literal["bash"] = "bash"


#: ROCK's name for the (one-member) union of create-session responses.
CreateSessionResponse = CreateBashSessionResponse


@attrs.frozen(kw_only=True)
class CloseBashSessionResponse:
    """Result of ``/close_session``."""

    session_type: Literal["bash"] = "bash"


#: ROCK's name for the (one-member) union of close-session responses.
CloseSessionResponse = CloseBashSessionResponse


@attrs.frozen(kw_only=True)
class InterruptSessionResponse:
    """Result of the rocklet's ``/interrupt_session`` (rock addition): whether a command was
    running and was interrupted, what it printed, and its exit code (130 after Ctrl-C)."""

    session_type: Literal["bash"] = "bash"
    interrupted: bool = False
    output: str = ""
    exit_code: int | None = None


@attrs.frozen(kw_only=True)
class ExecuteBashSessionResponse:
    """Result of the SDK's (deprecated) ``run_nohup_and_wait``."""

    success: bool = False
    message: str = ""


@attrs.frozen(kw_only=True)
class CloseResponse:
    """Result of the rocklet's ``/close`` (all sessions closed); no fields."""


# -- operations --------------------------------------------------------------------------------

CREATE_SESSION: Operation[CreateBashSessionRequest, CreateBashSessionResponse] = Operation(
    name="create_session",
    request=CreateBashSessionRequest,
    response=CreateBashSessionResponse,
    rocklet="POST /create_session",
    admin="POST /create_session",
    admin_body=SandboxCreateBashSessionRequest,
    failure="create session failed",
    summary="Open a persistent bash session.",
)
RUN_IN_SESSION: Operation[BashAction, BashObservation] = Operation(
    name="run_in_session",
    request=BashAction,
    response=BashObservation,
    rocklet="POST /run_in_session",
    admin="POST /run_in_session",
    admin_body=SandboxBashAction,
    runs_for="timeout",
    failure="run in session failed",
    summary="Run a command in a bash session.",
)
CLOSE_SESSION: Operation[CloseBashSessionRequest, CloseBashSessionResponse] = Operation(
    name="close_session",
    request=CloseBashSessionRequest,
    response=CloseBashSessionResponse,
    rocklet="POST /close_session",
    admin="POST /close_session",
    admin_body=SandboxCloseBashSessionRequest,
    failure="close session failed",
    summary="Close a bash session.",
)
INTERRUPT_SESSION: Operation[InterruptSessionRequest, InterruptSessionResponse] = Operation(
    name="interrupt_session",
    method="interrupt",
    request=InterruptSessionRequest,
    response=InterruptSessionResponse,
    rocklet="POST /interrupt_session",
    admin="POST /interrupt_session",
    failure="interrupt session failed",
    summary="Ctrl-C the command running in a session; the session stays usable.",
)
