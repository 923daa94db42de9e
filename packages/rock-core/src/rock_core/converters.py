"""JSON in and out of rock's models: one cattrs converter per boundary.

``wire``
    The HTTP JSON of the admin API and the rocklet (the models of :mod:`rock_core.actions`).
    Input comes from outside, so unknown keys are an error, types are checked strictly (a
    ``str`` field does not turn ``5`` into ``"5"``, a ``bool`` field does not turn ``"no"`` into
    ``True``), and every bad field is reported at once with its path.
``store``
    The engine's JSON blobs (:class:`~rock_core.models.SandboxRecord` and what it holds). The
    same types, but unknown keys are skipped, so an older rock reads a newer rock's rows.

Both write datetimes as ISO 8601 strings, enums by value, tuples as lists, and mappings keyed by
ports with string keys (``{"22555": 32768}``), as JSON requires.

Errors are translated once, here. Bad wire input raises one
:class:`~rock_core.errors.InvalidParameter` whose message lists every problem with its path::

    >>> from rock_core.actions import SandboxStartRequest
    >>> structure_wire({"image": "python:3.11", "cpus": "?", "x": 1}, SandboxStartRequest)
    Traceback (most recent call last):
    ...
    rock_core.errors.InvalidParameter: invalid parameter: cpus: expected a number, got '?'; extra field 'x' not allowed

A stored blob that cannot be read raises :class:`~rock_core.errors.InternalServerRockError`
(the store is rock's own data: a bad row is rock's fault, not the caller's).
"""

from __future__ import annotations

import enum
import functools
import math
import re
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Literal, NoReturn, TypeVar, get_args, get_origin

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
from cattrs.errors import (
    AttributeValidationNote,
    ClassValidationError,
    ForbiddenExtraKeysError,
    IterableValidationError,
    IterableValidationNote,
)
from cattrs.gen import make_dict_structure_fn

from rock_core.actions import CommandLine, SandboxStartRequest
from rock_core.errors import InternalServerRockError, InvalidParameter, RockError
from rock_core.models import CHECKS, ByteSize, SandboxSpec, SizeStr
from rock_core.sizes import cpus_to_float, describe_value, size_to_bytes

__all__ = [
    "wire",
    "wire_lenient",
    "store",
    "make_converter",
    "structure_wire",
    "unstructure_wire",
    "structure_store",
    "unstructure_store",
    "structure_value",
    "structure_fields",
    "checked",
    "READ_AS",
    "read_types",
    "structure_options",
    "spec_from_start_request",
    "NETWORK_MODES",
]

T = TypeVar("T")


class _Invalid(ValueError):
    """A value that does not fit its field; ``value`` is the value, for the error's ``value``."""

    def __init__(self, message: str, value: Any) -> None:
        super().__init__(message)
        self.value = value


# ---------------------------------------------------------------------------------------------
# Scalar hooks: strict about types, forgiving only where JSON or ROCK's clients need it
# (numbers written as strings, as pydantic accepts; port-map keys, which JSON makes strings).

_INT_TEXT = re.compile(r"^\s*[+-]?\d+\s*$", re.ASCII)


def _structure_str(value: Any, _: Any = None) -> str:
    if isinstance(value, str):
        return value
    raise _Invalid(f"expected a string, got {describe_value(value)}", value)


def _structure_int(value: Any, _: Any = None) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and _INT_TEXT.match(value):
        return int(value)
    raise _Invalid(f"expected an integer, got {describe_value(value)}", value)


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
        raise _Invalid(f"expected a number, got {describe_value(value)}", value)
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
    raise _Invalid(f"expected true or false, got {describe_value(value)}", value)


def _structure_datetime(value: Any, _: Any = None) -> datetime:
    if isinstance(value, datetime):
        return value
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            pass
    raise _Invalid(f"expected an ISO 8601 timestamp, got {describe_value(value)}", value)


def _unstructure_datetime(value: datetime) -> str:
    return value.isoformat()


def _structure_command_line(value: Any, _: Any = None) -> str | list[str]:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return list(value)
    raise _Invalid(f"expected a string or a list of strings, got {describe_value(value)}", value)


