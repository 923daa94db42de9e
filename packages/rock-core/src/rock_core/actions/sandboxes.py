"""A sandbox's lifecycle: the start request, warmup, ids, status, listings and warm pools."""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

import attrs

from rock_core.actions._fields import sandbox_id_field
from rock_core.actions._operation import Operation
from rock_core.actions.responses import SandboxResponse
from rock_core.models import (
    NonBlankStr,
    NonNegativeFloat,
    NonNegativeInt,
    Phase,
    PortMapping,
    PositiveFloat,
    PositiveInt,
    Priority,
    PullPolicy,
    RestartPolicy,
    SizeStr,
    constrained,
)
from rock_core.states import State

__all__ = [
    "SandboxStartRequest",
    "EgressRequest",
    "WarmupRequest",
    "SandboxIdRequest",
    "BatchSandboxStatusRequest",
    "WaitAnyRequest",
    "StartBatchItem",
    "StartBatchRequest",
    "StartBatchOutcome",
    "StartBatchResponse",
    "SandboxStartResponse",
    "StateHistoryEntry",
    "SandboxStatusResponse",
    "IsAliveResponse",
    "BatchSandboxStatusResponse",
    "WaitAnyResponse",
    "SandboxListResponse",
    "WarmPoolStatus",
    "WarmPoolsResponse",
]


# Enum fields' converters: a member passes with one class check (``State(member)`` looks it up
# again); anything else is read, or refused, by ``State(value)`` as before.
def _state(value: Any) -> State:
    return value if value.__class__ is State else State(value)


def _optional_state(value: Any) -> State | None:
    return None if value is None else _state(value)


def _pull_policy(value: Any) -> PullPolicy:
    return value if value.__class__ is PullPolicy else PullPolicy(value)


def _optional_restart_policy(value: Any) -> RestartPolicy | None:
    if value is None or value.__class__ is RestartPolicy:
        return value
    return RestartPolicy(value)


@attrs.frozen(kw_only=True)
class SandboxStartRequest:
    """The body of ``POST /start`` and ``/start_async``: ROCK's fields and defaults.

    ``memory``/``disk`` are sizes as text (``"8g"``, ``"50G"``); ``cpus`` is Docker's ``--cpus``
    (or CPU shares when ``limit_cpus`` caps it). Idle timeout, most precise first:
    ``auto_clear_seconds`` (rock), ``auto_clear_time_minutes`` (ROCK's server),
    ``auto_clear_time`` (minutes, sent by ROCK's SDK); none of them = the server's default.
    ``auto_archive_seconds``/``auto_delete_seconds``: what to do after a stop (``0`` = at once).
    ``env``/``metadata`` (rock additions): container environment and free-form labels.
    ``network`` (rock addition): ``bridge``, ``host`` or ``none``; ``None`` = the runtime's default.
    ``network_group`` (rock addition): sandboxes of one group share a network and may connect to
    each other (by sandbox id as host name); without it no sandbox reaches another.
    ``pids_limit`` (rock addition): the most processes the sandbox may run (``None``: the
    server's default, 4096). ``cap_add`` (rock addition): Linux capabilities to grant beyond
    rock's reduced set, e.g. ``["NET_RAW"]`` for ``ping``; the server may refuse them.
    ``priority`` (rock addition): 0..9, higher starts first when starts queue (``None``: 5,
    normal); a server with API keys caps it per key. ``restart_policy`` (rock addition):
    ``never`` (``None``: the default), ``on-failure`` or ``always``: start the sandbox again,
    same id, when its container dies, at most ``max_restarts`` times (``None``: 3).
    """

    image: NonBlankStr = constrained(NonBlankStr)
    image_os: str = "linux"
    auto_clear_time_minutes: NonNegativeInt | None = constrained(
        NonNegativeInt, optional=True, default=None
    )
    auto_clear_time: NonNegativeInt | None = constrained(
        NonNegativeInt, optional=True, default=None
    )
    pull: PullPolicy = attrs.field(default=PullPolicy.MISSING, converter=_pull_policy)
    memory: SizeStr = constrained(SizeStr, default="8g")
    cpus: PositiveFloat = constrained(PositiveFloat, default=2)
    limit_cpus: PositiveFloat | None = constrained(PositiveFloat, optional=True, default=None)
    sandbox_id: NonBlankStr | None = constrained(NonBlankStr, optional=True, default=None)
    registry_username: str | None = None
    registry_password: str | None = attrs.field(default=None, repr=False)
    startup_timeout: PositiveFloat | None = constrained(PositiveFloat, optional=True, default=None)
    use_kata_runtime: bool = False
    auto_archive_seconds: NonNegativeInt | None = constrained(
        NonNegativeInt, optional=True, default=None
    )
    auto_delete_seconds: NonNegativeInt | None = constrained(
        NonNegativeInt, optional=True, default=None
    )
    disk: SizeStr | None = constrained(SizeStr, optional=True, default="50G")
    num_gpus: NonNegativeInt | None = constrained(NonNegativeInt, optional=True, default=None)
    accelerator_type: str | None = None
    # rock additions (see the module docstring)
    auto_clear_seconds: NonNegativeInt | None = constrained(
        NonNegativeInt, optional=True, default=None
    )
    env: dict[str, str] | None = None
    metadata: dict[str, str] | None = None
    network: str | None = None
    network_group: str | None = None
    pids_limit: PositiveInt | None = constrained(PositiveInt, optional=True, default=None)
    cap_add: list[str] | None = None
    priority: Priority | None = constrained(Priority, optional=True, default=None)
    restart_policy: RestartPolicy | None = attrs.field(
        default=None, converter=_optional_restart_policy
    )
    max_restarts: NonNegativeInt | None = constrained(NonNegativeInt, optional=True, default=None)
    #: (rock) Start from this snapshot of the caller's (its files; ``image`` is then the snapshot's).
    snapshot: NonBlankStr | None = constrained(NonBlankStr, optional=True, default=None)
    #: (rock) Where the sandbox may connect: an egress policy's wire form
    #: (:func:`rock_core.egress.egress_policy` reads and checks it).
    egress: dict[str, Any] | None = None


