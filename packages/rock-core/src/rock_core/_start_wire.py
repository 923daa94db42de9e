"""A start request read from the wire, and its spec made, each value checked once: the admin
does both for every start (``/start``, ``/start_async``, each item of ``/sandboxes/start_batch``).

:func:`register_start_request_hook` gives the wire converter a hook for
:class:`~rock_core.actions.SandboxStartRequest` and for a ``start_batch`` item
(:class:`~rock_core.actions.StartBatchItem`) that reads the usual body (a ``dict`` of the class's
fields, each value of the JSON type its field expects, as rock's and ROCK's SDKs send it) in one
pass (:func:`read_quickly`): each value checked as the converter's generated hook and the class's
``__init__`` check it, and the instance made without running those checks again. Any other body
(a number written as text, an unknown key, a missing image, a bad value) goes to the generated
hook, which makes the same instance or raises its refusal: the hand-written pass only ever
accepts, so what is refused, and how, is the generated hook's alone (``test_converters``
compares the two on any body, good or bad).

:func:`trusted_maker` makes an attrs instance from values that already passed its fields' checks
(:func:`~rock_core.converters.spec_from_start_request`'s spec, whose every value comes from a
checked request): the fields are set as given, without their converters and validators.
"""

from __future__ import annotations

import enum
import functools
import math
import operator
import types
import typing
from collections.abc import Callable
from typing import Any, TypeVar, Union

import attrs
import cattrs

from rock_core.actions import SandboxStartRequest, StartBatchItem
from rock_core.models import (
    PRIORITY_MAX,
    PRIORITY_MIN,
    NonBlankStr,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    Priority,
    SizeStr,
)
from rock_core.sizes import size_to_bytes

__all__ = [
    "QUICK_CLASSES",
    "read_quickly",
    "register_start_request_hook",
    "size_in_bytes",
    "trusted_maker",
]

T = TypeVar("T")

#: A reader's answer for a value not in the usual form: the generated hook reads the body.
_NO: Any = object()


def _string(value: Any) -> Any:
    return value if value.__class__ is str else _NO


def _non_blank(value: Any) -> Any:
    if value.__class__ is str:
        stripped = value.strip()
        if stripped:
            return stripped
    return _NO


def _non_negative_int(value: Any) -> Any:
    return value if value.__class__ is int and value >= 0 else _NO


def _positive_int(value: Any) -> Any:
    return value if value.__class__ is int and value > 0 else _NO


def _priority(value: Any) -> Any:
    return value if value.__class__ is int and PRIORITY_MIN <= value <= PRIORITY_MAX else _NO


def _positive_float(value: Any) -> Any:
    cls = value.__class__
    if cls is float or (cls is int and -(2**53) <= value <= 2**53):
        number = float(value)
        if 0 < number < math.inf:
            return number
    return _NO


def size_in_bytes(value: Any) -> int:
    """:func:`~rock_core.sizes.size_to_bytes`, remembering the sizes a few texts denote (the
    same few, ``"8g"``, ``"50G"``, come with every start).

    :raises ValueError: as ``size_to_bytes``.
    """
    if value.__class__ is str:
        known = _SIZES.get(value)
        if known is not None:
            return known
        known = size_to_bytes(value)
        if len(_SIZES) < 256:
            _SIZES[value] = known
        return known
    return size_to_bytes(value)


_SIZES: dict[str, int] = {}


def _size(value: Any) -> Any:
    if value.__class__ is str:
        try:
            size_in_bytes(value)
        except ValueError:
            return _NO
        return value
    return _NO


def _boolean(value: Any) -> Any:
    return value if value.__class__ is bool else _NO


def _string_dict(value: Any) -> Any:
    if value.__class__ is not dict:
        return _NO
    for key, item in value.items():
        if key.__class__ is not str or item.__class__ is not str:
            return _NO
    return dict(value)


def _json_dict(value: Any) -> Any:
    if value.__class__ is not dict:
        return _NO
    for key in value:
        if key.__class__ is not str:
            return _NO
    return dict(value)  # the values as sent, as the converter keeps ``Any``


