"""The cattrs hooks of rock's converters (see :mod:`rock_core.converters`): strict scalars,
constrained types, enums, literals, collections and attrs classes, and :func:`make_converter`.

Each hook raises :class:`~._converter_errors.Invalid` with the reason and the value as sent.
"""

from __future__ import annotations

import enum
import functools
import math
import re
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Literal, get_args, get_origin

import attrs
import cattrs
from cattrs.cols import (
    homogenous_tuple_structure_factory,
    is_mapping,
    is_sequence,
    list_structure_factory,
    mapping_structure_factory,
    mapping_unstructure_factory,
)
from cattrs.gen import make_dict_structure_fn

from rock_core._converter_errors import Invalid
from rock_core.actions import CommandLine
from rock_core.models import CHECKS, ByteSize, SizeStr
from rock_core.sizes import describe_value

__all__ = ["make_converter"]


# ---------------------------------------------------------------------------------------------
# Scalar hooks: strict about types, forgiving only where JSON or ROCK's clients need it
# (numbers written as strings, as pydantic accepts; port-map keys, which JSON makes strings).

_INT_TEXT = re.compile(r"^\s*[+-]?\d+\s*$", re.ASCII)


def _structure_str(value: Any, _: Any = None) -> str:
    if isinstance(value, str):
        return value
    raise Invalid(f"expected a string, got {describe_value(value)}", value)


def _structure_int(value: Any, _: Any = None) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and _INT_TEXT.match(value):
        return int(value)
    raise Invalid(f"expected an integer, got {describe_value(value)}", value)


def _structure_float(value: Any, _: Any = None) -> float:
    number: float | None = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            number = None
    if number is None or not math.isfinite(number):
        raise Invalid(f"expected a number, got {describe_value(value)}", value)
    return number


_BOOL_TEXT = {"true": True, "false": False}


def _structure_bool(value: Any, _: Any = None) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    # Query strings carry booleans as text; ROCK's SDK sends Python's "True"/"False".
    if isinstance(value, str) and value.strip().lower() in _BOOL_TEXT:
        return _BOOL_TEXT[value.strip().lower()]
    raise Invalid(f"expected true or false, got {describe_value(value)}", value)


def _structure_datetime(value: Any, _: Any = None) -> datetime:
    if isinstance(value, datetime):
        return value
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            pass
    raise Invalid(f"expected an ISO 8601 timestamp, got {describe_value(value)}", value)


def _unstructure_datetime(value: datetime) -> str:
    return value.isoformat()


def _structure_command_line(value: Any, _: Any = None) -> str | list[str]:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return list(value)
    raise Invalid(f"expected a string or a list of strings, got {describe_value(value)}", value)


_BASE_HOOKS: Mapping[type, Callable[[Any, Any], Any]] = {
    str: _structure_str,
    int: _structure_int,
    float: _structure_float,
    bool: _structure_bool,
}


def _as_sent(value: Any, _: Any = None) -> Any:
    return value


def _constrained_hook(kind: Any) -> Callable[[Any, Any], Any]:
    # A ByteSize is read from text or a number by its check alone ("10m" is no int).
    base = _as_sent if kind is ByteSize else _BASE_HOOKS[kind.__supertype__]
    check = CHECKS[kind]

    def structure(value: Any, _: Any = None) -> Any:
        if kind is SizeStr and isinstance(value, int) and not isinstance(value, bool):
            value = str(value)  # a size in bytes, sent as a JSON number
        typed = base(value, None)
        try:
            return check(typed)
        except ValueError as exc:
            reason = str(exc)
        try:
            check(value)  # again on the value as sent, so the message quotes 0 rather than 0.0
        except ValueError as exc:
            reason = str(exc)
        raise Invalid(reason, value)

    return structure


# ---------------------------------------------------------------------------------------------
# Hook factories for enums, literals, collections and attrs classes


def _is_enum(t: Any) -> bool:
    return isinstance(t, type) and issubclass(t, enum.Enum)


@functools.cache
def _enum_hook(cls: type[enum.Enum]) -> Callable[[Any, Any], Any]:
    choices = ", ".join(repr(m.value) for m in cls)

    def structure(value: Any, _: Any = None) -> enum.Enum:
        if isinstance(value, cls):
            return value
        for member in cls:
            # Compare type too, so that 1 does not match True and "1" does not match 1.
            if type(member.value) is type(value) and member.value == value:
                return member
        raise Invalid(f"expected one of {choices}, got {describe_value(value)}", value)

    return structure


def _unstructure_enum(value: Any) -> Any:
    return value.value if isinstance(value, enum.Enum) else value


