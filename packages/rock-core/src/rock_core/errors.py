"""The one error tree of rock, with ROCK's status codes.

Every error rock raises on purpose is a :class:`RockError`. Its ``code`` follows ROCK's ranges
(``rock/_codes.py`` in ``rl-rock``): 4xxx the caller's request is wrong, 5xxx rock or its backend
failed, 6xxx a command inside the sandbox failed. The base classes carry ROCK's base codes (4000,
5000, 6000); subclasses narrow the code inside the same range so a client that only knows ROCK's
ranges still classifies them right.

Each error says what was attempted and, where there is one, which sandbox it concerns, so a log
line or an HTTP envelope built from it is useful on its own::

    >>> err = SandboxNotFound("Sandbox abc not found", sandbox_id="abc", attempted="get_status")
    >>> err.code, err.sandbox_id, err.attempted
    (4004, 'abc', 'get_status')
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "OK",
    "BAD_REQUEST",
    "INTERNAL_SERVER_ERROR",
    "COMMAND_ERROR",
    "RockError",
    "BadRequestRockError",
    "InvalidParameter",
    "SandboxNotFound",
    "SandboxAlreadyExists",
    "InvalidTransition",
    "SessionNotFound",
    "SessionAlreadyExists",
    "PayloadTooLarge",
    "NotSupported",
    "Forbidden",
    "QuotaExceeded",
    "InternalServerRockError",
    "RuntimeFailure",
    "ImagePullFailed",
    "RockletUnreachable",
    "StartupTimeout",
    "PluginError",
    "CommandRockError",
    "NonZeroExitCode",
    "CommandTimeout",
    "error_for_code",
    "wire_code",
]

# ROCK's status codes (``rock/_codes.py``): 2xxx success, 4xxx client, 5xxx server, 6xxx command.
OK = 2000
BAD_REQUEST = 4000
INTERNAL_SERVER_ERROR = 5000
COMMAND_ERROR = 6000


class RockError(Exception):
    """Base of every error rock raises on purpose.

    :param message: what went wrong, in words a user can act on.
    :param sandbox_id: the sandbox concerned, when there is one.
    :param attempted: the operation that failed (``"start"``, ``"run_in_session"``, ...).
    :param code: overrides the class's code (must stay in the class's range).
    """

    code: int = INTERNAL_SERVER_ERROR

    def __init__(
        self,
        message: str,
        *,
        sandbox_id: str | None = None,
        attempted: str | None = None,
        code: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.sandbox_id = sandbox_id
        self.attempted = attempted
        if code is not None:
            if code // 1000 != type(self).code // 1000:
                raise ValueError(
                    f"code {code} is outside the {type(self).code // 1000}xxx range of {type(self).__name__}"
                )
            self.code = code

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        extra = "".join(
            f", {k}={v!r}"
            for k, v in (("sandbox_id", self.sandbox_id), ("attempted", self.attempted))
            if v
        )
        return f"{type(self).__name__}({self.message!r}{extra})"

    def __reduce__(self) -> tuple[Any, ...]:
        # Keep keyword-only context through pickling (multiprocessing, anyio worker processes).
        return (_rebuild, (type(self), self.message, self.sandbox_id, self.attempted, self.code))


def _rebuild(
    cls: type[RockError], message: str, sandbox_id: str | None, attempted: str | None, code: int
) -> RockError:
    err = cls.__new__(cls)
    RockError.__init__(err, message, sandbox_id=sandbox_id, attempted=attempted)
    err.code = code
    return err


# ---------------------------------------------------------------------------------------------
# 4xxx: the request is wrong


class BadRequestRockError(RockError):
    """The caller asked for something invalid or impossible (ROCK code 4000)."""

    code = BAD_REQUEST


class InvalidParameter(BadRequestRockError):
    """A field of the request has a bad value; the message names the field and the value."""

    code = 4001

    def __init__(
        self, message: str, *, field: str | None = None, value: Any = None, **kw: Any
    ) -> None:
        super().__init__(message, **kw)
        self.field = field
        self.value = value


class SandboxNotFound(BadRequestRockError):
    """No sandbox with this id (or, without ``include_all_states``, none pending or running)."""

    code = 4004


class SandboxAlreadyExists(BadRequestRockError):
    """A live sandbox already has the requested id."""

    code = 4009


class InvalidTransition(BadRequestRockError):
    """The lifecycle event is not allowed in the sandbox's current state; nothing changed.

    :param state: the state the sandbox was in (a :class:`rock_core.states.State` value).
    :param event: the rejected event (a :class:`rock_core.states.Event` value).
    """

    code = 4010

    def __init__(self, message: str, *, state: Any = None, event: Any = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.state = state
        self.event = event


class SessionNotFound(BadRequestRockError):
    """The bash session does not exist in the sandbox (never created, or closed)."""

    code = 4014


class SessionAlreadyExists(BadRequestRockError):
    """A bash session with this name already exists in the sandbox."""

    code = 4019


class PayloadTooLarge(BadRequestRockError):
    """A request body or file is larger than the configured limit."""

    code = 4013


class NotSupported(BadRequestRockError, NotImplementedError):
    """The configured backend cannot do this at all (e.g. a runtime without snapshots asked to archive).

    A :class:`NotImplementedError` too, so code that probes optional operations can catch either.
    """

    # 4005 like HTTP 405: the operation exists, this backend does not allow it.
    code = 4005


class Forbidden(BadRequestRockError):
    """The caller's role does not allow this (a tenant's key managing the operator's warm pools)."""

    # 4003 like HTTP 403: the caller is known, the act is not its to do.
    code = 4003