@attrs.frozen(kw_only=True)
class WarmupRequest(SandboxStartRequest):
    """The body of ``POST /warmup/tasks``: ROCK's ``{"image": ...}`` has the image pulled ahead of
    the starts that need it. rock addition: ``size`` > 0 keeps that many sandboxes of the kind the
    other (start-request) fields describe started in a warm pool; ``0`` removes such a pool.
    """

    size: NonNegativeInt | None = constrained(NonNegativeInt, optional=True, default=None)

    def start_request(self) -> SandboxStartRequest:
        """The start request this warmup prepares for (every field but ``size``)."""
        return SandboxStartRequest(
            **{f.name: getattr(self, f.name) for f in attrs.fields(SandboxStartRequest)}
        )


@attrs.frozen(kw_only=True)
class SandboxIdRequest:
    """``{"sandbox_id": ...}``: the body of ``/stop``, ``/delete`` and ``/restart``."""

    sandbox_id: NonBlankStr = sandbox_id_field()


@attrs.frozen(kw_only=True)
class BatchSandboxStatusRequest:
    """``POST /sandboxes/batch``: the statuses of several sandboxes at once."""

    sandbox_ids: list[str]


@attrs.frozen(kw_only=True)
class WaitAnyRequest:
    """(rock) ``POST /sandboxes/wait_any``: wait up to ``wait`` seconds until the start of any
    of ``sandbox_ids`` has settled (one held request for many starting sandboxes).

    ``watch`` (optional): the ids are added to a watch the admin keeps, and the wait is for any
    id of the watch; each settled id is answered once, then leaves it. ``""`` opens a watch (the
    answer names it); a client then sends each id once, not at every ask. An answer naming
    another watch than the one asked about means that one was lost (an admin restart, or unused
    for minutes): send all the ids still waited for again.

    ``brief`` (optional): a sandbox whose start settled ``running`` is answered by what a start's
    wait needs, not its whole status: ``sandbox_id``, ``state``, ``is_alive``, ``host_name`` and
    ``host_ip`` (the other fields are absent; ``get_status`` has them). Any other outcome (a
    failed or stopped start) is answered in full, with its phases and reason."""

    sandbox_ids: list[str]
    wait: NonNegativeFloat = constrained(NonNegativeFloat, default=0.0)
    watch: str | None = None
    brief: bool = False


