"""One-shot commands: :class:`Command` (``POST /execute``), its server variant and
:class:`CommandResponse`; :class:`ProcessInfo` describes a background process."""

from __future__ import annotations

from typing import Literal, Union

import attrs

from rock_core.actions._fields import sandbox_id_field
from rock_core.models import (
    NonBlankStr,
)

#: A command to execute: one shell string, or an argv list (``["ls", "-l"]``).
CommandLine = Union[str, list[str]]


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
