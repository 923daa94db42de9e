"""Constrained scalar types: ``NewType``\\ s whose annotation says which check a value must pass.

At run time they are plain ``str``/``int``/``float``. :data:`CHECKS` holds each type's check;
the converters (:mod:`rock_core.converters`) run it on input, and :func:`constrained` makes attrs
run it when a model is built in Python. :func:`must` is the validator for a rule no type says.
A failed check raises :class:`~rock_core.errors.InvalidParameter` naming the field and the value.

Import them from :mod:`rock_core.models`, which re-exports them with the models that use them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, NewType, NoReturn, TypeGuard

import attrs

from rock_core.errors import InvalidParameter
from rock_core.sizes import describe_value, size_to_bytes

__all__ = [
    "NonBlankStr",
    "SizeStr",
    "ByteSize",
    "NonNegativeInt",
    "PositiveInt",
    "NonNegativeFloat",
    "Priority",
    "PRIORITY_MIN",
    "PRIORITY_MAX",
    "PRIORITY_NORMAL",
    "PositiveFloat",
    "Port",
    "PortMapping",
    "CHECKS",
    "constrained",
    "must",
]

#: A string that is not empty once surrounding blanks are stripped (and is stored stripped), like
#: ROCK's ``NonBlankStr`` for sandbox ids and image names.
NonBlankStr = NewType("NonBlankStr", str)
#: A size as the user wrote it (``"8g"``, ``"512m"``); kept as text, checked with
#: :func:`rock_core.sizes.size_to_bytes`.
SizeStr = NewType("SizeStr", str)
#: A count of bytes that may be written as a size (``"10m"``) or as a number (``10485760``);
#: kept as the count. For settings (``max_json_body``), where a size is only ever used as bytes.
ByteSize = NewType("ByteSize", int)
#: An ``int`` ``>= 0`` (seconds, minutes, GPU counts).
NonNegativeInt = NewType("NonNegativeInt", int)
#: An ``int`` ``> 0`` (sizes in bytes).
PositiveInt = NewType("PositiveInt", int)
#: A finite ``float`` ``> 0`` (CPU counts, timeouts).
PositiveFloat = NewType("PositiveFloat", float)
#: A finite ``float`` ``>= 0`` (intervals where 0 turns something off).
NonNegativeFloat = NewType("NonNegativeFloat", float)
#: A TCP port, 1..65535.
Port = NewType("Port", int)
#: A start's priority, :data:`PRIORITY_MIN`..:data:`PRIORITY_MAX` (higher starts first).
Priority = NewType("Priority", int)
#: The lowest and highest start priorities, and the default ("normal").
PRIORITY_MIN, PRIORITY_MAX, PRIORITY_NORMAL = 0, 9, 5
#: Container port -> host port (published on 127.0.0.1 by the local runtimes). In JSON the keys
#: are strings (``{"22555": 32768}``), as JSON requires and ROCK sends.
PortMapping = dict[Port, Port]


def _is_int(value: Any) -> TypeGuard[int]:
    # bool is an int subclass, but True is never meant as a count.
    return isinstance(value, int) and not isinstance(value, bool)


def _check_non_blank(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {describe_value(value)}")
    stripped = value.strip()
    if not stripped:
        raise ValueError("must not be blank")
    return stripped


def _check_size(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a size like '8g', got {describe_value(value)}")
    size_to_bytes(value)
    return value


def _check_byte_size(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(
            f"expected a size like '10m' or a number of bytes, got {describe_value(value)}"
        )
    return size_to_bytes(value)  # its ValueError quotes the value and says what is expected


def _check_non_negative_int(value: Any) -> int:
    if not _is_int(value) or value < 0:
        raise ValueError(f"expected an integer >= 0, got {describe_value(value)}")
    return value


def _check_positive_int(value: Any) -> int:
    if not _is_int(value) or value <= 0:
        raise ValueError(f"expected an integer > 0, got {describe_value(value)}")
    return value


def _check_positive_float(value: Any) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value <= 0:
        raise ValueError(f"expected a number > 0, got {describe_value(value)}")
    return float(value)


def _check_priority(value: Any) -> int:
    if not _is_int(value) or not PRIORITY_MIN <= value <= PRIORITY_MAX:
        raise ValueError(
            f"expected a priority {PRIORITY_MIN}..{PRIORITY_MAX} (higher starts first, {PRIORITY_NORMAL} is normal), "
            f"got {describe_value(value)}"
        )
    return value


def _check_non_negative_float(value: Any) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value < 0:
        raise ValueError(f"expected a number >= 0, got {describe_value(value)}")
    return float(value)


def _check_port(value: Any) -> int:
    if not _is_int(value) or not 1 <= value <= 65535:
        raise ValueError(f"expected a port number 1..65535, got {describe_value(value)}")
    return value


#: The check for each constrained type. It takes a value already of the base type (or anything,
#: when a model is built in Python), returns the value to keep (stripped, for
#: :data:`NonBlankStr`) and raises :class:`ValueError` with the reason, without a field name.
CHECKS: Mapping[Any, Callable[[Any], Any]] = MappingProxyType(
    {
        NonBlankStr: _check_non_blank,
        SizeStr: _check_size,
        ByteSize: _check_byte_size,
        NonNegativeInt: _check_non_negative_int,
        PositiveInt: _check_positive_int,
        PositiveFloat: _check_positive_float,
        NonNegativeFloat: _check_non_negative_float,
        Port: _check_port,
        Priority: _check_priority,
    }
)


def _strip(value: Any) -> Any:
    return value.strip() if isinstance(value, str) else value


def _size_text(value: Any) -> Any:
    # A size given as a count of bytes is kept as text, so it serialises like any other size.
    return str(value) if _is_int(value) else value


def _byte_count(value: Any) -> Any:
    # A size that parses becomes its count; anything else is left for the check to refuse.
    try:
        return _check_byte_size(value)
    except ValueError:
        return value


_CONVERTERS: Mapping[Any, Callable[[Any], Any]] = {
    NonBlankStr: _strip,
    SizeStr: _size_text,
    ByteSize: _byte_count,
}


def _refuse(
    error: type[InvalidParameter], attribute: attrs.Attribute[Any], reason: str, value: Any
) -> NoReturn:
    raise error(f"{attribute.name}: {reason}", field=attribute.name, value=value)


def constrained(kind: Any, *, optional: bool = False, **kwargs: Any) -> Any:
    """An ``attrs.field`` that runs the :data:`CHECKS` entry of ``kind`` on construction.

    :param kind: one of the constrained ``NewType``\\ s above (the field's annotation).
    :param optional: ``None`` is accepted too (for ``kind | None`` fields).
    :param kwargs: passed to :func:`attrs.field` (``default``, ``repr``, ...).

    A bad value raises :class:`~rock_core.errors.InvalidParameter` with ``field`` and ``value``.
    """
    check = CHECKS[kind]

    def validate(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value is None and optional:
            return
        try:
            check(value)
        except ValueError as exc:
            reason = str(exc)
        else:
            return
        _refuse(InvalidParameter, attribute, reason, value)

    converter = _CONVERTERS.get(kind)
    if converter is not None:
        kwargs["converter"] = converter
    return attrs.field(validator=validate, **kwargs)


def must(
    test: Callable[[Any], bool],
    expected: str,
    *,
    error: type[InvalidParameter] = InvalidParameter,
    secret: bool = False,
) -> Callable[[Any, attrs.Attribute[Any], Any], None]:
    """An attrs validator for a rule no type says (a name's pattern, a digest's form).

    A value for which ``test`` is false raises ``error`` naming the field and the value:
    ``tenant: expected a name of letters and digits, got 'a b'``.

    :param expected: what a good value is, after "expected".
    :param error: :class:`~rock_core.errors.InvalidParameter` or a subclass the caller expects.
    :param secret: the value is a secret (an API key): the message says so instead of showing
        it, and the error does not keep it.
    """

    def validate(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if not test(value):
            shown = "a value not shown (a secret)" if secret else describe_value(value)
            _refuse(
                error, attribute, f"expected {expected}, got {shown}", None if secret else value
            )

    return validate
