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

from collections.abc import Mapping
from typing import Any, NoReturn, TypeVar

import attrs

from rock_core._converter_errors import (
    BAD_DATA,
    describe_problems,
    invalid_error,
    join_path,
    problems_of,
)
from rock_core._converter_hooks import make_converter
from rock_core._start_spec import NETWORK_MODES, capability_names, spec_from_start_request
from rock_core._start_wire import register_start_request_hook
from rock_core._status_wire import register_status_hook
from rock_core.errors import InternalServerRockError, InvalidParameter
from rock_core.sizes import describe_value

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
    "capability_names",
    "NETWORK_MODES",
]

T = TypeVar("T")

#: Inbound HTTP JSON: unknown keys rejected.
wire = make_converter(forbid_extra_keys=True)
# The status (one per start, per get_status, per listed sandbox): the same JSON, by hand.
register_status_hook(wire)
# The start request (one per start): its usual body read in one pass, each value checked once.
register_start_request_hook(wire)
#: HTTP JSON read by a client from a server that may be newer: unknown keys skipped.
wire_lenient = make_converter(forbid_extra_keys=False)
#: The engine's stored JSON blobs: unknown keys skipped (forward compatibility).
store = make_converter(forbid_extra_keys=False)


def _raise_invalid(exc: BaseException) -> NoReturn:
    raise invalid_error(problems_of(exc, "")) from exc


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
    except BAD_DATA as exc:
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
    except BAD_DATA as exc:
        message = f"stored {_name(cls)} is unreadable: {describe_problems(problems_of(exc, ''))}"
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
    except BAD_DATA as exc:
        raise invalid_error(problems_of(exc, path), error=error, prefix="") from None


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
    problems = _tableproblems_of(data, types, path, out)
    if problems:
        raise invalid_error(problems, error=error, prefix="")
    return out


def _tableproblems_of(
    data: Any, types: Mapping[str, Any], path: str, out: dict[str, Any]
) -> list[tuple[str, str, Any]]:
    if not isinstance(data, Mapping):
        return [(path, f"expected a table, got {describe_value(data)}", data)]
    problems: list[tuple[str, str, Any]] = []
    for key, value in data.items():
        where = join_path(path, key)
        kind = types.get(key)
        if kind is None:
            problems.append((where, f"not a known key (known: {', '.join(sorted(types))})", value))
        elif isinstance(kind, Mapping):
            out[key] = {}
            problems.extend(_tableproblems_of(value, kind, where, out[key]))
        else:
            try:
                out[key] = wire.structure(value, kind)
            except BAD_DATA as exc:
                problems.extend(problems_of(exc, where))
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
        raise invalid_error(problems_of(exc, path), error=error, prefix="") from None
