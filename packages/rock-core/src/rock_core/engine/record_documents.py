"""A sandbox record as the JSON document a store keeps (:func:`record_document`): what
``json.dumps(unstructure_store(record))`` reads back as, made at a fraction of its cost.

A start saves its record twice (``pending``, then ``running``), and in a burst of starts those
documents were the larger part of a commit's CPU. Here orjson writes the record's fields as they
are: strings, numbers, ``None``, enums (their value), datetimes (ISO 8601, as ``isoformat``),
tuples and dicts, all in C, as the ``store`` converter's hooks write them. Only the phases and the
state history, attrs classes orjson does not know, are turned into dicts first, and the spec,
the largest part and the same (frozen) object at each save, is encoded once and embedded as it
is (``orjson.Fragment``). A value orjson refuses (a type it does not know in ``security``, an
integer beyond 64 bits) makes that document the converter's way instead.

At import, a record with every field set is written both ways and compared, so a field or type
written differently from the converter refuses to load rather than store a document a later
read would misread.
"""

from __future__ import annotations

import json
import operator
import weakref
from datetime import UTC, datetime
from typing import Any

import attrs
import orjson

from rock_core._constrained import NonBlankStr
from rock_core.converters import structure_store, unstructure_store
from rock_core.models import Phase, PhaseStatus, SandboxRecord, SandboxSpec
from rock_core.states import Event, State, StateChange

__all__ = ["record_document", "read_document"]

_ORJSON = orjson.OPT_NON_STR_KEYS
_encode_slowly = json.JSONEncoder(separators=(",", ":")).encode

#: The record's fields written as orjson writes their values: all but the three below.
_NAMES = tuple(
    field.name
    for field in attrs.fields(SandboxRecord)
    if field.name not in ("spec", "phases", "state_history")
)
_values = operator.attrgetter(*_NAMES)


def _encode(value: Any) -> bytes:
    """``value`` (JSON-ready) as compact JSON: orjson's, or the standard library's for what
    orjson refuses (an integer beyond 64 bits)."""
    try:
        return orjson.dumps(value, option=_ORJSON)
    except TypeError:  # orjson.JSONEncodeError
        return _encode_slowly(value).encode()


class _SpecJson:
    """A spec's JSON (an ``orjson.Fragment``), made once, and a weak reference to the spec."""

    __slots__ = ("ref", "fragment")

    def __init__(self, ref: weakref.ref[SandboxSpec], fragment: orjson.Fragment) -> None:
        self.ref = ref
        self.fragment = fragment


# By the spec's identity: a record is saved at least twice per start, each time with the same
# (frozen) spec. An entry goes with its spec. The other fields are written anew each time: a
# memo of each field's last text cost 3.5 KB a live sandbox (56 MB at 16,000).
_spec_jsons: dict[int, _SpecJson] = {}


def _spec_json(spec: SandboxSpec) -> orjson.Fragment:
    key = id(spec)
    found = _spec_jsons.get(key)
    if found is not None and found.ref() is spec:
        return found.fragment

    def forget(ref: weakref.ref[SandboxSpec]) -> None:
        entry = _spec_jsons.get(key)
        if entry is not None and entry.ref is ref:
            _spec_jsons.pop(key, None)

    # Kept as str: orjson's bytes keep the capacity of its buffer (16 KB a spec, measured),
    # their text only what it holds.
    fragment = orjson.Fragment(_encode(unstructure_store(spec)).decode())
    _spec_jsons[key] = _SpecJson(weakref.ref(spec, forget), fragment)
    return fragment


def _phases(phases: dict[str, Phase]) -> dict[str, dict[str, Any]]:
    return {
        name: {
            "status": phase.status.value,
            "message": phase.message,
            "started_at": phase.started_at,
            "completed_at": phase.completed_at,
        }
        for name, phase in phases.items()
    }


def _history(history: tuple[StateChange, ...]) -> list[dict[str, Any]]:
    return [
        {
            "from_state": change.from_state.value,
            "to_state": change.to_state.value,
            "event": change.event.value,
            "timestamp": change.timestamp,
        }
        for change in history
    ]


def record_document(record: SandboxRecord) -> str:
    """``record`` as the JSON document a store keeps (see the module). Read it with
    ``structure_store``. Safe from several threads."""
    document = dict(zip(_NAMES, _values(record)))
    document["phases"] = _phases(record.phases)
    document["state_history"] = _history(record.state_history)
    document["spec"] = _spec_json(record.spec)
    try:
        return orjson.dumps(document, option=_ORJSON).decode()
    except TypeError:  # a value orjson does not write: the converter's way
        return _encode(unstructure_store(record)).decode()


def read_document(text: str | bytes) -> SandboxRecord:
    """The record a store's document holds (:func:`record_document`'s, or an older rock's
    ``json.dumps``): parsed by orjson (a third of the standard library's time), or by the
    standard library for what orjson refuses (``NaN``, a lone surrogate an older writer left)."""
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError:
        data = json.loads(text)
    return structure_store(data, SandboxRecord)


def _every_field_set() -> SandboxRecord:
    """A record with a value in each field (``None`` in none), for the check at import."""
    now = datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC)
    values: dict[str, Any] = {
        "sandbox_id": "sb-check",
        "spec": SandboxSpec(image=NonBlankStr("python:3.11"), sandbox_id=NonBlankStr("sb-check")),
        "create_time": now,
        "state": State.RUNNING,
        "phases": {"image_pull": Phase(PhaseStatus.SUCCESS, 'a "quoted" \\ message', now, None)},
        "port_mapping": {8000: 32768},
        "host_name": "host",
        "host_ip": "192.0.2.1",
        "owner": "owner",
        "runtime": "docker",
        "start_time": now.replace(microsecond=0),
        "stop_time": now,
        "archive_time": now,
        "delete_time": now,
        "auto_transition_state": State.DELETED,
        "auto_transition_time": now,
        "state_history": (StateChange(State.PENDING, State.RUNNING, next(iter(Event)), now),),
        "reason": "réason ☃",
        "notes": ("a note",),
        "security": {"pids_limit": 512, "seccomp": "default", "caps": ["NET_BIND"]},
        "rocklet_token": "token",
        "unit_id": "unit",
        "rocklet_address": ("192.0.2.1", 22555),
        "restart_count": 2,
        "paused_time": now,
    }
    unset = {field.name for field in attrs.fields(SandboxRecord)} - set(values)
    if unset:
        raise TypeError(f"the record check at import sets no value for {sorted(unset)}")
    return SandboxRecord(**values)


def _check() -> None:
    """Refuse to load when a document made here reads back unlike the converter's form."""
    record = _every_field_set()
    if json.loads(record_document(record)) != unstructure_store(record):
        raise TypeError("a record's document differs from the store converter's form")


_check()
