"""Domain models: ROCK's defaults, cheap validation that names the field, immutability."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import attrs
import pytest

from rock_core.errors import InvalidParameter
from rock_core.models import (
    ROCKLET_PORT,
    Phase,
    PhaseStatus,
    PullPolicy,
    RuntimeStatus,
    SandboxRecord,
    SandboxSpec,
    UnitState,
)
from rock_core.sizes import GiB
from rock_core.states import Event, Lifecycle, State

T0 = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)


def test_spec_defaults_are_rocks() -> None:
    spec = SandboxSpec(image="python:3.11")
    assert spec.image_os == "linux"
    assert spec.memory == 8 * GiB
    assert spec.cpus == 2
    assert spec.disk == 50 * GiB
    assert spec.pull is PullPolicy.MISSING
    assert spec.limit_cpus is None
    assert spec.auto_clear_seconds is None  # the engine's default applies
    assert spec.auto_delete_seconds is None and spec.auto_archive_seconds is None
    assert spec.env == {} and spec.metadata == {} and spec.runtime_options == {}


def test_spec_strips_the_image_name() -> None:
    assert SandboxSpec(image="  python:3.11 ").image == "python:3.11"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("image", ""),
        ("image", "   "),
        ("memory", 0),
        ("memory", -1),
        ("memory", "8g"),  # a SandboxSpec holds bytes; text sizes belong to the request
        ("cpus", 0),
        ("cpus", float("nan")),
        ("cpus", True),
        ("limit_cpus", -2.0),
        ("disk", 0),
        ("num_gpus", -1),
        ("startup_timeout", 0),
        ("auto_clear_seconds", -1),
        ("auto_delete_seconds", -60),
        ("auto_archive_seconds", 1.5),
        ("sandbox_id", " "),
    ],
)
def test_spec_rejects_bad_values_naming_the_field(field: str, value: object) -> None:
    kwargs: dict[str, object] = {"image": "python:3.11", field: value}
    with pytest.raises(InvalidParameter) as info:
        SandboxSpec(**kwargs)  # type: ignore[arg-type]
    assert info.value.field == field
    assert str(info.value).startswith(f"{field}: ")


def test_spec_refuses_both_post_stop_policies() -> None:
    # ROCK's SDK config: auto_archive_seconds and auto_delete_seconds are mutually exclusive.
    with pytest.raises(InvalidParameter) as info:
        SandboxSpec(image="x", auto_archive_seconds=60, auto_delete_seconds=0)
    assert "auto_archive_seconds" in str(info.value) and "auto_delete_seconds" in str(info.value)
    assert SandboxSpec(image="x", auto_archive_seconds=0).auto_archive_seconds == 0
    assert SandboxSpec(image="x", auto_delete_seconds=0).auto_delete_seconds == 0


def test_spec_accepts_plain_strings_for_the_pull_policy() -> None:
    assert SandboxSpec(image="x", pull="never").pull is PullPolicy.NEVER  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        SandboxSpec(image="x", pull="sometimes")  # type: ignore[arg-type]


def test_spec_hides_the_registry_password() -> None:
    spec = SandboxSpec(image="x", registry_username="me", registry_password="hunter2")
    assert "hunter2" not in repr(spec)
    assert spec.registry_password == "hunter2"


def test_models_are_frozen_and_keyword_only() -> None:
    spec = SandboxSpec(image="x")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        spec.memory = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        SandboxSpec("x")  # type: ignore[misc]


def test_phase_status_values_are_rocks() -> None:
    assert [s.value for s in PhaseStatus] == ["waiting", "running", "success", "failed", "timeout"]


def test_phase_from_text_and_failure() -> None:
    phase = Phase("failed", "Failed to pull image nope:latest")  # type: ignore[arg-type]
    assert phase.status is PhaseStatus.FAILED
    assert phase.failed
    assert Phase(PhaseStatus.TIMEOUT).failed
    assert not Phase(PhaseStatus.SUCCESS, "docker run success").failed
    assert Phase(PhaseStatus.WAITING).message == ""


def _record(**kw: object) -> SandboxRecord:
    base: dict[str, object] = {
        "sandbox_id": "abc123",
        "spec": SandboxSpec(image="python:3.11"),
        "create_time": T0,
    }
    base.update(kw)
    return SandboxRecord(**base)  # type: ignore[arg-type]


def test_record_defaults() -> None:
    record = _record()
    assert record.state is State.PENDING
    assert record.phases == {} and record.port_mapping == {}
    assert record.state_history == () and record.notes == ()
    assert record.reason is None and record.stop_time is None


@pytest.mark.parametrize("bad", ["", "  \t"])
def test_record_needs_a_sandbox_id(bad: str) -> None:
    with pytest.raises(InvalidParameter) as info:
        _record(sandbox_id=bad)
    assert info.value.field == "sandbox_id"


def test_record_lifecycle_round_trips_through_the_state_machine() -> None:
    record = _record()
    lifecycle = record.lifecycle.apply(Event.ALIVE, at=T0).apply(
        Event.STOP, at=T0 + timedelta(seconds=5)
    )
    stopped = attrs.evolve(
        record,
        state=lifecycle.state,
        state_history=lifecycle.history,
        reason="expired",
        stop_time=T0,
    )
    assert stopped.state is State.STOPPED
    assert [c.event for c in stopped.state_history] == [Event.ALIVE, Event.STOP]
    assert stopped.lifecycle == lifecycle
    assert isinstance(stopped.lifecycle, Lifecycle)
    assert record.state is State.PENDING  # the original value is unchanged


def test_record_sequences_are_tuples() -> None:
    record = _record(notes=["disk limit not enforced: storage driver overlay2 lacks project quota"])
    assert isinstance(record.notes, tuple)


def test_record_rocklet_port() -> None:
    assert _record().rocklet_host_port is None
    assert _record(port_mapping={ROCKLET_PORT: 32768, 8080: 32769}).rocklet_host_port == 32768


def test_runtime_status() -> None:
    status = RuntimeStatus(state="running", rocklet_host="127.0.0.1", rocklet_port=32768)  # type: ignore[arg-type]
    assert status.state is UnitState.RUNNING
    assert status.rocklet_address == ("127.0.0.1", 32768)
    assert RuntimeStatus(state=UnitState.CREATED).rocklet_address is None
    exited = RuntimeStatus(state=UnitState.EXITED, exit_code=137, oom_killed=True)
    assert exited.oom_killed and exited.exit_code == 137
    assert [s.value for s in UnitState] == ["created", "running", "exited", "missing"]


@pytest.mark.parametrize("port", [0, 65536, -1])
def test_runtime_status_rejects_impossible_ports(port: int) -> None:
    with pytest.raises(InvalidParameter) as info:
        RuntimeStatus(state=UnitState.RUNNING, rocklet_host="127.0.0.1", rocklet_port=port)
    assert info.value.field == "rocklet_port"
