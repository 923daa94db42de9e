"""ROCK's exception names (``rock.sdk.common.exceptions``), bound to rock's one error tree.

Every name here *is* the class of :mod:`rock_core.errors` (not a look-alike subclass), so an
``except BadRequestRockError`` in ROCK user code catches what rock raises, including the more
specific errors below it (``InvalidParameter``, ``SandboxNotFound``, ``SessionNotFound``, ...).
Each error has ROCK's ``code`` (4xxx the request is wrong, 5xxx rock or its backend failed,
6xxx a command in the sandbox failed) and says which sandbox and operation it concerns.

Differences from ROCK: ``code`` is keyword-only when constructing one
(``BadRequestRockError("...", code=4001)``), and ``InvalidParameterRockException`` is
:class:`~rock_core.errors.InvalidParameter`, a :class:`BadRequestRockError` (code 4001),
where ROCK has a deprecated direct subclass of ``RockException``.
"""

from __future__ import annotations

from rock_core.actions import SandboxResponse
from rock_core.errors import (
    BadRequestRockError,
    CommandRockError,
    InternalServerRockError,
    InvalidParameter,
    RockError,
    SandboxNotFound,
    error_for_code,
)

__all__ = [
    "RockException",
    "BadRequestRockError",
    "SandboxNotFoundRockError",
    "InternalServerRockError",
    "CommandRockError",
    "InvalidParameterRockException",
    "raise_for_code",
    "from_rock_exception",
]

#: ROCK's base exception: every error rock raises on purpose.
RockException = RockError
#: ROCK's "no such sandbox" error (a :class:`BadRequestRockError`, code 4004).
SandboxNotFoundRockError = SandboxNotFound
#: ROCK's invalid-argument error: rock's :class:`~rock_core.errors.InvalidParameter` (code 4001).
InvalidParameterRockException = InvalidParameter


def raise_for_code(code: int | None, message: str) -> None:
    """Raise the error for a ROCK status ``code`` with ``message``; return for success or ``None``.

    4xxx raises :class:`BadRequestRockError` (or the more specific rock error with that exact
    code), 5xxx :class:`InternalServerRockError`, 6xxx :class:`CommandRockError`; any other
    non-success code raises an :class:`InternalServerRockError`.
    """
    error = error_for_code(code, message)
    if error is not None:
        raise error


def from_rock_exception(error: RockError) -> SandboxResponse:
    """ROCK's legacy helper: the ``SandboxResponse`` error payload (``code``, ``failure_reason``) for ``error``."""
    return SandboxResponse(code=error.code, failure_reason=str(error))
