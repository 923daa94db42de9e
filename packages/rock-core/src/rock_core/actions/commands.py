"""One-shot commands: :class:`Command` (``POST /execute``), its server variant and
:class:`CommandResponse`; :class:`ProcessInfo` describes a background process."""

from __future__ import annotations

from typing import Literal, Union

import attrs

from rock_core.actions._fields import sandbox_id_field
from rock_core.actions._operation import Operation
from rock_core.models import (
    NonBlankStr,
)

#: A command to execute: one shell string, or an argv list (``["ls", "-l"]``).
CommandLine = Union[str, list[str]]

__all__ = ["CommandLine", "Command", "SandboxCommand", "CommandResponse", "ProcessInfo"]


@attrs.frozen(kw_only=True)
class Command:
    """A one-shot command (``POST /execute``): ``command`` with ``timeout`` seconds (``None``: no
    limit), extra ``env`` merged over the agent's environment, run in ``cwd``."""

    session_type: Literal["bash"] = "bash"
    command: CommandLine
    timeout: float | None = 1200
    env: dict[str, str] | None = None
    cwd: str | None = None


@attrs.frozen(kw_only=True)
class SandboxCommand(Command):
    """:class:`Command` as the admin and the rocklet read it: with ``sandbox_id``, and
    ``shell`` (run through ``/bin/sh``), ``check`` (fail on a non-zero exit) and ``error_msg``
    (prefix of that failure's message)."""

    shell: bool = False
    check: bool = False
    error_msg: str = ""
    sandbox_id: NonBlankStr = sandbox_id_field()


@attrs.frozen(kw_only=True)
class CommandResponse:
    """Result of ``/execute``: captured output and exit code (``-1`` when it could not run or
    was killed at its timeout, as ROCK; rock adds the reason to ``stderr`` and ``timed_out``)."""

    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = None
    # rock additions, measured by the rocklet: seconds of wall-clock and CPU (user + system)
    # time, and the peak resident memory of the command, in bytes; whether it was killed at its
    # timeout.
    wall_time: float | None = None
    cpu_time: float | None = None
    max_rss_bytes: int | None = None
    timed_out: bool = False


@attrs.frozen(kw_only=True)
class ProcessInfo:
    """A background process in a sandbox (rock addition; the rocklet's ``/processes``).

    ``exit_code`` is the command's real exit code once it ended (``-N`` with ``signal=N`` when a
    signal killed it); ``wall_time``/``cpu_time`` are seconds, ``max_rss_bytes`` its peak memory;
    ``output_tail`` the end of its combined stdout and stderr, ``output_size`` their full size.
    """

    process_id: str
    pid: int | None = None
    command: CommandLine = ""
    running: bool = False
    exit_code: int | None = None
    signal: int | None = None
    timed_out: bool = False
    started_at: float | None = None
    wall_time: float | None = None
    cpu_time: float | None = None
    max_rss_bytes: int | None = None
    output_size: int = 0
    output_tail: str = ""


# -- operations --------------------------------------------------------------------------------

EXECUTE: Operation[Command, CommandResponse] = Operation(
    name="execute",
    request=Command,
    response=CommandResponse,
    rocklet="POST /execute",
    admin="POST /execute",
    admin_body=SandboxCommand,
    runs_for="timeout",
    failure="execute command failed",
    summary="Run a one-shot command.",
)
EXECUTE_STREAM: Operation[Command, dict] = Operation(  # type: ignore[type-arg]
    name="execute_stream",
    request=Command,
    response=dict,
    rocklet="POST /execute_stream",
    admin="POST /execute_stream",
    admin_body=SandboxCommand,
    runs_for="timeout",
    kind="ndjson",
    failure="execute command failed",
    summary="Run a one-shot command and stream its events as NDJSON.",
    description='Events: {"type":"start","pid"}, {"type":"output","stream","data"}..., '
    '{"type":"exit","exit_code",...}; a broken stream ends with {"type":"error","code","message"}.',
)
START_PROCESS: Operation[dict, ProcessInfo] = Operation(  # type: ignore[type-arg]
    name="start_process",
    request=dict,
    response=ProcessInfo,
    rocklet="POST /processes",
    admin="POST /processes",
    kind="custom",
    failure="start process failed",
    summary="Start a background command; its exit code, usage and output stay readable.",
)
PROCESS_STATUS: Operation[dict, ProcessInfo] = Operation(  # type: ignore[type-arg]
    name="process_status",
    request=dict,
    response=ProcessInfo,
    rocklet="GET /processes/{id}",
    admin="GET /processes/{process_id}",
    kind="custom",
    failure="get process status failed",
    summary="The state of a background process, waiting up to `wait` seconds for its end.",
)
PROCESS_OUTPUT: Operation[dict, bytes] = Operation(  # type: ignore[type-arg]
    name="process_output",
    request=dict,
    response=bytes,
    rocklet="GET /processes/{id}/output",
    admin="GET /processes/{process_id}/output",
    kind="bytes",
    failure="get process output failed",
    summary="Raw output bytes of a background process from `offset`.",
)
KILL_PROCESS: Operation[dict, ProcessInfo] = Operation(  # type: ignore[type-arg]
    name="kill_process",
    request=dict,
    response=ProcessInfo,
    rocklet="POST /processes/{id}/kill",
    admin="POST /processes/{process_id}/kill",
    kind="custom",
    failure="kill process failed",
    summary="Signal a background process and wait for it to end.",
)