_BASE_HOOKS: Mapping[type, Callable[[Any, Any], Any]] = {
    str: _structure_str,
    int: _structure_int,
    float: _structure_float,
    bool: _structure_bool,
}


def _constrained_hook(kind: Any) -> Callable[[Any, Any], Any]:
    # A ByteSize is read from text or a number by its check alone ("10m" is no int).
    base = (lambda value: value) if kind is ByteSize else _BASE_HOOKS[kind.__supertype__]
    check = CHECKS[kind]

    def structure(value: Any, _: Any = None) -> Any:
        if kind is SizeStr and isinstance(value, int) and not isinstance(value, bool):
            value = str(value)  # a size in bytes, sent as a JSON number
        typed = base(value)
        try:
            return check(typed)
        except ValueError as exc:
            reason = str(exc)
        try:
            check(value)  # again on the value as sent, so the message quotes 0 rather than 0.0
        except ValueError as exc:
            reason = str(exc)
        raise _Invalid(reason, value)

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
        raise _Invalid(f"expected one of {choices}, got {describe_value(value)}", value)

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
        raise _Invalid(f"expected one of {choices}, got {describe_value(value)}", value)

    return structure


def _sequence_hook_factory(t: Any, converter: cattrs.Converter) -> Callable[[Any, Any], Any]:
    if get_origin(t) is tuple or t is tuple:
        inner = homogenous_tuple_structure_factory(t, converter)
    else:
        inner = list_structure_factory(t, converter)

    def structure(value: Any, cl: Any = t) -> Any:
        # Without this check a string would be split into a list of characters.
        if not isinstance(value, (list, tuple)):
            raise _Invalid(f"expected a list, got {describe_value(value)}", value)
        return inner(value, cl)

    return structure


def _mapping_hook_factory(t: Any, converter: cattrs.Converter) -> Callable[[Any, Any], Any]:
    inner = mapping_structure_factory(t, converter)

    def structure(value: Any, cl: Any = t) -> Any:
        if not isinstance(value, Mapping):
            raise _Invalid(f"expected an object, got {describe_value(value)}", value)
        return inner(value, cl)

    return structure


def _is_int_like(t: Any) -> bool:
    return t is int or getattr(t, "__supertype__", None) is int


def _is_int_keyed_mapping(t: Any) -> bool:
    args = get_args(t)
    return is_mapping(t) and len(args) == 2 and _is_int_like(args[0])


def _int_keyed_unstructure_factory(t: Any, converter: cattrs.Converter) -> Callable[[Any], Any]:
    # JSON object keys are strings: write {"22555": 32768}, as ROCK does.
    return mapping_unstructure_factory(t, converter, key_handler=str)


def _attrs_hook_factory(cls: type, converter: cattrs.Converter) -> Callable[[Any, Any], Any]:
    inner = make_dict_structure_fn(cls, converter)

    def structure(value: Any, cl: Any = cls) -> Any:
        if not isinstance(value, Mapping):
            raise _Invalid(f"expected an object, got {describe_value(value)}", value)
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


#: Inbound HTTP JSON: unknown keys rejected.
wire = make_converter(forbid_extra_keys=True)
#: HTTP JSON read by a client from a server that may be newer: unknown keys skipped.
wire_lenient = make_converter(forbid_extra_keys=False)
#: The engine's stored JSON blobs: unknown keys skipped (forward compatibility).
store = make_converter(forbid_extra_keys=False)


