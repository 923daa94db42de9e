"""The domain of rock: what a user asked for, what the engine knows, what a runtime reports.

These are plain ``attrs`` frozen values with type annotations. They have no ``to_json`` or
``from_dict``: turning them into JSON and back is the job of the converters in
:mod:`rock_core.converters`, one per boundary.

- :class:`SandboxSpec` — what the user asked for, with sizes already in bytes.
- :class:`SandboxRecord` — the engine's view of one sandbox: its spec, lifecycle state and
  history, startup phases, ports, times and the reason it stopped.
- :class:`RuntimeStatus` — what a runtime plugin reports about the unit (container, Nomad job)
  that holds a sandbox.

A few constrained scalar types (:data:`NonBlankStr`, :data:`SizeStr`, :data:`Port`, ...),
defined in :mod:`rock_core._constrained` and re-exported here, are ``NewType``\\ s: at run time
they are plain ``str``/``int``/``float``, but their annotation tells the converters which check
to run on input, and :func:`constrained` makes attrs run the same check when a model is built in
Python. A failed check raises
:class:`~rock_core.errors.InvalidParameter` naming the field and the value::

    >>> SandboxSpec(image="  ")
    Traceback (most recent call last):
    ...
    rock_core.errors.InvalidParameter: image: must not be blank
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

import attrs

from rock_core._constrained import (
    CHECKS,
    PRIORITY_MAX,
    PRIORITY_MIN,
    PRIORITY_NORMAL,
    ByteSize,
    NonBlankStr,
    NonNegativeFloat,
    NonNegativeInt,
    Port,
    PortMapping,
    PositiveFloat,
    PositiveInt,
    Priority,
    SizeStr,
    constrained,
    must,
)
from rock_core.egress import EgressPolicy
from rock_core.errors import InvalidParameter
from rock_core.sizes import GiB
from rock_core.states import Lifecycle, State, StateChange

# Tuple fields convert with ``tuple`` itself; mypy reads ``converter=tuple`` as taking an
# ``Iterable`` of an unsolved type, so it is told the element type (no cost at run time).
if TYPE_CHECKING:

    def _strings(items: Iterable[str], /) -> tuple[str, ...]: ...
    def _changes(items: Iterable[StateChange], /) -> tuple[StateChange, ...]: ...
    def _ports(items: Iterable[Port], /) -> tuple[Port, ...]: ...

else:
    _strings = _changes = _ports = tuple

__all__ = [
    "NonBlankStr",
    "SizeStr",
    "ByteSize",
    "NonNegativeInt",
    "PositiveInt",
    "NonNegativeFloat",
    "Priority",
    "RestartPolicy",
    "PRIORITY_MIN",
    "PRIORITY_MAX",
    "PRIORITY_NORMAL",
    "PositiveFloat",
    "Port",
    "PortMapping",
    "CHECKS",
    "constrained",
    "must",
    "ROCKLET_PORT",
    "PHASE_IMAGE_PULL",
    "PHASE_DOCKER_RUN",
    "PHASE_IMAGE_ARCHIVE",
    "PHASE_LOG_ARCHIVE",
    "PhaseStatus",
    "Phase",
    "PullPolicy",
    "SandboxSpec",
    "SandboxRecord",
    "SandboxStatus",
    "SandboxUsage",
    "UnitStats",
    "UnitState",
    "RuntimeStatus",
]


def _both_set_error(first: str, second: str, a: Any, b: Any) -> InvalidParameter:
    return InvalidParameter(
        f"{first} and {second} cannot both be set (got {a!r} and {b!r}); choose one",
        field=f"{first}, {second}",
        value=(a, b),
    )


# ---------------------------------------------------------------------------------------------
# Startup phases

#: Container port of the in-sandbox agent (ROCK's ``Port.PROXY``).
ROCKLET_PORT = 22555

#: Phase names, as ROCK reports them in ``get_status``'s ``status`` map.
PHASE_IMAGE_PULL = "image_pull"
PHASE_DOCKER_RUN = "docker_run"
PHASE_IMAGE_ARCHIVE = "image_archive"
PHASE_LOG_ARCHIVE = "log_archive"


class PhaseStatus(str, enum.Enum):
    """How far one phase of starting (or archiving) a sandbox got."""

    WAITING = "waiting"
    RUNNING = "running"
    SUCCESS = "success"
    FAILED = "failed"
    TIMEOUT = "timeout"


# Enum fields' converters: a member passes with one class check (``PhaseStatus(member)`` looks it
# up again); anything else is read, or refused, by ``PhaseStatus(value)`` as before.
def _phase_status(value: Any) -> PhaseStatus:
    return value if value.__class__ is PhaseStatus else PhaseStatus(value)


@attrs.frozen
class Phase:
    """One step of starting or archiving a sandbox (``image_pull``, ``docker_run``, ...).

    ``message`` is for people: ``"Failed to pull image foo:bar: not found"``.
    """

    status: PhaseStatus = attrs.field(converter=_phase_status)
    message: str = ""
    started_at: datetime | None = None
    completed_at: datetime | None = None

    @property
    def failed(self) -> bool:
        """Whether this phase ended badly (``failed`` or ``timeout``): the start has failed."""
        return self.status in (PhaseStatus.FAILED, PhaseStatus.TIMEOUT)


# ---------------------------------------------------------------------------------------------
# What the user asked for


class PullPolicy(str, enum.Enum):
    """When to pull the image: only if it is not present, every time, or never."""

    MISSING = "missing"
    ALWAYS = "always"
    NEVER = "never"


class RestartPolicy(str, enum.Enum):
    """What the engine does when a running sandbox's unit dies behind its back (a crash, a kill,
    an OOM kill): nothing (``never``, the default), start it again when it failed (``on-failure``:
    a non-zero exit, an OOM kill, a vanished unit), or whenever it ends (``always``)."""

    NEVER = "never"
    ON_FAILURE = "on-failure"
    ALWAYS = "always"


def _pull_policy(value: Any) -> PullPolicy:
    return value if value.__class__ is PullPolicy else PullPolicy(value)


def _restart_policy(value: Any) -> RestartPolicy:
    return value if value.__class__ is RestartPolicy else RestartPolicy(value)


def _state(value: Any) -> State:
    return value if value.__class__ is State else State(value)


@attrs.frozen(kw_only=True)
class SandboxSpec:
    """What the user asked for, validated, with sizes in bytes (ROCK's defaults otherwise).

    Build one from a ``SandboxStartRequest`` with
    :func:`rock_core.converters.spec_from_start_request`.

    ``auto_clear_seconds`` is the idle timeout; ``None`` means the engine's configured default.
    ``auto_delete_seconds`` / ``auto_archive_seconds`` say what happens after a stop (``None``:
    the engine's policy, ``0``: at once); at most one of them may be set (as in ROCK's SDK).
    ``disk`` ``None`` means no disk limit. ``sandbox_id`` is the id the user asked for, ``None``
    to let the engine choose.
    ``runtime_options`` carries backend-specific settings (e.g. ``use_kata_runtime``) as
    JSON-compatible values; a runtime rejects options it cannot honour rather than ignore them.
    ``pids_limit`` caps the processes (and threads) of the sandbox (``None``: the engine's
    default); ``cap_add`` names Linux capabilities to grant beyond rock's reduced set
    (``"NET_RAW"`` for ``ping``), which the engine checks against what it allows.
    ``priority`` orders the start queue (:mod:`rock_core.engine.start_queue`): higher first.
    ``restart_policy`` and ``max_restarts`` say whether a unit that dies is started again
    (:mod:`rock_core.engine.crash_restarts`), and at most how many times.
    ``tenant`` is the namespace the sandbox belongs to, set by the engine, never by a request
    (:mod:`rock_core.tenancy`): the names it gives (its network group, its archive's key) are
    its tenant's, and its tenant's quotas count it.
    """

    image: NonBlankStr = constrained(NonBlankStr)
    image_os: str = "linux"
    memory: PositiveInt = constrained(PositiveInt, default=8 * GiB)
    cpus: PositiveFloat = constrained(PositiveFloat, default=2.0)
    limit_cpus: PositiveFloat | None = constrained(PositiveFloat, optional=True, default=None)
    disk: PositiveInt | None = constrained(PositiveInt, optional=True, default=50 * GiB)
    num_gpus: NonNegativeInt | None = constrained(NonNegativeInt, optional=True, default=None)
    accelerator_type: str | None = None
    pull: PullPolicy = attrs.field(default=PullPolicy.MISSING, converter=_pull_policy)
    startup_timeout: PositiveFloat | None = constrained(PositiveFloat, optional=True, default=None)
    auto_clear_seconds: NonNegativeInt | None = constrained(
        NonNegativeInt, optional=True, default=None
    )
    auto_delete_seconds: NonNegativeInt | None = constrained(
        NonNegativeInt, optional=True, default=None
    )
    auto_archive_seconds: NonNegativeInt | None = constrained(
        NonNegativeInt, optional=True, default=None
    )
    registry_username: str | None = None
    registry_password: str | None = attrs.field(default=None, repr=False)
    env: dict[str, str] = attrs.field(factory=dict)
    metadata: dict[str, str] = attrs.field(factory=dict)
    user_id: str | None = None
    experiment_id: str | None = None
    namespace: str | None = None
    cluster: str | None = None
    sandbox_id: NonBlankStr | None = constrained(NonBlankStr, optional=True, default=None)
    runtime_options: dict[str, Any] = attrs.field(factory=dict)
    pids_limit: PositiveInt | None = constrained(PositiveInt, optional=True, default=None)
    cap_add: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    priority: Priority = constrained(Priority, default=PRIORITY_NORMAL)
    restart_policy: RestartPolicy = attrs.field(
        default=RestartPolicy.NEVER, converter=_restart_policy
    )
    max_restarts: NonNegativeInt = constrained(NonNegativeInt, default=3)
    tenant: str | None = None
    #: Where the sandbox may connect (:mod:`rock_core.egress`); ``None``: no policy.
    egress: EgressPolicy | None = None

    def __attrs_post_init__(self) -> None:
        if self.auto_archive_seconds is not None and self.auto_delete_seconds is not None:
            raise _both_set_error(
                "auto_archive_seconds",
                "auto_delete_seconds",
                self.auto_archive_seconds,
                self.auto_delete_seconds,
            )


# ---------------------------------------------------------------------------------------------
# What the engine knows


@attrs.frozen(kw_only=True)
class SandboxRecord:
    """The engine's view of one sandbox; what its store keeps.

    ``state`` and ``state_history`` are the lifecycle (see :attr:`lifecycle`);
    ``auto_transition_state``/``auto_transition_time`` are the next automatic step after a stop
    (``deleted`` or ``archived`` at that time). ``reason`` says why the sandbox stopped
    (``"expired"``, ``"container exited with code 137 (OOM killed)"``); ``notes`` are things the
    user should see, such as a resource limit the runtime could not enforce.
    ``runtime`` names the runtime plugin that holds the sandbox; ``owner`` the API key owner.
    The idle deadline is not stored: it follows the last call, which the engine keeps in memory
    (after a restart the idle clock starts again, since nobody could call meanwhile).
    """

    sandbox_id: NonBlankStr = constrained(NonBlankStr)
    spec: SandboxSpec
    create_time: datetime
    state: State = attrs.field(default=State.PENDING, converter=_state)
    phases: dict[str, Phase] = attrs.field(factory=dict)
    port_mapping: PortMapping = attrs.field(factory=dict)
    host_name: str | None = None
    host_ip: str | None = None
    owner: str | None = None
    runtime: str | None = None
    start_time: datetime | None = None
    stop_time: datetime | None = None
    archive_time: datetime | None = None
    delete_time: datetime | None = None
    auto_transition_state: State | None = None
    auto_transition_time: datetime | None = None
    state_history: tuple[StateChange, ...] = attrs.field(default=(), converter=_changes)
    reason: str | None = None
    notes: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    #: The hardening the runtime applied to the unit (pids limit, capabilities, network, ...).
    security: dict[str, Any] = attrs.field(factory=dict)
    #: The sandbox's rocklet secret: the engine sends it on every call. Never shown to users.
    rocklet_token: str | None = attrs.field(default=None, repr=False)
    #: The runtime's id of the unit that holds the sandbox (a container id, a Nomad job id): how
    #: the engine finds it again, whatever the unit's name or labels (a warm-pool member keeps its own).
    unit_id: str | None = None
    #: Where the engine reaches the sandbox's rocklet (host and port, or a unix socket's path
    #: and 0) while it runs: how another engine of a cluster calls into it.
    rocklet_address: tuple[str, int] | None = attrs.field(default=None, repr=False)
    #: How many times the engine started the sandbox again after its unit died (restart policy).
    restart_count: int = 0
    #: When the running sandbox was paused (``pause()``: its processes frozen, its memory kept);
    #: ``None`` while it is not (rock_core/engine/pausing.py). Its state stays ``running``.
    paused_time: datetime | None = None

    @property
    def paused(self) -> bool:
        """Whether the sandbox is running but paused (frozen until ``resume()``)."""
        return self.paused_time is not None and self.state is State.RUNNING

    @property
    def lifecycle(self) -> Lifecycle:
        """The record's state and history as a :class:`~rock_core.states.Lifecycle` value."""
        return Lifecycle(state=self.state, history=self.state_history)

    @property
    def rocklet_host_port(self) -> int | None:
        """The host port published for the in-sandbox agent, if the runtime published one."""
        return self.port_mapping.get(Port(ROCKLET_PORT))


@attrs.frozen
class SandboxStatus:
    """What the engine knows of a sandbox now: its :class:`SandboxRecord` plus what is only in
    memory, its place in the start queue and its idle deadline.

    The engine answers ``get_status`` with it; the admin and the SDK turn it into ROCK's
    ``SandboxStatusResponse`` (:func:`rock_core.responses.status_response`). The record's
    fields most callers read are repeated as properties.

    :param queue_position: its place in the start queue while it waits for a slot (1 = next).
    :param idle_deadline: when it is stopped for idling, if it is pending or running and has an
        ``auto_clear_seconds``.
    :param usage: its resource use as last sampled, if it runs and the runtime measures it.
    """

    record: SandboxRecord
    queue_position: int | None = None
    idle_deadline: datetime | None = None
    usage: SandboxUsage | None = None

    @property
    def sandbox_id(self) -> str:
        """The sandbox's id."""
        return self.record.sandbox_id

    @property
    def state(self) -> State:
        """Its lifecycle state."""
        return self.record.state

    @property
    def phases(self) -> dict[str, Phase]:
        """Its start and archive phases."""
        return self.record.phases

    @property
    def port_mapping(self) -> PortMapping:
        """Its ports on the host, by port in the sandbox."""
        return self.record.port_mapping

    @property
    def reason(self) -> str | None:
        """Why it stopped (or its archive or restore failed)."""
        return self.record.reason


@attrs.frozen
class UnitStats:
    """One sample of a running unit's resource use, as its runtime measures it (cgroups, the
    container engine's statistics), without asking the rocklet. ``None``: not measured.

    :param cpu_seconds: CPU time used since the unit started (all its processes).
    :param memory_bytes: memory in use now; ``memory_peak_bytes`` the most since it started;
        ``memory_limit_bytes`` its limit.
    :param network_rx_bytes: / ``network_tx_bytes``: bytes received and sent since it started.
    :param disk_bytes: bytes in its writable layer (measured less often than the rest).
    :param pids: processes (and threads) in it now.
    :param oom_kills: processes the kernel's OOM killer ended in it.
    :param egress_refused: connections its egress policy refused (``None``: it has none).
    """

    cpu_seconds: float
    memory_bytes: int
    memory_peak_bytes: int | None = None
    memory_limit_bytes: int | None = None
    network_rx_bytes: int | None = None
    network_tx_bytes: int | None = None
    disk_bytes: int | None = None
    pids: int | None = None
    oom_kills: int = 0
    egress_refused: int | None = None


@attrs.frozen
class SandboxUsage:
    """A running sandbox's resource use, as the engine last sampled it (:mod:`rock_core.engine.monitoring`).

    ``cpu_percent`` is of one core over the last sampling interval (200 = two cores busy);
    ``memory_percent`` of its limit. ``warnings`` says what needs attention ("memory at 93% of
    its limit").
    """

    sampled_at: datetime
    cpu_percent: float
    cpu_seconds: float
    memory_bytes: int
    memory_peak_bytes: int | None
    memory_limit_bytes: int | None
    network_rx_bytes: int | None
    network_tx_bytes: int | None
    disk_bytes: int | None
    pids: int | None
    oom_kills: int
    warnings: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    #: Connections its egress policy refused so far (``None``: no policy, or not counted).
    egress_refused: int | None = None

    @property
    def memory_percent(self) -> float | None:
        """Memory in use as a share of the limit, in percent (``None``: no limit known)."""
        if not self.memory_limit_bytes:
            return None
        return 100.0 * self.memory_bytes / self.memory_limit_bytes


# ---------------------------------------------------------------------------------------------
# What a runtime reports


class UnitState(str, enum.Enum):
    """The condition of the unit (container, Nomad allocation) that holds a sandbox."""

    CREATED = "created"
    RUNNING = "running"
    EXITED = "exited"
    MISSING = "missing"


def _unit_state(value: Any) -> UnitState:
    return value if value.__class__ is UnitState else UnitState(value)


@attrs.frozen(kw_only=True)
class RuntimeStatus:
    """What a runtime's ``inspect`` reports about a sandbox's unit.

    ``rocklet_host``/``rocklet_port`` is where the in-sandbox agent listens, once known; a
    sandbox without a network is reached through the unix socket ``rocklet_socket`` (a path on
    the engine's host) instead. ``exit_code`` and ``oom_killed`` explain an ``exited`` unit;
    ``error`` is the runtime's own words when something is wrong (``"no such container"``,
    ``"node lost"``, ``"OOM killed"``). ``node_name``/``node_address`` say which host holds the
    unit, for runtimes that place units on other hosts (the engine shows them as the sandbox's
    ``host_name``/``host_ip``; ``None``: the engine's own host).
    """

    state: UnitState = attrs.field(converter=_unit_state)
    exit_code: int | None = None
    oom_killed: bool = False
    rocklet_host: str | None = None
    rocklet_port: Port | None = constrained(Port, optional=True, default=None)
    error: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    #: Every published container port → its host port on 127.0.0.1 (22555, 8080, ...).
    port_mapping: PortMapping = attrs.field(factory=dict)
    rocklet_socket: str | None = None
    #: Container ports the runtime did not publish and wants the engine to make reachable on
    #: its own host, through the rocklet (see :mod:`rock_core.engine.forwarding`).
    forwarded_ports: tuple[Port, ...] = attrs.field(default=(), converter=_ports)
    node_name: str | None = None
    node_address: str | None = None

    @property
    def rocklet_address(self) -> tuple[str, int] | None:
        """``(host, port)`` of the in-sandbox agent, ``(socket path, 0)`` when it is reached
        through a unix socket, or ``None`` while it is not known. Either form is what
        :class:`~rock_core.rocklet_client.RockletClient` takes."""
        if self.rocklet_socket is not None:
            return (self.rocklet_socket, 0)
        if self.rocklet_host is None or self.rocklet_port is None:
            return None
        return (self.rocklet_host, self.rocklet_port)
