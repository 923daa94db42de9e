"""The lifecycle state machine: every (state, event) pair, then random event sequences."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from rock_core.errors import BadRequestRockError, InvalidTransition
from rock_core.states import (
    HISTORY_LIMIT,
    LIVE_STATES,
    Event,
    Lifecycle,
    State,
    StateChange,
    allowed_events,
    is_noop,
    next_state,
)

# The expected outcome of every event in every state, written out by hand from ARCHITECTURE §4
# and ROCK's spec §1.1, independently of rock_core.states.TRANSITIONS. A cell is the target state,
# "noop" (accepted, nothing changes) or "-" (rejected).
_MATRIX = """
                 pending   running   stopped    archiving  archived   deleted
alive            running   -         -          -          -          -
stop             stopped   stopped   noop       -          -          -
restart          -         -         pending    -          -          -
archive          -         -         archiving  -          -          -
archive_done     -         -         -          archived   -          -
archive_failed   -         -         -          stopped    -          -
restore          -         -         -          -          pending    -
restore_failed   archived  -         -          -          -          -
delete           -         -         deleted    -          deleted    noop
"""

NOOP = "noop"
REJECT = "reject"


def _parse_matrix(text: str) -> dict[tuple[State, Event], State | str]:
    header, *rows = [line.split() for line in text.strip().splitlines()]
    out: dict[tuple[State, Event], State | str] = {}
    for event_name, *cells in rows:
        for state_name, cell in zip(header, cells, strict=True):
            outcome = REJECT if cell == "-" else NOOP if cell == NOOP else State(cell)
            out[State(state_name), Event(event_name)] = outcome
    return out


EXPECTED = _parse_matrix(_MATRIX)
T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
EARLIER = StateChange(
    from_state=State.PENDING, to_state=State.RUNNING, event=Event.ALIVE, timestamp=T0
)


def test_expectation_covers_every_pair() -> None:
    # Guards the hand-written matrix itself: a missing row or column would silently skip cases.
    assert set(EXPECTED) == set(itertools.product(State, Event))


def test_wire_names_are_rocks() -> None:
    assert [s.value for s in State] == [
        "pending",
        "running",
        "stopped",
        "archiving",
        "archived",
        "deleted",
    ]
    assert LIVE_STATES == {State.PENDING, State.RUNNING}


@pytest.mark.parametrize(
    ("state", "event"),
    list(itertools.product(State, Event)),
    ids=lambda v: v.value,
)
def test_every_event_in_every_state(state: State, event: Event) -> None:
    expected = EXPECTED[state, event]
    # A non-empty history, so "unchanged" and "grew by one" are both visible.
    before = Lifecycle(state=state, history=(EARLIER,))
    at = T0 + timedelta(minutes=5)

    if expected == REJECT:
        assert event not in allowed_events(state)
        assert not is_noop(state, event)
        with pytest.raises(InvalidTransition) as info:
            next_state(state, event)
        with pytest.raises(InvalidTransition) as info:
            before.apply(event, at=at, sandbox_id="sb-1")
        err = info.value
        assert isinstance(err, BadRequestRockError)
        assert (err.state, err.event, err.sandbox_id, err.attempted) == (
            state,
            event,
            "sb-1",
            event.value,
        )
        assert (
            f"'{event.value}'" in str(err) and f"'{state.value}'" in str(err) and "sb-1" in str(err)
        )
        assert before == Lifecycle(state=state, history=(EARLIER,))
    elif expected == NOOP:
        assert event in allowed_events(state)
        assert is_noop(state, event)
        assert next_state(state, event) is state
        assert before.apply(event, at=at, sandbox_id="sb-1") is before
    else:
        assert event in allowed_events(state)
        assert not is_noop(state, event)
        assert next_state(state, event) is expected
        after = before.apply(event, at=at, sandbox_id="sb-1")
        assert after.state is expected
        assert after.history == (EARLIER, StateChange(state, expected, event, at))
        assert before.history == (EARLIER,)


def test_rejection_without_sandbox_id_still_explains() -> None:
    with pytest.raises(InvalidTransition) as info:
        Lifecycle(state=State.RUNNING).apply(Event.RESTART, at=T0)
    assert info.value.sandbox_id is None
    assert (
        str(info.value)
        == "event 'restart' is not allowed for a sandbox in state 'running' (allowed: stop)"
    )


def test_deleted_accepts_only_delete() -> None:
    assert allowed_events(State.DELETED) == {Event.DELETE}
    assert str(_rejected(State.DELETED, Event.RESTART)).endswith("(allowed: delete)")


def _rejected(state: State, event: Event) -> InvalidTransition:
    with pytest.raises(InvalidTransition) as info:
        next_state(state, event)
    return info.value


def test_plain_strings_are_accepted_and_unknown_names_refused() -> None:
    assert next_state("stopped", "restart") is State.PENDING
    lc = Lifecycle().apply("alive", at=T0)
    assert lc.history[-1].event is Event.ALIVE
    with pytest.raises(ValueError):
        next_state(State.RUNNING, "explode")


def test_a_new_lifecycle_is_pending_with_no_history() -> None:
    assert Lifecycle() == Lifecycle(state=State.PENDING, history=())


def test_timestamps_must_be_timezone_aware_and_are_kept_in_utc() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        Lifecycle().apply(Event.ALIVE, at=datetime(2025, 1, 1, 12, 0))
    beijing = datetime(2025, 1, 1, 20, 0, tzinfo=timezone(timedelta(hours=8)))
    change = Lifecycle().apply(Event.ALIVE, at=beijing).history[-1]
    assert change.timestamp == T0
    assert change.timestamp.utcoffset() == timedelta(0)
    assert change.timestamp.isoformat() == "2025-01-01T12:00:00+00:00"


def test_history_keeps_the_last_hundred_transitions() -> None:
    lc = Lifecycle().apply(Event.STOP, at=T0)  # transition 1
    for i in range(2, 151):
        lc = lc.apply(
            Event.RESTART if lc.state is State.STOPPED else Event.STOP, at=T0 + timedelta(seconds=i)
        )
    assert len(lc.history) == HISTORY_LIMIT == 100
    # Transitions 51..150 remain, oldest first.
    assert lc.history[0].timestamp == T0 + timedelta(seconds=51)
    assert lc.history[-1].timestamp == T0 + timedelta(seconds=150)
    assert lc.history[-1].to_state is lc.state is State.PENDING


# ---------------------------------------------------------------------------------------------
# Random sequences of events, valid and invalid

ZONES = [UTC, timezone(timedelta(hours=8)), timezone(timedelta(hours=-5, minutes=-30))]


class LifecycleMachine(RuleBasedStateMachine):
    """Fires random events at a Lifecycle and checks it against a full, uncapped log."""

    def __init__(self) -> None:
        super().__init__()
        self.lifecycle = Lifecycle()
        self.clock = T0
        # Every real transition ever made, as (from, to, event, at); the history is its tail.
        self.log: list[tuple[State, State, Event, datetime]] = []
        self.was_deleted = False

    def fire(self, event: Event, at: datetime) -> None:
        before = self.lifecycle
        state_before, history_before = before.state, before.history
        expected = EXPECTED[state_before, event]

        if expected == REJECT:
            with pytest.raises(InvalidTransition) as info:
                before.apply(event, at=at, sandbox_id="sb-x")
            assert (info.value.state, info.value.event, info.value.sandbox_id) == (
                state_before,
                event,
                "sb-x",
            )
            assert (before.state, before.history) == (state_before, history_before)
            return

        after = before.apply(event, at=at, sandbox_id="sb-x")
        if expected == NOOP:
            assert after is before
            return

        assert after.state is expected
        assert len(after.history) == min(len(history_before) + 1, HISTORY_LIMIT)
        self.log.append((state_before, after.state, event, at))
        self.lifecycle = after
        self.was_deleted = self.was_deleted or after.state is State.DELETED

    def tick(self, seconds: int, zone: timezone) -> datetime:
        self.clock += timedelta(seconds=seconds)
        return self.clock.astimezone(zone)

    @rule(event=st.sampled_from(Event), seconds=st.integers(0, 86_400), zone=st.sampled_from(ZONES))
    def any_event(self, event: Event, seconds: int, zone: timezone) -> None:
        self.fire(event, self.tick(seconds, zone))

    @precondition(
        lambda self: self.lifecycle.state in {State.PENDING, State.RUNNING, State.STOPPED}
    )
    @rule(cycles=st.integers(1, 70), zone=st.sampled_from(ZONES))
    def stop_restart_cycles(self, cycles: int, zone: timezone) -> None:
        # Many real transitions at once, so runs regularly pass the 100-entry cap.
        self.fire(Event.STOP, self.tick(1, zone))
        for _ in range(cycles):
            self.fire(Event.RESTART, self.tick(1, zone))
            self.fire(Event.STOP, self.tick(1, zone))

    @invariant()
    def history_is_the_last_hundred_transitions(self) -> None:
        expected = tuple(StateChange(*entry) for entry in self.log[-HISTORY_LIMIT:])
        assert self.lifecycle.history == expected

    @invariant()
    def history_chains_to_the_current_state(self) -> None:
        history = self.lifecycle.history
        for earlier, later in itertools.pairwise(history):
            assert later.from_state is earlier.to_state
        assert (history[-1].to_state if history else State.PENDING) is self.lifecycle.state

    @invariant()
    def timestamps_are_utc(self) -> None:
        assert all(c.timestamp.utcoffset() == timedelta(0) for c in self.lifecycle.history)

    @invariant()
    def deleted_absorbs(self) -> None:
        if self.was_deleted:
            assert self.lifecycle.state is State.DELETED
            assert allowed_events(self.lifecycle.state) == {Event.DELETE}


# Example count and deadline come from the run's hypothesis profile (conftest.py).
LifecycleMachine.TestCase.settings = settings(stateful_step_count=40)
TestLifecycleMachine = LifecycleMachine.TestCase