# ---------------------------------------------------------------------------------------------
# Error translation


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _problems(exc: BaseException, path: str) -> list[tuple[str, str, Any]]:
    """``(path, message, value)`` for every leaf error under ``exc`` (a cattrs error tree)."""
    if isinstance(exc, (ClassValidationError, IterableValidationError)):
        found: list[tuple[str, str, Any]] = []
        with_notes, without = exc.group_exceptions()
        for sub, note in with_notes:
            if isinstance(note, AttributeValidationNote):
                sub_path = _join(path, note.name)
            else:
                sub_path = f"{path}[{note.index!r}]"
                if isinstance(note, IterableValidationNote) and note.startswith(
                    "Structuring mapping key"
                ):
                    found.extend(
                        (p, f"invalid key: {m}", v) for p, m, v in _problems(sub, sub_path)
                    )
                    continue
            found.extend(_problems(sub, sub_path))
        for sub in without:
            found.extend(_problems(sub, path))
        return found
    if isinstance(exc, ForbiddenExtraKeysError):
        return [
            (path, f"extra field {name!r} not allowed", None) for name in sorted(exc.extra_fields)
        ]
    if isinstance(exc, KeyError):
        return [(path, "required field missing", None)]
    if isinstance(exc, _Invalid):
        return [(path, str(exc), exc.value)]
    if isinstance(exc, InvalidParameter):
        # Raised by a model's own validation, which names its field first ("size: ..."): the
        # field goes on the path, so a nested one reads "pools[1].size: ...".
        prefix = f"{exc.field}: "
        if exc.field and exc.message.startswith(prefix):
            return [(_join(path, exc.field), exc.message[len(prefix) :], exc.value)]
        return [(path, exc.message, exc.value)]
    return [(path, str(exc) or type(exc).__name__, None)]


def _describe(problems: list[tuple[str, str, Any]]) -> str:
    return "; ".join(f"{path}: {message}" if path else message for path, message, _ in problems)


