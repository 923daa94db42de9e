"""Request models the admin reads besides ROCK's own (:mod:`rock_core.actions`).

Query strings are read through models too, so a missing, blank or mistyped query parameter is
reported by name exactly like a bad JSON field, and an unknown one is rejected. The bodies of
rock's hand-written routes (download, background processes) mirror the methods of
:class:`~rock_core.rocklet_client.RockletClient`, plus ``sandbox_id``; the operations of kind
``call`` read theirs from the catalog (:mod:`rock_core.operations`).
"""

from __future__ import annotations

from typing import Any

import attrs

from rock_core.actions import CommandLine
from rock_core.errors import InvalidParameter
from rock_core.models import NonBlankStr, NonNegativeFloat, NonNegativeInt, PositiveInt, constrained

__all__ = [
    "MAX_STATUS_WAIT",
    "SandboxIdQuery",
    "GetStatusQuery",
    "ListSandboxesQuery",
    "ProcessStatusQuery",
    "ProcessOutputQuery",
    "SandboxPathRequest",
    "StartProcessRequest",
    "KillProcessRequest",
    "HealthResponse",
]


#: The longest ``GET /get_status?wait=`` holds its answer (a longer wait is cut to it).
MAX_STATUS_WAIT = 30.0


def _sandbox_id() -> Any:
    return constrained(NonBlankStr)


@attrs.frozen(kw_only=True)
class SandboxIdQuery:
    """``?sandbox_id=``: the query of ``/is_alive`` and ``/get_sandbox_statistics``."""

    sandbox_id: NonBlankStr = _sandbox_id()


@attrs.frozen(kw_only=True)
class GetStatusQuery:
    """``?sandbox_id=&include_all_states=[&wait=]``: the query of ``/get_status``.

    ``include_all_states`` accepts ``true``/``false`` in any case (ROCK's SDK sends Python's
    ``True``/``False``). ``wait`` (rock's addition, seconds, at most :data:`MAX_STATUS_WAIT`)
    holds the answer while the sandbox is starting, until its start settles (running, failed
    or stopped) or the time is up: one request per start instead of a poll every second. ROCK's
    admin ignores it and answers at once.
    """

    sandbox_id: NonBlankStr = _sandbox_id()
    include_all_states: bool = False
    wait: NonNegativeFloat = constrained(NonNegativeFloat, default=0.0)


@attrs.frozen(kw_only=True)
class ListSandboxesQuery:
    """The query of ``GET /sandboxes``: a page of live sandboxes, with exact-match filters."""

    page: PositiveInt = constrained(PositiveInt, default=1)
    page_size: PositiveInt = constrained(PositiveInt, default=500)
    user_id: str | None = None
    experiment_id: str | None = None
    namespace: str | None = None
    cluster: str | None = None
    image: str | None = None
    state: str | None = None


@attrs.frozen(kw_only=True)
class ProcessStatusQuery:
    """The query of ``GET /processes/{process_id}``: wait up to ``wait`` seconds for the end;
    ``tail`` bytes of output."""

    sandbox_id: NonBlankStr = _sandbox_id()
    wait: float = 0.0
    tail: NonNegativeInt = constrained(NonNegativeInt, default=4096)


@attrs.frozen(kw_only=True)
class ProcessOutputQuery:
    """The query of ``GET /processes/{process_id}/output``: bytes from ``offset`` (negative:
    from the end), at most ``limit``."""

    sandbox_id: NonBlankStr = _sandbox_id()
    offset: int = 0
    limit: NonNegativeInt | None = constrained(NonNegativeInt, optional=True, default=None)


@attrs.frozen(kw_only=True)
class SandboxPathRequest:
    """``POST /download``: a path inside the sandbox."""

    sandbox_id: NonBlankStr = _sandbox_id()
    path: NonBlankStr = constrained(NonBlankStr)


@attrs.frozen(kw_only=True)
class StartProcessRequest:
    """``POST /processes``: start a background command (``timeout`` seconds, ``None``: none)."""

    sandbox_id: NonBlankStr = _sandbox_id()
    command: CommandLine
    cwd: str | None = None
    env: dict[str, str] | None = None
    timeout: float | None = None


def _check_signal(_instance: Any, _attribute: Any, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, str)) or value == "":
        raise InvalidParameter(
            f"signal: expected a signal number or name, got {value!r}", field="signal", value=value
        )


@attrs.frozen(kw_only=True)
class KillProcessRequest:
    """``POST /processes/{process_id}/kill``: send ``signal`` (a number or a name such as
    ``"KILL"``), then wait up to ``wait`` seconds for the process to end."""

    sandbox_id: NonBlankStr = _sandbox_id()
    # Typed Any for the converter (it has no str-or-int union); checked by the validator.
    signal: Any = attrs.field(default=15, validator=_check_signal)
    wait: float = 5.0


@attrs.frozen(kw_only=True)
class HealthResponse:
    """``GET /healthz``: ``ok`` while the server and its engine run.

    With ``[engine] cluster`` set (several admins on one record store), also ``cluster``, its
    name, and ``leader``: whether this admin holds the cluster's lease now (it runs the
    background work). Both are left out of the JSON without a cluster (ROCK's shape)."""

    status: str = "ok"
    version: str = ""
    leader: bool | None = None
    cluster: str | None = None
