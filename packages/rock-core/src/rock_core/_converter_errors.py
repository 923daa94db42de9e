"""How the converters report bad data: every problem of a cattrs error tree, with its path,
as one :class:`~rock_core.errors.InvalidParameter` (see :mod:`rock_core.converters`).
"""

from __future__ import annotations

from typing import Any

import cattrs
from cattrs.errors import (
    AttributeValidationNote,
    ClassValidationError,
    ForbiddenExtraKeysError,
    IterableValidationError,
    IterableValidationNote,
)

from rock_core.errors import InvalidParameter, RockError

__all__ = [
    "BAD_DATA",
    "Invalid",
    "describe_problems",
    "invalid_error",
    "join_path",
    "problems_of",
]


class Invalid(ValueError):
    """Raised by a hook: a value that does not fit its field; ``value`` is the value, for the
    error's ``value``."""

    def __init__(self, message: str, value: Any) -> None:
        super().__init__(message)
        self.value = value


def join_path(path: str, name: str) -> str:
    """``path.name``, or ``name`` at the top."""
    return f"{path}.{name}" if path else name


def problems_of(exc: BaseException, path: str) -> list[tuple[str, str, Any]]:
    """``(path, message, value)`` for every leaf error under ``exc`` (a cattrs error tree)."""
    if isinstance(exc, (ClassValidationError, IterableValidationError)):
        found: list[tuple[str, str, Any]] = []
        with_notes, without = exc.group_exceptions()
        for sub, note in with_notes:
            if isinstance(note, AttributeValidationNote):
                sub_path = join_path(path, note.name)
            else:
                sub_path = f"{path}[{note.index!r}]"
                if isinstance(note, IterableValidationNote) and note.startswith(
                    "Structuring mapping key"
                ):
                    found.extend(
                        (p, f"invalid key: {m}", v) for p, m, v in problems_of(sub, sub_path)
                    )
                    continue
            found.extend(problems_of(sub, sub_path))
        for sub in without:
            found.extend(problems_of(sub, path))
        return found
    if isinstance(exc, ForbiddenExtraKeysError):
        return [
            (path, f"extra field {name!r} not allowed", None) for name in sorted(exc.extra_fields)
        ]
    if isinstance(exc, KeyError):
        return [(path, "required field missing", None)]
    if isinstance(exc, Invalid):
        return [(path, str(exc), exc.value)]
    if isinstance(exc, InvalidParameter):
        # Raised by a model's own validation, which names its field first ("size: ..."): the
        # field goes on the path, so a nested one reads "pools[1].size: ...".
        prefix = f"{exc.field}: "
        if exc.field and exc.message.startswith(prefix):
            return [(join_path(path, exc.field), exc.message[len(prefix) :], exc.value)]
        return [(path, exc.message, exc.value)]
    return [(path, str(exc) or type(exc).__name__, None)]


def describe_problems(problems: list[tuple[str, str, Any]]) -> str:
    """The problems as one message: ``path: reason; path: reason``."""
    return "; ".join(f"{path}: {message}" if path else message for path, message, _ in problems)


def invalid_error(
    problems: list[tuple[str, str, Any]],
    *,
    error: type[InvalidParameter] = InvalidParameter,
    prefix: str = "invalid parameter: ",
) -> InvalidParameter:
    """One ``error`` for all ``problems``; ``field``/``value`` name the bad field and value when
    there is one, else ``field`` lists the bad paths."""
    if len(problems) == 1:
        field, value = (problems[0][0] or None), problems[0][2]
    else:
        field, value = (", ".join(dict.fromkeys(p for p, _, _ in problems if p)) or None), None
    return error(f"{prefix}{describe_problems(problems)}", field=field, value=value)


# What structuring can raise on bad data (anything else is a bug and propagates unchanged).
BAD_DATA = (
    cattrs.BaseValidationError,
    ForbiddenExtraKeysError,
    ValueError,
    TypeError,
    KeyError,
    RockError,
)