def _scalar_or_enum(hook: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    # cattrs finds the hook of ``str`` for a str-valued enum (class dispatch follows the MRO
    # before any predicate is asked), so the scalar hook hands enums over to the enum hook.
    def structure(value: Any, cl: Any = None) -> Any:
        if _is_enum(cl):
            return _enum_hook(cl)(value, cl)
        return hook(value, cl)

    return structure


def _is_literal(t: Any) -> bool:
    return get_origin(t) is Literal


def _literal_hook(t: Any) -> Callable[[Any, Any], Any]:
    allowed = get_args(t)
    choices = ", ".join(repr(a) for a in allowed)

    def structure(value: Any, _: Any = None) -> Any:
        for option in allowed:
            if type(option) is type(value) and option == value:
                return option
        raise Invalid(f"expected one of {choices}, got {describe_value(value)}", value)

    return structure


def _sequence_hook_factory(t: Any, converter: cattrs.Converter) -> Callable[[Any, Any], Any]:
    if get_origin(t) is tuple or t is tuple:
        inner = homogenous_tuple_structure_factory(t, converter)
    else:
        inner = list_structure_factory(t, converter)

    def structure(value: Any, cl: Any = t) -> Any:
        # Without this check a string would be split into a list of characters.
        if not isinstance(value, (list, tuple)):
            raise Invalid(f"expected a list, got {describe_value(value)}", value)
        return inner(value, cl)

    return structure


def _mapping_hook_factory(t: Any, converter: cattrs.Converter) -> Callable[[Any, Any], Any]:
    inner = mapping_structure_factory(t, converter)

    def structure(value: Any, cl: Any = t) -> Any:
        if not isinstance(value, Mapping):
            raise Invalid(f"expected an object, got {describe_value(value)}", value)
        return inner(value, cl)

    return structure


def _is_int_like(t: Any) -> bool:
    return t is int or getattr(t, "__supertype__", None) is int


def _is_int_keyed_mapping(t: Any) -> bool:
    args = get_args(t)
    return is_mapping(t) and len(args) == 2 and _is_int_like(args[0])


def _int_keyed_unstructure_factory(t: Any, converter: cattrs.Converter) -> Callable[[Any], Any]:
    # JSON object keys are strings: write {"22555": 32768}, as ROCK does.
    return mapping_unstructure_factory(t, converter, key_handler=_key_text)


def _key_text(key: Any, _: Any = None) -> str:
    return str(key)


def _attrs_hook_factory(cls: type, converter: cattrs.Converter) -> Callable[[Any, Any], Any]:
    inner: Callable[[Any, Any], Any] = make_dict_structure_fn(cls, converter)

    def structure(value: Any, cl: Any = cls) -> Any:
        if not isinstance(value, Mapping):
            raise Invalid(f"expected an object, got {describe_value(value)}", value)
        return inner(value, cl)

    return structure


def make_converter(*, forbid_extra_keys: bool) -> cattrs.Converter:
    """A converter with rock's hooks (see the module docstring).

    :param forbid_extra_keys: reject unknown keys in objects (inbound HTTP) or skip them (store,
        and a client reading a newer server's responses).
    """
    converter = cattrs.Converter(
        detailed_validation=True,
        forbid_extra_keys=forbid_extra_keys,
        # JSON has no tuples: write every sequence as a list.
        unstruct_collection_overrides={tuple: list},
    )
    for base, hook in _BASE_HOOKS.items():
        converter.register_structure_hook(base, _scalar_or_enum(hook))
    converter.register_structure_hook(datetime, _structure_datetime)
    converter.register_unstructure_hook(datetime, _unstructure_datetime)
    converter.register_structure_hook(CommandLine, _structure_command_line)
    for kind in CHECKS:
        converter.register_structure_hook(kind, _constrained_hook(kind))
    converter.register_structure_hook_factory(_is_enum, _enum_hook)
    converter.register_unstructure_hook_factory(_is_enum, lambda _: _unstructure_enum)
    # A str-valued enum is a str: cattrs' class dispatch finds the str hook (identity) before any
    # enum hook, so the str hook itself writes enum members as their values.
    converter.register_unstructure_hook(str, _unstructure_enum)
    converter.register_structure_hook_factory(_is_literal, _literal_hook)
    converter.register_structure_hook_factory(is_sequence, _sequence_hook_factory)
    converter.register_structure_hook_factory(is_mapping, _mapping_hook_factory)
    converter.register_unstructure_hook_factory(
        _is_int_keyed_mapping, _int_keyed_unstructure_factory
    )
    converter.register_structure_hook_factory(attrs.has, _attrs_hook_factory)
    return converter