def _invalid(
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
    return error(f"{prefix}{_describe(problems)}", field=field, value=value)


def _raise_invalid(exc: BaseException) -> NoReturn:
    raise _invalid(_problems(exc, "")) from exc


# What structuring can raise on bad data (anything else is a bug and propagates unchanged).
_BAD_DATA = (
    cattrs.BaseValidationError,
    ForbiddenExtraKeysError,
    ValueError,
    TypeError,
    KeyError,
    RockError,
)


def _name(cls: Any) -> str:
    return getattr(cls, "__name__", repr(cls))


# ---------------------------------------------------------------------------------------------
# Public helpers


def structure_wire(data: Any, cls: type[T], *, forbid_extra_keys: bool = True) -> T:
    """Build a ``cls`` from decoded JSON received over HTTP.

    :param forbid_extra_keys: ``False`` to skip unknown keys (a client reading the responses of
        a server that may be newer); inbound requests keep the default.
    :raises InvalidParameter: the data does not fit ``cls``; the message lists every bad field
        with its path (``status['image_pull'].status: ...``), ``field`` names the bad field(s).
    """
    converter = wire if forbid_extra_keys else wire_lenient
    try:
        return converter.structure(data, cls)
    except _BAD_DATA as exc:
        _raise_invalid(exc)


def unstructure_wire(obj: Any, unstructure_as: Any = None) -> Any:
    """``obj`` as JSON-ready data (dicts, lists, strings, numbers, booleans, ``None``)."""
    return wire.unstructure(obj, unstructure_as=unstructure_as)


def structure_store(data: Any, cls: type[T]) -> T:
    """Build a ``cls`` from a JSON blob the engine stored; unknown keys are skipped.

    :raises InternalServerRockError: the blob does not fit ``cls``; the message lists the
        problems with their paths.
    """
    try:
        return store.structure(data, cls)
    except _BAD_DATA as exc:
        message = f"stored {_name(cls)} is unreadable: {_describe(_problems(exc, ''))}"
        raise InternalServerRockError(message, attempted="read store") from exc


def unstructure_store(obj: Any) -> Any:
    """``obj`` as JSON-ready data for the engine's store."""
    return store.unstructure(obj)


# ---------------------------------------------------------------------------------------------
# The same checks for values that come from elsewhere: settings files, environment variables,
# keyword arguments of the SDK's configs.


def structure_value(
    value: Any, cls: Any, *, path: str, error: type[InvalidParameter] = InvalidParameter
) -> Any:
    """``value`` as a ``cls``, read and checked as the wire converter reads a field of that type.

    So a setting is refused or accepted exactly as the same value in a request would be
    (``"8"`` is read as an ``int``, ``True`` is not one).

    :param cls: any type the converter knows: ``int``, ``PositiveInt``, ``ByteSize``,
        ``dict[str, str]``, ``list[str] | None``, an attrs class...
    :param path: the value's name, where every problem's path starts (``admin.port``,
        ``admin.api_keys``: a bad entry is then ``admin.api_keys[2].tenant``).
    :param error: the class to raise, :class:`InvalidParameter` or a subclass the caller expects.
    :raises error: its message is each bad path with the reason and the value
        (``admin.port: expected a port number 1..65535, got 0``); ``field`` and ``value`` are
        the bad path and value when there is one.
    """
    try:
        return wire.structure(value, cls)
    except _BAD_DATA as exc:
        raise _invalid(_problems(exc, path), error=error, prefix="") from None


def structure_fields(
    data: Any,
    types: Mapping[str, Any],
    *,
    path: str = "",
    error: type[InvalidParameter] = InvalidParameter,
) -> dict[str, Any]:
    """A table of settings (a TOML table, variables from the environment), each value read as
    :func:`structure_value` reads it, as the type ``types`` gives for its key; where that is
    itself a mapping of keys to types, the value is a sub-table read the same way.

    Unlike structuring an attrs class, only the keys present are read and nothing is built:
    the caller merges several sources before the settings' class checks them together.

    :param path: the table's name (``engine``): a bad key is ``engine.max_cpus``.
    :raises error: listing every problem at once, sub-tables included: a value of the wrong
        kind, a key not in ``types`` (with the keys that are), a ``data`` that is not a table.
    """
    out: dict[str, Any] = {}
    problems = _table_problems(data, types, path, out)
    if problems:
        raise _invalid(problems, error=error, prefix="")
    return out


def _table_problems(
    data: Any, types: Mapping[str, Any], path: str, out: dict[str, Any]
) -> list[tuple[str, str, Any]]:
    if not isinstance(data, Mapping):
        return [(path, f"expected a table, got {describe_value(data)}", data)]
    problems: list[tuple[str, str, Any]] = []
    for key, value in data.items():
        where = _join(path, key)
        kind = types.get(key)
        if kind is None:
            problems.append((where, f"not a known key (known: {', '.join(sorted(types))})", value))
        elif isinstance(kind, Mapping):
            out[key] = {}
            problems.extend(_table_problems(value, kind, where, out[key]))
        else:
            try:
                out[key] = wire.structure(value, kind)
            except _BAD_DATA as exc:
                problems.extend(_problems(exc, where))
    return problems


def checked(cls: Any, *, error: type[InvalidParameter] = InvalidParameter, **kwargs: Any) -> Any:
    """An ``attrs.field`` whose value is read as ``cls`` by :func:`structure_value`, when the
    instance is built and (with ``attrs.define``'s default ``on_setattr``) when it is assigned.

    A bad value raises ``error`` naming the field (``pids_limit: expected an integer > 0, got
    0``; inside a collection ``env['HOME']: ...``) and the value.

    :param kwargs: passed to :func:`attrs.field` (``default``, ``factory``, ``repr``, ...).
    """

    def convert(value: Any, field: attrs.Attribute[Any]) -> Any:
        return structure_value(value, cls, path=field.name, error=error)

    kwargs["metadata"] = {**kwargs.get("metadata", {}), READ_AS: cls}
    return attrs.field(converter=attrs.Converter(convert, takes_field=True), **kwargs)


#: The ``attrs.field`` metadata key naming the type a field's value is read as from a settings
#: table (set by :func:`checked`; a field with its own converter sets it by hand).
READ_AS = "rock_core.read_as"


def read_types(cls: type) -> dict[str, Any]:
    """The type each field of the attrs class ``cls`` is read as from a settings table, by name:
    what :func:`structure_fields` takes to read a TOML table or environment variables for ``cls``.

    :raises TypeError: a field that says no type (neither :func:`checked` nor ``metadata``
        with :data:`READ_AS`), so a new setting cannot be left unreadable.
    """
    missing = [field.name for field in attrs.fields(cls) if READ_AS not in field.metadata]
    if missing:
        raise TypeError(
            f"{_name(cls)}: no type to read {', '.join(missing)} as (use checked() or metadata={{READ_AS: ...}})"
        )
    return {field.name: field.metadata[READ_AS] for field in attrs.fields(cls)}


def structure_options(
    table: Any, cls: type[T], *, path: str, error: type[InvalidParameter] = InvalidParameter
) -> T:
    """A plugin's options: ``table`` (its ``[plugins.<name>]`` table, keyword arguments) read
    as the attrs class ``cls`` by :func:`structure_fields` with :func:`read_types`, then built.

    :param path: the table's name (``plugins.gem``): a bad value is ``plugins.gem.cpus``.
    :raises error: every bad or unknown key at once, by its path and value; or what ``cls``
        itself refuses (its checks of several fields together), named under ``path``.
    """
    read = structure_fields(table, read_types(cls), path=path, error=error)
    try:
        return cls(**read)
    except InvalidParameter as exc:
        raise _invalid(_problems(exc, path), error=error, prefix="") from None


# ---------------------------------------------------------------------------------------------
# From what the client sent to what the engine runs


def _positive_size(value: str) -> int:
    n = size_to_bytes(value)
    if n <= 0:
        raise ValueError(f"invalid size {describe_value(value)} (must be greater than zero)")
    return n


def spec_from_start_request(
    req: SandboxStartRequest,
    *,
    user_id: str | None = None,
    experiment_id: str | None = None,
    namespace: str | None = None,
    cluster: str | None = None,
) -> SandboxSpec:
    """The :class:`~rock_core.models.SandboxSpec` a start request asks for, sizes in bytes.

    The keyword arguments come from ROCK's request headers (``X-User-Id``, ``X-Experiment-Id``,
    ``X-Namespace``, ``X-Cluster``). The idle timeout is ``auto_clear_seconds``, else
    ``auto_clear_time_minutes`` × 60, else ``auto_clear_time`` × 60, else ``None`` (the engine's
    default). ``use_kata_runtime=True`` becomes the runtime option ``use_kata_runtime``, and
    ``network`` (when set) the runtime option ``network``.

    :raises InvalidParameter: listing every problem: a size of zero or not a size, a CPU count
        that is not positive, a ``network`` that is not a name (the engine checks it against its
        runtime's modes), and
        ``auto_archive_seconds`` together with ``auto_delete_seconds`` (ROCK's SDK forbids the
        pair; ROCK's server silently prefers archive; rock refuses).
    """
    problems: list[tuple[str, str, Any]] = []

    def take(field: str, parse: Callable[[Any], Any], value: Any) -> Any:
        if value is None:
            return None
        try:
            return parse(value)
        except ValueError as exc:
            problems.append((field, str(exc), value))
            return None

    memory = take("memory", _positive_size, req.memory)
    disk = take("disk", _positive_size, req.disk)
    cpus = take("cpus", cpus_to_float, req.cpus)
    limit_cpus = take("limit_cpus", cpus_to_float, req.limit_cpus)
    network = take("network", _network_mode, req.network)
    group = take("network_group", _network_group, req.network_group)
    cap_add = take("cap_add", capability_names, req.cap_add)
    if group is not None and network in ("host", "none"):
        problems.append(
            (
                "network_group",
                f"a sandbox on network {network!r} cannot join a network group",
                group,
            )
        )
    if req.auto_archive_seconds is not None and req.auto_delete_seconds is not None:
        problems.append(
            (
                "auto_archive_seconds, auto_delete_seconds",
                f"cannot both be set (got {req.auto_archive_seconds!r} and {req.auto_delete_seconds!r}); choose one",
                None,
            )
        )
    if problems:
        raise _invalid(problems)

    if req.auto_clear_seconds is not None:
        auto_clear: int | None = req.auto_clear_seconds
    elif req.auto_clear_time_minutes is not None:
        auto_clear = req.auto_clear_time_minutes * 60
    elif req.auto_clear_time is not None:
        auto_clear = req.auto_clear_time * 60
    else:
        auto_clear = None

    return SandboxSpec(
        image=req.image,
        image_os=req.image_os,
        memory=memory,
        cpus=cpus,
        limit_cpus=limit_cpus,
        disk=disk,
        num_gpus=req.num_gpus,
        accelerator_type=req.accelerator_type,
        pull=req.pull,
        startup_timeout=req.startup_timeout,
        auto_clear_seconds=auto_clear,
        auto_delete_seconds=req.auto_delete_seconds,
        auto_archive_seconds=req.auto_archive_seconds,
        registry_username=req.registry_username,
        registry_password=req.registry_password,
        env=dict(req.env or {}),
        metadata=dict(req.metadata or {}),
        user_id=user_id,
        experiment_id=experiment_id,
        namespace=namespace,
        cluster=cluster,
        sandbox_id=req.sandbox_id,
        runtime_options={
            **({"use_kata_runtime": True} if req.use_kata_runtime else {}),
            **({"network": network} if network is not None else {}),
            **({"network_group": group} if group is not None else {}),
        },
        pids_limit=req.pids_limit,
        cap_add=cap_add or (),
        **({"priority": req.priority} if req.priority is not None else {}),
        **({"restart_policy": req.restart_policy} if req.restart_policy is not None else {}),
        **({"max_restarts": req.max_restarts} if req.max_restarts is not None else {}),
    )


#: The network modes rock names (``SandboxStartRequest.network``): ``bridge`` (an isolated
#: network with the agent's ports published on 127.0.0.1), ``host`` (the host's network) and
#: ``none`` (loopback only). Which of them a sandbox may have is its runtime's to say
#: (:attr:`rock_core.runtime.Runtime.network_modes`); the engine checks.
NETWORK_MODES = ("bridge", "host", "none")


def _network_mode(value: str) -> str:
    if not isinstance(value, str) or not value.strip() or any(ch.isspace() for ch in value):
        raise ValueError(
            f"expected a network mode such as {', '.join(NETWORK_MODES)}, got {describe_value(value)}"
        )
    return value


_GROUP = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,63}$")