@attrs.frozen(kw_only=True)
class StartBatchItem:
    """(rock) One start of ``POST /sandboxes/start_batch``: the body ``/start_async`` takes
    (``request``, read as that route reads it, so a bad field fails this item alone), and what
    ``/start_async`` reads from its headers: the identity (``X-User-Id``, ...) and the
    ``Idempotency-Key``."""

    request: dict[str, Any]
    user_id: str | None = None
    experiment_id: str | None = None
    namespace: str | None = None
    cluster: str | None = None
    idempotency_key: str | None = None


@attrs.frozen(kw_only=True)
class StartBatchRequest:
    """(rock) ``POST /sandboxes/start_batch``: accept many starts in one request, each as
    ``/start_async`` would (each admitted for the caller's tenant, within its quota)."""

    items: list[StartBatchItem]


@attrs.frozen(kw_only=True)
class StartBatchOutcome:
    """(rock) One item's outcome, in the order asked: ``sandbox`` (what ``/start_async``
    answers), or ``error`` with the ``message`` and codes (``code``, ``rock_code``) of the
    ``Failed`` envelope ``/start_async`` would have answered."""

    sandbox: SandboxStartResponse | None = None
    message: str | None = None
    error: str | None = None
    code: int | None = None
    rock_code: int | None = None


@attrs.frozen(kw_only=True)
class StartBatchResponse(SandboxResponse):
    """(rock) Result of ``POST /sandboxes/start_batch``: one outcome per item, in order."""

    items: list[StartBatchOutcome] = attrs.field(factory=list)


@attrs.frozen(kw_only=True)
class SandboxStartResponse(SandboxResponse):
    """Result of ``/start``, ``/start_async`` and ``/restart``: where the sandbox is placed and
    the resources it got (``memory``/``disk`` in ROCK's ``"8.00g"`` form)."""

    sandbox_id: str | None = None
    host_name: str | None = None
    host_ip: str | None = None
    disk: str | None = None
    disk_limit_rootfs: str | None = None
    cpus: float | None = None
    memory: str | None = None


@attrs.frozen(kw_only=True)
class StateHistoryEntry:
    """One lifecycle transition as ``get_status`` reports it.

    Like :class:`rock_core.states.StateChange`, but ``event`` is plain text, so a client can read
    the history of a server that knows more events than it does (ROCK's ``delete_running``).
    """

    from_state: State = attrs.field(converter=_state)
    to_state: State = attrs.field(converter=_state)
    event: str
    timestamp: datetime

    @classmethod
    def from_change(cls, change: Any) -> StateHistoryEntry:
        """The entry for a :class:`~rock_core.states.StateChange`."""
        event = change.event.value if isinstance(change.event, enum.Enum) else str(change.event)
        return cls(
            from_state=change.from_state,
            to_state=change.to_state,
            event=event,
            timestamp=change.timestamp,
        )


@attrs.frozen(kw_only=True)
class SandboxStatusResponse:
    """Result of ``/get_status``: ROCK's fields, plus rock's ``reason``, ``notes`` and
    ``queue_position``.

    ``status`` is the phase map (``{"image_pull": {...}, "docker_run": {...}}``);
    ``port_mapping`` maps container ports to host ports; ``memory``/``disk`` are in ROCK's
    ``"8.00g"`` form (``disk_limit_rootfs`` is ROCK's deprecated copy of ``disk``).
    ``auto_stop_time`` is the idle deadline of a live sandbox; ``auto_archive_time`` /
    ``auto_delete_time`` the scheduled next step of a stopped or archived one.
    ``reason`` says why it stopped, ``notes`` lists limits that are not enforced and similar,
    ``queue_position`` is its place in the start queue while it waits (1 = next).
    ``restart_count`` is how many times it was started again after its container died (its
    ``restart_policy``; each restart's reason is in ``notes``). ``usage`` is a running sandbox's
    resource use as the engine last sampled it (``cpu_percent``, ``memory_bytes``,
    ``memory_limit_bytes``, network bytes, ``pids``, ``oom_kills``, ``sampled_at``, ...);
    ``warnings`` what needs attention now ("memory at 93% of its limit").
    ``paused``: a ``running`` sandbox frozen by ``pause()`` (since ``paused_time``; its
    ``is_alive`` is false until ``resume()``): ROCK's ``state`` stays ``running``.
    ``security`` is the hardening its unit got: ``pids_limit``, ``nofile_limit``,
    ``no_new_privileges``, ``capabilities`` (those it keeps), ``network`` (``isolated``,
    ``group:NAME``, ``host`` or ``none``) and ``rocklet_auth`` (never the secret itself).
    """

    sandbox_id: str | None = None
    status: dict[str, Phase] | None = None
    state: State | None = attrs.field(default=None, converter=_optional_state)
    port_mapping: PortMapping | None = None
    host_name: str | None = None
    host_ip: str | None = None
    is_alive: bool = True
    image: str | None = None
    metadata: dict[str, str] | None = None
    gateway_version: str | None = None
    swe_rex_version: str | None = None
    user_id: str | None = None
    experiment_id: str | None = None
    namespace: str | None = None
    cpus: float | None = None
    memory: str | None = None
    num_gpus: int | None = None
    accelerator_type: str | None = None
    disk: str | None = None
    disk_limit_rootfs: str | None = None
    start_time: datetime | None = None
    stop_time: datetime | None = None
    create_time: datetime | None = None
    archive_time: datetime | None = None
    delete_time: datetime | None = None
    auto_stop_time: datetime | None = None
    auto_archive_time: datetime | None = None
    auto_delete_time: datetime | None = None
    state_history: list[StateHistoryEntry] = attrs.field(factory=list)
    # rock additions
    reason: str | None = None
    notes: list[str] = attrs.field(factory=list)
    queue_position: int | None = None
    security: dict[str, Any] = attrs.field(factory=dict)
    restart_count: int = 0
    usage: dict[str, Any] | None = None
    warnings: list[str] = attrs.field(factory=list)
    paused: bool = False
    paused_time: datetime | None = None
    #: (rock) The egress policy in force (its wire form; ``None``: none).
    egress: dict[str, Any] | None = None


