"""The sandbox lifecycle as one table, with no I/O.

A sandbox is always in one of ROCK's six :class:`State`\\ s. Something happening to it is an
:class:`Event`. :data:`TRANSITIONS` says, for every allowed ``(state, event)`` pair, the state it
leads to; a pair that is not in the table is rejected with
:class:`~rock_core.errors.InvalidTransition` and changes nothing. Two entries lead back to their own
state: they are the *no-ops* (``stop`` on a stopped sandbox, ``delete`` on a deleted one), accepted
so that repeating a request is harmless, and never recorded in the history.

:class:`Lifecycle` is an immutable value (state + history); :meth:`Lifecycle.apply` returns the
next value. The caller passes the time in, so this module never reads a clock::

    >>> from datetime import datetime, timezone
    >>> t = datetime(2025, 1, 1, tzinfo=timezone.utc)
    >>> lc = Lifecycle().apply(Event.ALIVE, at=t).apply(Event.STOP, at=t)
    >>> lc.state, [c.event.value for c in lc.history]
    (<State.STOPPED: 'stopped'>, ['alive', 'stop'])
    >>> lc.apply(Event.STOP, at=t) is lc
    True

``python -m rock_core.states`` regenerates the diagram and the table in ``docs/lifecycle.md``
from :data:`TRANSITIONS` (see :mod:`rock_core._diagram`).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

import attrs

from rock_core.errors import InvalidTransition

__all__ = [
    "State",
    "Event",
    "TRANSITIONS",
    "LIVE_STATES",
    "HISTORY_LIMIT",
    "StateChange",
    "Lifecycle",
    "next_state",
    "is_noop",
    "allowed_events",
    "render_mermaid",
    "render_markdown_table",
]


class State(str, enum.Enum):
    """ROCK's six lifecycle states of a sandbox."""

    PENDING = "pending"
    RUNNING = "running"
    STOPPED = "stopped"
    ARCHIVING = "archiving"
    ARCHIVED = "archived"
    DELETED = "deleted"


class Event(str, enum.Enum):
    """What can happen to a sandbox."""

    ALIVE = "alive"
    STOP = "stop"
    RESTART = "restart"
    ARCHIVE = "archive"
    ARCHIVE_DONE = "archive_done"
    ARCHIVE_FAILED = "archive_failed"
    RESTORE = "restore"
    RESTORE_FAILED = "restore_failed"
    DELETE = "delete"


#: Every allowed ``(state, event)`` pair and the state it leads to. An entry whose target is its
#: own source state is a no-op. Anything not listed raises :class:`InvalidTransition`.
TRANSITIONS: Mapping[tuple[State, Event], State] = MappingProxyType(
    {
        (State.PENDING, Event.ALIVE): State.RUNNING,
        (State.PENDING, Event.STOP): State.STOPPED,
        (State.RUNNING, Event.STOP): State.STOPPED,
        (State.STOPPED, Event.STOP): State.STOPPED,  # no-op: stopping twice is harmless
        (State.STOPPED, Event.RESTART): State.PENDING,
        (State.STOPPED, Event.ARCHIVE): State.ARCHIVING,
        (State.ARCHIVING, Event.ARCHIVE_DONE): State.ARCHIVED,
        (State.ARCHIVING, Event.ARCHIVE_FAILED): State.STOPPED,
        (State.ARCHIVED, Event.RESTORE): State.PENDING,
        (State.PENDING, Event.RESTORE_FAILED): State.ARCHIVED,
        (State.STOPPED, Event.DELETE): State.DELETED,
        (State.ARCHIVED, Event.DELETE): State.DELETED,
        (State.DELETED, Event.DELETE): State.DELETED,  # no-op: deleting twice is harmless
    }
)

#: States in which a sandbox has (or is getting) a running unit; ROCK's ``get_status`` without
#: ``include_all_states`` only shows these.
LIVE_STATES: frozenset[State] = frozenset({State.PENDING, State.RUNNING})

#: How many history entries a :class:`Lifecycle` keeps (the most recent ones), as ROCK does.
HISTORY_LIMIT = 100

# Derived once from the table so look-ups stay O(1) and the table stays the only source.
_ALLOWED: Mapping[State, frozenset[Event]] = MappingProxyType(
    {s: frozenset(e for (src, e) in TRANSITIONS if src is s) for s in State}
)


def next_state(state: State, event: Event, *, sandbox_id: str | None = None) -> State:
    """The state ``event`` leads to from ``state`` (``state`` itself for a no-op).

    Plain strings are accepted for both (``"stopped"``, ``"stop"``).

    :param sandbox_id: only used to name the sandbox in the error.
    :raises InvalidTransition: the pair is not in :data:`TRANSITIONS`; the error carries
        ``state``, ``event``, ``sandbox_id`` and ``attempted`` (the event's name).
    :raises ValueError: ``state`` or ``event`` is not a known name at all.
    """
    state, event = State(state), Event(event)
    try:
        return TRANSITIONS[state, event]
    except KeyError:
        raise _rejection(state, event, sandbox_id) from None