def _network_group(value: str) -> str:
    if not isinstance(value, str) or not _GROUP.match(value):
        raise ValueError(
            f"expected a name of letters, digits, '_', '.', '-' (at most 64, starting with a letter or digit), "
            f"got {describe_value(value)}"
        )
    return value


#: Every Linux capability, by the name Docker and ``capabilities(7)`` use (without ``CAP_``).
CAPABILITIES = frozenset(
    """AUDIT_CONTROL AUDIT_READ AUDIT_WRITE BLOCK_SUSPEND BPF CHECKPOINT_RESTORE CHOWN DAC_OVERRIDE
    DAC_READ_SEARCH FOWNER FSETID IPC_LOCK IPC_OWNER KILL LEASE LINUX_IMMUTABLE MAC_ADMIN
    MAC_OVERRIDE MKNOD NET_ADMIN NET_BIND_SERVICE NET_BROADCAST NET_RAW PERFMON SETFCAP SETGID
    SETPCAP SETUID SYSLOG SYS_ADMIN SYS_BOOT SYS_CHROOT SYS_MODULE SYS_NICE SYS_PACCT SYS_PTRACE
    SYS_RAWIO SYS_RESOURCE SYS_TIME SYS_TTY_CONFIG WAKE_ALARM""".split()
)


def capability_names(value: Any) -> tuple[str, ...]:
    """Capability names as Docker takes them: upper case, without ``CAP_``, each once.

    :raises ValueError: ``value`` is not a list of names, or names an unknown capability.
    """
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise ValueError(
            f"expected a list of capability names like ['NET_RAW'], got {describe_value(value)}"
        )
    names: list[str] = []
    for item in value:
        name = item.strip().upper().removeprefix("CAP_") if isinstance(item, str) else None
        if name not in CAPABILITIES:
            raise ValueError(
                f"unknown capability {describe_value(item)} (see capabilities(7), e.g. 'NET_RAW')"
            )
        if name not in names:
            names.append(name)
    return tuple(names)