@attrs.frozen(kw_only=True)
class IsAliveResponse:
    """Whether the sandbox's agent answers; true in a boolean context when it does."""

    is_alive: bool
    message: str = ""

    def __bool__(self) -> bool:
        return self.is_alive


@attrs.frozen(kw_only=True)
class BatchSandboxStatusResponse(SandboxResponse):
    """Result of ``POST /sandboxes/batch``: statuses of the live sandboxes among those asked."""

    statuses: list[SandboxStatusResponse] | None = None


@attrs.frozen(kw_only=True)
class WaitAnyResponse(SandboxResponse):
    """(rock) Result of ``POST /sandboxes/wait_any``: the statuses (``include_all_states``) of
    the asked sandboxes whose start has settled (none when the wait ran out; with ``brief``, a
    running one's in brief), and the asked ids the caller has no sandbox of (``unknown``); with
    a ``watch`` asked, the watch's name."""

    statuses: list[SandboxStatusResponse] = attrs.field(factory=list)
    unknown: list[str] = attrs.field(factory=list)
    watch: str | None = None


@attrs.frozen(kw_only=True)
class SandboxListResponse(SandboxResponse):
    """Result of ``GET /sandboxes``: one page of live sandboxes."""

    items: list[SandboxStatusResponse] = attrs.field(factory=list)
    total: int = 0
    has_more: bool = False


@attrs.frozen(kw_only=True)
class WarmPoolStatus:
    """(rock) A warm pool: its key and image, target ``size``, members ``ready`` and ``starting``,
    starts served (``claimed``), members made, failures and the last failure's reason."""

    key: str
    image: str
    size: int
    ready: int
    starting: int
    claimed: int
    made: int
    failures: int
    last_error: str | None = None


@attrs.frozen(kw_only=True)
class WarmPoolsResponse(SandboxResponse):
    """Result of ``GET /warm_pools``: every warm pool of the engine."""

    pools: list[WarmPoolStatus] = attrs.field(factory=list)


# -- operations --------------------------------------------------------------------------------

GET_STATISTICS: Operation[dict, dict] = Operation(  # type: ignore[type-arg]
    name="get_statistics",
    request=dict,
    response=dict,
    rocklet="GET /get_statistics",
    admin="GET /get_sandbox_statistics",
    activity=False,
    kind="custom",
    failure="get sandbox statistics failed",
    summary="CPU, memory, disk and network figures of a running sandbox.",
)


@attrs.frozen(kw_only=True)
class EgressRequest:
    """(rock) ``POST /sandboxes/{sandbox_id}/egress``: replace a running sandbox's egress
    policy with ``egress`` (its wire form; ``None``: no policy), enforced before the answer."""

    sandbox_id: NonBlankStr = sandbox_id_field()
    egress: dict[str, Any] | None = None