def _string_list(value: Any) -> Any:
    if value.__class__ is not list:
        return _NO
    for item in value:
        if item.__class__ is not str:
            return _NO
    return list(value)


def _member(cls: type[enum.Enum]) -> Callable[[Any], Any] | None:
    by_value = {member.value: member for member in cls}
    if any(value.__class__ is not str for value in by_value):
        return None

    def read(value: Any) -> Any:
        return by_value.get(value, _NO) if value.__class__ is str else _NO

    return read


#: The reader of each field type: the value the generated hook and ``__init__`` keep, when it is
#: in the usual form; :data:`_NO` otherwise (then the generated hook reads the whole body).
_READERS: dict[Any, Callable[[Any], Any]] = {
    str: _string,
    bool: _boolean,
    NonBlankStr: _non_blank,
    SizeStr: _size,
    NonNegativeInt: _non_negative_int,
    PositiveInt: _positive_int,
    Priority: _priority,
    PositiveFloat: _positive_float,
    dict[str, str]: _string_dict,
    dict[str, Any]: _json_dict,
    list[str]: _string_list,
}


def _reader_of(hint: Any) -> tuple[Callable[[Any], Any] | None, bool]:
    """The reader of a field annotated ``hint``, and whether ``None`` is a value of it."""
    optional = False
    if typing.get_origin(hint) in (Union, types.UnionType):
        args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        if len(args) != 1 or len(typing.get_args(hint)) != 2:
            return None, False
        hint, optional = args[0], True
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return _member(hint), optional
    try:
        return _READERS.get(hint), optional
    except TypeError:  # not hashable: no reader
        return None, optional


def trusted_maker(cls: type) -> Callable[..., Any] | None:
    """A function making an instance of the slotted attrs class ``cls`` from keyword values
    already checked: each field set as given (no converter, no validator), a field left out
    given its default as ``__init__`` would; then ``__attrs_post_init__``, if any. ``None``: a
    class it cannot make (not slotted, a field not ``init`` or renamed, a default computed from
    the instance, a factory's default with a converter, a converted default that may change).
    """
    slots = cls.__dict__.get("__slots__", ())
    if not slots or "_attrs_cached_hash" in slots or hasattr(cls, "__attrs_pre_init__"):
        return None
    namespace: dict[str, Any] = {"_new": object.__new__, "_cls": cls, "_NOTHING": attrs.NOTHING}
    params, body = [], ["    new = _new(_cls)\n"]
    for field in attrs.fields(cls):
        name = field.name
        if not field.init or field.alias != name or name.startswith("_"):
            return None
        namespace[f"_set_{name}"] = getattr(cls, name).__set__
        default = _default_code(field, namespace)
        if default is None:
            return None
        if not default:
            params.append(name)
        else:
            params.append(f"{name}=_NOTHING")
            body.append(f"    if {name} is _NOTHING:\n        {default}\n")
        body.append(f"    _set_{name}(new, {name})\n")
    post_init = getattr(cls, "__attrs_post_init__", None)
    if post_init is not None:
        namespace["_post_init"] = post_init
        body.append("    _post_init(new)\n")
    body.append("    return new\n")
    exec(f"def make(*, {', '.join(params)}):\n{''.join(body)}", namespace)
    made: Callable[..., Any] = namespace["make"]
    return made


def _default_code(field: Any, namespace: dict[str, Any]) -> str | None:
    """The line setting ``field``'s value (the variable of its name) to its default as
    ``__init__`` gives it, its names put in ``namespace``; ``""``: a required field; ``None``: a
    default :func:`trusted_maker` cannot give (computed from the instance, a factory's with a
    converter, a converted one that may change)."""
    name, default = field.name, field.default
    if default is attrs.NOTHING:
        return ""
    if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
        if default.takes_self or field.converter is not None:
            return None
        namespace[f"_make_{name}"] = default.factory
        return f"{name} = _make_{name}()"
    converter = field.converter
    if isinstance(converter, attrs.Converter):
        return None
    if converter is not None:
        default = converter(default)
        try:
            hash(default)  # one value for every instance: none that may change
        except TypeError:
            return None
    namespace[f"_default_{name}"] = default
    return f"{name} = _default_{name}"


