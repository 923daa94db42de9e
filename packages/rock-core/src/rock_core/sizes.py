"""Sizes and CPU counts as users write them: ``"8g"``, ``"512m"``, ``"20G"``, ``2``, ``"0.5"``.

Sizes are 1024-based, as in ROCK (``rock/utils/format.py``): ``k`` is KiB, ``g`` is GiB. A unit
may carry a trailing ``b``, ``i`` or ``ib`` (``"4gb"``, ``"2Gi"``, ``"2GiB"``), case does not
matter, and a bare number (or an ``int``) is a count of bytes::

    >>> parse_size("8g", field="memory")
    8589934592
    >>> parse_size("1.5k", field="disk")
    1536
    >>> format_size(8 * 1024**3)
    '8.00g'

A value that is not a size raises :class:`~rock_core.errors.InvalidParameter` naming the field and
the value, so the caller can hand the error straight back to whoever sent it. The ``*_to_*``
functions do the same checks without knowing a field name: they raise :class:`ValueError` with
the reason alone, for callers (the cattrs converters) that add the field's path themselves.
"""

from __future__ import annotations

import math
import re
from typing import Any

from rock_core.errors import InvalidParameter

__all__ = [
    "KiB",
    "MiB",
    "GiB",
    "TiB",
    "parse_size",
    "size_to_bytes",
    "format_size",
    "format_bytes",
    "parse_cpus",
    "cpus_to_float",
    "describe_value",
]

KiB = 1024
MiB = 1024**2
GiB = 1024**3
TiB = 1024**4

_MULTIPLIERS = {"": 1, "b": 1, "k": KiB, "m": MiB, "g": GiB, "t": TiB}

# A non-negative decimal number, optional blanks, then an optional unit letter with an optional
# "b", "i" or "ib" after it ("8g", "8 GB", "8Gi", "8GiB"); a lone "b" means bytes.
_SIZE = re.compile(
    r"^(?P<number>\d+(?:\.\d*)?|\.\d+)\s*(?:(?P<unit>[kmgt])(?:ib|i|b)?|b)?$",
    re.IGNORECASE | re.ASCII,
)

_SIZE_HINT = "expected a number with an optional unit b, k, m, g, t, like '8g'"


def describe_value(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters, for error messages that quote user input."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def size_to_bytes(value: str | int) -> int:
    """The number of bytes ``value`` denotes; like :func:`parse_size` without a field name.

    :raises ValueError: ``value`` is not a size; the message quotes it and says what is expected.
    """
    # bool is an int subclass; True bytes is never what anyone meant.
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise ValueError(f"invalid size {describe_value(value)} ({_SIZE_HINT})")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"invalid size {value!r} (must not be negative)")
        return value
    match = _SIZE.match(value.strip())
    if match is None:
        raise ValueError(f"invalid size {describe_value(value)} ({_SIZE_HINT})")
    unit = (match["unit"] or "").lower()
    number = float(match["number"])
    # Truncate fractional bytes, as ROCK does ("1.5b" is 1 byte).
    return int(number * _MULTIPLIERS[unit])


def parse_size(value: str | int, *, field: str) -> int:
    """Parse a size such as ``"8g"``, ``"512m"``, ``"2Gi"``, ``"1024"`` or ``1024`` into bytes.

    :param value: the size as the user wrote it; an ``int`` is already a count of bytes.
    :param field: the name of the field it came from, used in the error.
    :raises InvalidParameter: ``value`` is blank, negative, not a number, has an unknown unit, or
        is not a ``str``/``int`` (``bool``, ``None``, ``float``); the message names ``field`` and
        the value, and the error's ``field``/``value`` attributes are set.
    """
    try:
        return size_to_bytes(value)
    except ValueError as exc:
        raise InvalidParameter(f"{field}: {exc}", field=field, value=value) from None


def format_size(n: int) -> str:
    """ROCK's normalised form of a size in bytes: GiB with two decimals and a ``g``.

    ``format_size(8 * GiB) == "8.00g"``, ``format_size(512 * MiB) == "0.50g"``.
    """
    return f"{n / GiB:.2f}g"


def format_bytes(n: int) -> str:
    """A size in bytes for people to read: ``"512 B"``, ``"1.5 KiB"``, ``"8 GiB"``.

    Uses the largest binary unit that keeps the number at least 1, with at most one decimal
    (dropped when it is ``.0``).
    """
    for unit, size in (("TiB", TiB), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if abs(n) >= size:
            text = f"{n / size:.1f}".removesuffix(".0")
            return f"{text} {unit}"
    return f"{n} B"


def cpus_to_float(value: Any) -> float:
    """A CPU count as a positive finite ``float``; like :func:`parse_cpus` without a field name.

    Accepts ``int``, ``float`` and strings holding a number (``"0.5"``).

    :raises ValueError: ``value`` is not a positive finite number.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"expected a positive number, got {describe_value(value)}")
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"expected a positive number, got {describe_value(value)}") from None
    if not math.isfinite(number) or number <= 0:
        raise ValueError(f"expected a positive number, got {describe_value(value)}")
    return number


def parse_cpus(value: Any, *, field: str) -> float:
    """Parse a CPU count (``2``, ``0.5``, ``"1.5"``) into a positive float.

    :param field: the name of the field it came from, used in the error.
    :raises InvalidParameter: ``value`` is zero, negative, NaN, infinite, a ``bool``, ``None`` or a
        string that is not a number; the message names ``field`` and the value.
    """
    try:
        return cpus_to_float(value)
    except ValueError as exc:
        raise InvalidParameter(f"{field}: {exc}", field=field, value=value) from None