def is_noop(state: State, event: Event) -> bool:
    """Whether ``event`` is accepted in ``state`` but changes nothing (and records no history)."""
    return TRANSITIONS.get((State(state), Event(event))) is State(state)


def allowed_events(state: State) -> frozenset[Event]:
    """The events accepted in ``state``, no-ops included."""
    return _ALLOWED[State(state)]


def _rejection(state: State, event: Event, sandbox_id: str | None) -> InvalidTransition:
    who = f"sandbox {sandbox_id}" if sandbox_id else "a sandbox"
    allowed = ", ".join(e.value for e in Event if e in _ALLOWED[state]) or "nothing"
    return InvalidTransition(
        f"event '{event.value}' is not allowed for {who} in state '{state.value}' (allowed: {allowed})",
        state=state,
        event=event,
        sandbox_id=sandbox_id,
        attempted=event.value,
    )


def _utc(value: datetime) -> datetime:
    # A naive time is ambiguous once stored or sent, so refuse it instead of guessing a zone.
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"timestamp must be timezone-aware, got naive {value.isoformat()}")
    return value.astimezone(UTC)


def _state(value: Any) -> State:
    # A member passes with one class check (``State(member)`` looks it up again); anything else
    # is read, or refused, by ``State(value)`` as before.
    return value if value.__class__ is State else State(value)


def _event(value: Any) -> Event:
    return value if value.__class__ is Event else Event(value)


def _history(entries: Iterable[StateChange]) -> tuple[StateChange, ...]:
    return tuple(entries)


@attrs.frozen
class StateChange:
    """One entry of a sandbox's state history, with ROCK's wire names.

    ``timestamp`` must be timezone-aware and is kept in UTC (the instant is unchanged).
    """

    from_state: State = attrs.field(converter=_state)
    to_state: State = attrs.field(converter=_state)
    event: Event = attrs.field(converter=_event)
    timestamp: datetime = attrs.field(converter=_utc)


@attrs.frozen
class Lifecycle:
    """A sandbox's state and its recent history, as an immutable value.

    A new sandbox starts ``pending`` with no history. :meth:`apply` returns the next value;
    the one it was called on never changes.
    """

    state: State = attrs.field(default=State.PENDING, converter=_state)
    history: tuple[StateChange, ...] = attrs.field(default=(), converter=_history)

    def apply(self, event: Event, *, at: datetime, sandbox_id: str | None = None) -> Lifecycle:
        """The lifecycle after ``event`` happened at time ``at`` (timezone-aware).

        A real transition adds one :class:`StateChange` stamped ``at`` and keeps the last
        :data:`HISTORY_LIMIT` entries. A no-op returns ``self``.

        :raises InvalidTransition: the event is not allowed in the current state.
        :raises ValueError: ``at`` is naive.
        """
        at = _utc(at)
        new = next_state(self.state, event, sandbox_id=sandbox_id)
        if new is self.state:
            return self
        change = StateChange(from_state=self.state, to_state=new, event=event, timestamp=at)
        return Lifecycle(state=new, history=(*self.history, change)[-HISTORY_LIMIT:])


# ---------------------------------------------------------------------------------------------
# Documentation generated from the table (pure: returns text; rock_core._diagram writes it)


def render_mermaid() -> str:
    """A Mermaid ``stateDiagram-v2`` of :data:`TRANSITIONS`, in a stable order.

    Edges follow the declaration order of :class:`State` then :class:`Event`; no-ops are
    self loops labelled ``"<event> (no-op)"``.
    """
    lines = ["stateDiagram-v2", f"    [*] --> {State.PENDING.value}"]
    for src in State:
        for event in Event:
            dst = TRANSITIONS.get((src, event))
            if dst is None:
                continue
            label = f"{event.value} (no-op)" if dst is src else event.value
            lines.append(f"    {src.value} --> {dst.value}: {label}")
    lines.append(f"    {State.DELETED.value} --> [*]")
    return "\n".join(lines) + "\n"


def render_markdown_table() -> str:
    """Every event × state pair of :data:`TRANSITIONS` as a Markdown table.

    A cell holds the target state, ``no-op``, or ``—`` where the event raises.
    """
    header = "| event | " + " | ".join(s.value for s in State) + " |"
    rule = "|---|" + "---|" * len(State)
    rows = [header, rule]
    for event in Event:
        cells = []
        for src in State:
            dst = TRANSITIONS.get((src, event))
            cells.append("—" if dst is None else "no-op" if dst is src else f"→ {dst.value}")
        rows.append(f"| `{event.value}` | " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":  # pragma: no cover - exercised through rock_core._diagram.main
    import sys

    from rock_core._diagram import main

    sys.exit(main())