def _quick_reader(cls: type) -> Callable[[Any], Any] | None:
    """The function :func:`read_quickly` calls for ``cls`` (a ``dict`` in, an instance or
    ``None`` out), one generated line or few a field; ``None``: a class :func:`trusted_maker`
    cannot make."""
    if trusted_maker(cls) is None:
        return None
    hints = typing.get_type_hints(cls)
    fields = attrs.fields(cls)
    namespace: dict[str, Any] = {
        "_new": object.__new__,
        "_cls": cls,
        "_NOTHING": attrs.NOTHING,
        "_NO": _NO,
        "_names": frozenset(f.name for f in fields),
    }
    body = ["    if not data.keys() <= _names:\n        return None\n", "    get = data.get\n"]
    body.append("    new = _new(_cls)\n")
    for field in fields:
        name = field.name
        namespace[f"_set_{name}"] = getattr(cls, name).__set__
        reader, optional = _reader_of(hints[name])
        default = _default_code(field, namespace)
        assert default is not None  # (trusted_maker made the same checks)
        body.append(f"    {name} = get({name!r}, _NOTHING)\n    if {name} is _NOTHING:\n")
        body.append(f"        {default or 'return None'}\n")
        if optional:
            body.append(f"    elif {name} is None:\n        pass\n")
        if reader is None:
            body.append("    else:\n        return None\n")
        else:
            namespace[f"_read_{name}"] = reader
            body.append(f"    else:\n        {name} = _read_{name}({name})\n")
            body.append(f"        if {name} is _NO:\n            return None\n")
        body.append(f"    _set_{name}(new, {name})\n")
    post_init = getattr(cls, "__attrs_post_init__", None)
    if post_init is not None:
        namespace["_post_init"] = post_init
        body.append("    _post_init(new)\n")
    body.append("    return new\n")
    exec(f"def read(data):\n{''.join(body)}", namespace)
    read: Callable[[Any], Any] = namespace["read"]
    return read


def _quick_of(cls: type) -> Callable[[Any], Any] | None:
    if cls not in _quick:
        _quick[cls] = _quick_reader(cls)
    return _quick[cls]


_quick: dict[type, Callable[[Any], Any] | None] = {}


def read_quickly(cls: type[T], data: Any) -> T | None:
    """The ``cls`` that ``data`` (decoded JSON) describes, when it is in the usual form (a
    ``dict`` of ``cls``'s fields, each value of the JSON type its field expects): what the wire
    converter's generated hook makes of it. ``None``: a body not in that form, for the generated
    hook to read (or refuse)."""
    read = _quick[cls] if cls in _quick else _quick_of(cls)
    if read is None or data.__class__ is not dict:
        return None
    made: T | None = read(data)
    return made


#: The classes :func:`register_start_request_hook` reads by hand: a start request, and an item of
#: ``/sandboxes/start_batch`` (whose ``request`` the admin then reads as a start request).
QUICK_CLASSES = (SandboxStartRequest, StartBatchItem)


def register_start_request_hook(converter: cattrs.Converter) -> None:
    """Read each of :data:`QUICK_CLASSES` (that class only, not its subclasses) on ``converter``
    (the wire one) by :func:`read_quickly`, else by the converter's generated hook; before any
    hook of a model holding them is made."""
    for cls in QUICK_CLASSES:
        if _quick_of(cls) is None:  # pragma: no cover - a class its maker cannot make
            raise TypeError(f"{cls.__name__} cannot be read by hand (see trusted_maker)")
        converter.register_structure_hook_func(
            functools.partial(operator.is_, cls), _hook(cls, converter.get_structure_hook(cls))
        )


def _hook(cls: type[T], generated: Callable[[Any, Any], T]) -> Callable[[Any, Any], T]:
    def structure(value: Any, _: Any = None) -> T:
        made = read_quickly(cls, value)
        return generated(value, cls) if made is None else made

    return structure
