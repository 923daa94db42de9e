"""The rocklet's exceptions and how they travel over HTTP.

Errors a client can act on are :class:`RockletError` subclasses. The server turns any uncaught
exception into ROCK's contract: HTTP 511 with ``{"rockletexception": {message, class_path,
traceback, extra_info}}``. ROCK's own exception names keep ROCK's ``class_path``
(``rock.rocklet.exceptions.<Name>``), so a client that dispatches on it keeps working; the
exceptions ROCK does not have use the same module path. Errors in the request itself
(:class:`BadRequest`) are HTTP 400 ``{"detail": ...}`` instead.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds at start; annotations are strings anyway
    from typing import Any

# ROCK raises its rocklet exceptions from this module; class_path keeps naming it.
ROCK_EXCEPTIONS_MODULE = "rock.rocklet.exceptions"


class RockletError(Exception):
    """Base of every error the rocklet raises on purpose.

    :param message: what went wrong, in words a user can act on.
    :param extra_info: structured details sent in ``rockletexception.extra_info``.
    """

    def __init__(self, message: str, *, extra_info: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.extra_info = dict(extra_info or {})

    @classmethod
    def class_path(cls) -> str:
        """The dotted name sent as ``class_path`` (ROCK's module, this class's name)."""
        return ROCK_EXCEPTIONS_MODULE + "." + cls.__name__


class SessionExistsError(RockletError, ValueError):
    """``create_session`` was asked for a name that is already taken."""


class SessionDoesNotExistError(RockletError, ValueError):
    """The named session was never created, was closed, or its shell has exited."""


class SessionNotInitializedError(RockletError, RuntimeError):
    """The session's shell could not be started (or did not reach its first prompt)."""


class NonZeroExitCodeError(RockletError, RuntimeError):
    """A command run with ``check="raise"`` exited with a non-zero code."""


class CommandTimeoutError(RockletError, RuntimeError, TimeoutError):
    """A command ran past its ``timeout``; a session was interrupted back to its prompt."""


class NoExitCodeError(RockletError, RuntimeError):
    """The exit code of a session command could not be read."""


class BashIncorrectSyntaxError(RockletError, RuntimeError):
    """The command is not valid bash; nothing of it was run."""


class SessionExitedError(RockletError, RuntimeError):
    """The session's shell exited (``exit``, killed) while running a command; the session is gone."""


class FileDecodeError(RockletError, ValueError):
    """A file is not valid text in the requested encoding."""


class ProcessDoesNotExistError(RockletError, ValueError):
    """No background process has the given id."""


class EnvError(RockletError, RuntimeError):
    """An environment of the ``/env/*`` channel failed; ``extra_info["kind"]`` says how
    (``unknown_env``, ``missing_dependency``, ``missing_data``, ``episode_ended``, ``env_died``,
    ``timeout``, ``no_env``, ``bad_request``, ``env_error``, ``runtime``)."""


class BadRequest(Exception):
    """The request itself is malformed: HTTP ``status`` (400 by default) with ``{"detail": ...}``."""

    def __init__(self, detail: str, status: int = 400) -> None:
        super().__init__(detail)
        self.detail = detail
        self.status = status


def class_path_of(exc: BaseException) -> str:
    """The ``class_path`` for ``exc``: ROCK's module for rocklet errors, else module.qualname."""
    if isinstance(exc, RockletError):
        return exc.class_path()
    cls = type(exc)
    return cls.__module__ + "." + cls.__qualname__