class QuotaExceeded(BadRequestRockError):
    """A start would take a tenant past one of its quotas (sandboxes, memory or CPUs at once)."""

    # 4029 like HTTP 429: asking again once some of the tenant's sandboxes stopped may succeed.
    code = 4029


# ---------------------------------------------------------------------------------------------
# 5xxx: rock or its backend failed


class InternalServerRockError(RockError):
    """rock or a backend failed while doing what was asked (ROCK code 5000)."""

    code = INTERNAL_SERVER_ERROR


class RuntimeFailure(InternalServerRockError):
    """The runtime (Docker, Nomad, ...) refused or failed an operation on a sandbox's unit."""

    code = 5001


class ImagePullFailed(RuntimeFailure):
    """The image could not be pulled (unknown name, no access, registry unreachable)."""

    code = 5002


class RockletUnreachable(InternalServerRockError):
    """The in-sandbox agent did not answer at the address the runtime reported."""

    code = 5003


class StartupTimeout(InternalServerRockError):
    """The sandbox did not become ready within its startup timeout."""

    code = 5004


class PluginError(InternalServerRockError):
    """A plugin failed to load or registered something invalid."""

    code = 5005


# ---------------------------------------------------------------------------------------------
# 6xxx: a command inside the sandbox failed


class CommandRockError(RockError):
    """A command run inside the sandbox failed (ROCK code 6000)."""

    code = COMMAND_ERROR


class NonZeroExitCode(CommandRockError):
    """A command checked with ``check="raise"`` exited with a non-zero code."""

    code = 6001

    def __init__(
        self, message: str, *, exit_code: int | None = None, output: str = "", **kw: Any
    ) -> None:
        super().__init__(message, **kw)
        self.exit_code = exit_code
        self.output = output


class CommandTimeout(CommandRockError):
    """A command did not finish within its timeout."""

    code = 6002


_BASES: dict[int, type[RockError]] = {
    4: BadRequestRockError,
    5: InternalServerRockError,
    6: CommandRockError,
}


def wire_code(code: int) -> int:
    """The code ROCK's clients know for rock's finer ``code``: its range's base (4004 -> 4000,
    6001 -> 6000). ROCK 1.11's ``codes`` enum holds only 2000, 4000, 5000 and 6000, and its
    ``SandboxResponse`` will not read another; rock sends the finer one beside it
    (``rock_code``)."""
    base = code - code % 1000
    return base if base in (OK, BAD_REQUEST, INTERNAL_SERVER_ERROR, COMMAND_ERROR) else code


def error_for_code(code: int | None, message: str, **kw: Any) -> RockError | None:
    """The most specific error class for a ROCK status ``code``, built with ``message``.

    Returns ``None`` for success codes (2xxx) and ``None`` codes, as ROCK's ``raise_for_code``
    does. An unknown code inside a known range maps to that range's base class.
    """
    if code is None or code // 1000 == 2:
        return None
    for cls in _all_subclasses(RockError):
        if cls.code == code:
            return cls(message, **kw)
    base = _BASES.get(code // 1000, InternalServerRockError)
    err = base(message, **kw)
    if code // 1000 in _BASES:
        err.code = code
    return err


def _all_subclasses(cls: type[RockError]) -> list[type[RockError]]:
    out: list[type[RockError]] = []
    for sub in cls.__subclasses__():
        out.append(sub)
        out.extend(_all_subclasses(sub))
    return out
