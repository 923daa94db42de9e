"""ROCK's wire models: the JSON bodies of the admin API and the rocklet, with ROCK's field names.

Each class mirrors the ``rl-rock`` 1.11 model of the same name (``rock/actions/...``,
``rock/admin/proto/...``): same fields, same defaults, keyword construction and attribute reads,
so ``rock.actions`` can re-export them for ROCK users. They are frozen ``attrs`` classes; JSON
goes through :mod:`rock_core.converters` (``structure_wire`` / ``unstructure_wire``), which rejects
unknown keys and reports every bad field with its path.

Client models and their server variants
    ROCK's SDK sends the client model plus ``sandbox_id``; the admin and the rocklet read the
    server variant, which adds that (non-blank) ``sandbox_id`` and a few server-only options:
    :class:`Command` / :class:`SandboxCommand`, :class:`CreateBashSessionRequest` /
    :class:`SandboxCreateBashSessionRequest`, :class:`BashAction` / :class:`SandboxBashAction`,
    :class:`CloseBashSessionRequest` / :class:`SandboxCloseBashSessionRequest`,
    :class:`ReadFileRequest` / :class:`SandboxReadFileRequest`, :class:`WriteFileRequest` /
    :class:`SandboxWriteFileRequest`.

Sizes stay text
    ``SandboxStartRequest.memory`` and ``disk`` keep the text the client sent (``"8g"``); they are
    checked to be sizes on input, and turned into bytes when a
    :class:`~rock_core.models.SandboxSpec` is built (:func:`rock_core.converters.spec_from_start_request`).

Differences from ROCK, on purpose
    - ``SandboxStartRequest`` also accepts ``auto_clear_time`` (sent by ROCK's own SDK, ignored by
      ROCK's server) and four rock additions: ``auto_clear_seconds`` (idle timeout with second
      precision), ``env`` and ``metadata`` (ROCK only offers these through its E2B endpoint),
      and ``network`` (the sandbox's network mode).
      ``auto_clear_time_minutes`` defaults to ``None`` = "the server's configured default", which
      is what ROCK does when the field is not sent (its declared 360 only applies when sent).
    - ``SandboxStatusResponse`` adds ``reason``, ``notes``, ``queue_position`` and ``security``.
    - :class:`SandboxIdRequest` names the ``{"sandbox_id": ...}`` body of ``/stop``, ``/delete``
      and ``/restart``, which ROCK reads as an untyped dict.
    - Unknown keys are an error (ROCK's server silently drops them, e.g. the documented but
      unused ``resources``), so a misspelt field is reported instead of ignored.
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any, Literal, Union

import attrs

from rock_core.models import (
    NonBlankStr,
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
    "CommandLine",
    # requests
    "Command",
    "SandboxCommand",
    "CreateBashSessionRequest",
    "CreateSessionRequest",
    "SandboxCreateBashSessionRequest",
    "BashAction",
    "Action",
    "SandboxBashAction",
    "CloseBashSessionRequest",
    "CloseSessionRequest",
    "SandboxCloseBashSessionRequest",
    "ReadFileRequest",
    "SandboxReadFileRequest",
    "WriteFileRequest",
    "SandboxWriteFileRequest",
    "UploadMode",
    "UploadRequest",
    "ChownRequest",
    "ChmodRequest",
    "SandboxStartRequest",
    "WarmupRequest",
    "WarmPoolStatus",
    "WarmPoolsResponse",
    "SandboxIdRequest",
    "BatchSandboxStatusRequest",
    "EnvMakeRequest",
    "EnvResetRequest",
    "EnvStepRequest",
    "EnvCloseRequest",
    "EnvListRequest",
    # responses
    "ResponseStatus",
    "RockResponse",
    "SandboxResponse",
    "CommandResponse",
    "BashObservation",
    "Observation",
    "CreateBashSessionResponse",
    "CreateSessionResponse",
    "CloseBashSessionResponse",
    "CloseSessionResponse",
    "ReadFileResponse",
    "WriteFileResponse",
    "UploadResponse",
    "FileUploadResponse",
    "IsAliveResponse",
    "ExecuteBashSessionResponse",
    "ChownResponse",
    "ChmodResponse",
    "DownloadFileResponse",
    "DownloadResponse",
    "CloseResponse",
    "SandboxStartResponse",
    "StateHistoryEntry",
    "SandboxStatusResponse",
    "BatchSandboxStatusResponse",
    "SandboxListResponse",
    "InterruptSessionResponse",
    "ProcessInfo",
    "DirEntry",
    "ListDirResponse",
    "EnvMakeResponse",
    "EnvResetResponse",
    "EnvStepResponse",
    "EnvCloseResponse",
    "EnvListResponse",
]

#: A command to execute: one shell string, or an argv list (``["ls", "-l"]``).
CommandLine = Union[str, list[str]]


def _sandbox_id() -> Any:
    # Server variants need to know which sandbox; ROCK declares the field NonBlankStr.
    return constrained(NonBlankStr)


# =============================================================================================
# Requests

# --- commands -------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class Command:
    """A one-shot command (``POST /execute``): ``command`` with ``timeout`` seconds (``None``: no
    limit), extra ``env`` merged over the agent's environment, run in ``cwd``."""

    session_type: Literal["bash"] = "bash"
    command: CommandLine
    timeout: float | None = 1200
    env: dict[str, str] | None = None
    cwd: str | None = None


@attrs.frozen(kw_only=True)
class SandboxCommand(Command):
    """:class:`Command` as the admin and the rocklet read it: with ``sandbox_id``, and
    ``shell`` (run through ``/bin/sh``), ``check`` (fail on a non-zero exit) and ``error_msg``
    (prefix of that failure's message)."""

    shell: bool = False
    check: bool = False
    error_msg: str = ""
    sandbox_id: NonBlankStr = _sandbox_id()


# --- bash sessions --------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class CreateBashSessionRequest:
    """Open a persistent bash session named ``session``.

    ``startup_source`` files are sourced first; the shell starts with an empty environment unless
    ``env_enable``; ``env`` is added on top; ``remote_user`` runs the shell as that user.
    """

    session_type: Literal["bash"] = "bash"
    session: str = "default"
    startup_source: list[str] = attrs.field(factory=list)
    env_enable: bool = False
    env: dict[str, str] | None = None
    remote_user: str | None = None


#: ROCK's name for the (one-member) union of create-session requests.
CreateSessionRequest = CreateBashSessionRequest


@attrs.frozen(kw_only=True)
class SandboxCreateBashSessionRequest(CreateBashSessionRequest):
    """:class:`CreateBashSessionRequest` with ``sandbox_id``, the prompt wait ``startup_timeout``
    (seconds) and the shell reader's ``max_read_size``."""

    startup_timeout: float = 1.0
    max_read_size: int = 2000
    sandbox_id: NonBlankStr = _sandbox_id()


@attrs.frozen(kw_only=True)
class BashAction:
    """Run ``command`` in bash session ``session`` (``POST /run_in_session``).

    ``check``: ``"raise"`` fails on a non-zero exit code, ``"silent"`` reports it,
    ``"ignore"`` does not collect it. ``timeout`` in seconds, ``None`` for no limit.
    """

    action_type: Literal["bash"] = "bash"
    command: str
    session: str = "default"
    timeout: float | None = None
    check: Literal["silent", "raise", "ignore"] = "raise"


#: ROCK's alias of :class:`BashAction`.
Action = BashAction


@attrs.frozen(kw_only=True)
class SandboxBashAction(BashAction):
    """:class:`BashAction` with ``sandbox_id`` and interactive-program options: ``expect`` lists
    extra outputs to wait for besides the prompt; ``is_interactive_command`` /
    ``is_interactive_quit`` talk to a program that does not return to the prompt (gdb, python)."""

    sandbox_id: NonBlankStr = _sandbox_id()
    is_interactive_command: bool = False
    is_interactive_quit: bool = False
    error_msg: str = ""
    expect: list[str] = attrs.field(factory=list)


@attrs.frozen(kw_only=True)
class CloseBashSessionRequest:
    """Close bash session ``session``."""

    session_type: Literal["bash"] = "bash"
    session: str = "default"


#: ROCK's name for the (one-member) union of close-session requests.
CloseSessionRequest = CloseBashSessionRequest


@attrs.frozen(kw_only=True)
class SandboxCloseBashSessionRequest(CloseBashSessionRequest):
    """:class:`CloseBashSessionRequest` with ``sandbox_id``."""

    sandbox_id: NonBlankStr = _sandbox_id()


# --- files ----------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class ReadFileRequest:
    """Read the text file at ``path`` (``encoding``/``errors`` as in ``Path.read_text``)."""

    path: str
    encoding: str | None = None
    errors: str | None = None


@attrs.frozen(kw_only=True)
class SandboxReadFileRequest(ReadFileRequest):
    """:class:`ReadFileRequest` with ``sandbox_id``."""

    sandbox_id: NonBlankStr = _sandbox_id()


@attrs.frozen(kw_only=True)
class WriteFileRequest:
    """Write ``content`` to ``path``, creating parent directories and replacing the file."""

    content: str
    path: str


@attrs.frozen(kw_only=True)
class SandboxWriteFileRequest(WriteFileRequest):
    """:class:`WriteFileRequest` with ``sandbox_id``."""

    sandbox_id: NonBlankStr = _sandbox_id()


class UploadMode(str, enum.Enum):
    """How the SDK uploads a file: pick by size, through object storage, or in the request."""

    AUTO = "auto"
    OSS = "oss"
    DIRECT = "direct"


@attrs.frozen(kw_only=True)
class UploadRequest:
    """Upload the local file ``source_path`` to ``target_path`` in the sandbox."""

    source_path: str
    target_path: str
    upload_mode: UploadMode = attrs.field(default=UploadMode.AUTO, converter=UploadMode)


@attrs.frozen(kw_only=True)
class ChownRequest:
    """``chown [-R] user:user paths`` inside the sandbox."""

    remote_user: str
    paths: list[str] = attrs.field(factory=list)
    recursive: bool = False


@attrs.frozen(kw_only=True)
class ChmodRequest:
    """``chmod [-R] mode paths`` inside the sandbox."""

    paths: list[str] = attrs.field(factory=list)
    mode: str = "755"
    recursive: bool = False


# --- sandbox lifecycle ----------------------------------------------------------------------


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
    pull: PullPolicy = attrs.field(default=PullPolicy.MISSING, converter=PullPolicy)
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
        default=None, converter=attrs.converters.optional(RestartPolicy)
    )
    max_restarts: NonNegativeInt | None = constrained(NonNegativeInt, optional=True, default=None)


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

    sandbox_id: NonBlankStr = _sandbox_id()


@attrs.frozen(kw_only=True)
class BatchSandboxStatusRequest:
    """``POST /sandboxes/batch``: the statuses of several sandboxes at once."""

    sandbox_ids: list[str]


# --- GEM environments -----------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class EnvMakeRequest:
    """Create GEM environment ``env_id`` (in sandbox ``sandbox_id`` when talking to a rocklet)."""

    env_id: NonBlankStr = constrained(NonBlankStr)
    sandbox_id: NonBlankStr | None = constrained(NonBlankStr, optional=True, default=None)


@attrs.frozen(kw_only=True)
class EnvResetRequest:
    """Reset the environment of ``sandbox_id``, optionally with a ``seed``."""

    sandbox_id: NonBlankStr = _sandbox_id()
    seed: int | None = None


@attrs.frozen(kw_only=True)
class EnvStepRequest:
    """Send ``action`` (text, e.g. ``"\\boxed{up}"``) to the environment of ``sandbox_id``."""

    sandbox_id: NonBlankStr = _sandbox_id()
    action: str


@attrs.frozen(kw_only=True)
class EnvCloseRequest:
    """Close the environment of ``sandbox_id`` (the admin also stops the sandbox)."""

    sandbox_id: NonBlankStr = _sandbox_id()


@attrs.frozen(kw_only=True)
class EnvListRequest:
    """``POST /apis/v1/envs/gem/list``: list environment ids, asked of ``sandbox_id``'s agent."""

    sandbox_id: NonBlankStr | None = constrained(NonBlankStr, optional=True, default=None)


# =============================================================================================
# Responses


class ResponseStatus(str, enum.Enum):
    """The envelope's ``status``."""

    SUCCESS = "Success"
    FAILED = "Failed"


@attrs.frozen(kw_only=True)
class RockResponse:
    """The admin API's envelope: ``result`` holds the endpoint's model (as JSON) on success, or a
    :class:`SandboxResponse` with the error code on a typed failure; ``error`` the error text."""

    status: ResponseStatus = attrs.field(default=ResponseStatus.SUCCESS, converter=ResponseStatus)
    message: str | None = None
    error: str | None = None
    result: Any = None


@attrs.frozen(kw_only=True)
class SandboxResponse:
    """Error payload of a failed call (``code`` 4xxx/5xxx/6xxx), and base of start responses."""

    code: int | None = None
    exit_code: int | None = None
    failure_reason: str | None = None


@attrs.frozen(kw_only=True)
class CommandResponse:
    """Result of ``/execute``: captured output and exit code (``-1`` when it could not run or
    was killed at its timeout, as ROCK; rock adds the reason to ``stderr`` and ``timed_out``)."""

    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = None
    # rock additions, measured by the rocklet: seconds of wall-clock and CPU (user + system)
    # time, and the peak resident memory of the command, in bytes; whether it was killed at its
    # timeout.
    wall_time: float | None = None
    cpu_time: float | None = None
    max_rss_bytes: int | None = None
    timed_out: bool = False


@attrs.frozen(kw_only=True)
class BashObservation:
    """Result of ``/run_in_session``: ``output``, ``exit_code`` (``None`` with ``check="ignore"``),
    ``failure_reason`` and, for interactive commands, the ``expect_string`` that matched."""

    session_type: Literal["bash"] = "bash"
    output: str = ""
    exit_code: int | None = None
    failure_reason: str = ""
    expect_string: str = ""


#: ROCK's alias of :class:`BashObservation`.
Observation = BashObservation


@attrs.frozen(kw_only=True)
class CreateBashSessionResponse:
    """Result of ``/create_session``: what the shell printed before its first prompt."""

    output: str = ""
    session_type: Literal["bash"] = "bash"


#: ROCK's name for the (one-member) union of create-session responses.
CreateSessionResponse = CreateBashSessionResponse


@attrs.frozen(kw_only=True)
class CloseBashSessionResponse:
    """Result of ``/close_session``."""

    session_type: Literal["bash"] = "bash"


#: ROCK's name for the (one-member) union of close-session responses.
CloseSessionResponse = CloseBashSessionResponse


@attrs.frozen(kw_only=True)
class ReadFileResponse:
    """Result of ``/read_file``: the file's text."""

    content: str = ""


@attrs.frozen(kw_only=True)
class WriteFileResponse:
    """Result of ``/write_file``."""

    success: bool = False
    message: str = ""


@attrs.frozen(kw_only=True)
class UploadResponse:
    """Result of ``/upload``: ``file_name`` is where the file landed."""

    success: bool = False
    message: str = ""
    file_name: str = ""


#: ROCK's alias of :class:`UploadResponse`.
FileUploadResponse = UploadResponse


@attrs.frozen(kw_only=True)
class IsAliveResponse:
    """Whether the sandbox's agent answers; true in a boolean context when it does."""

    is_alive: bool
    message: str = ""

    def __bool__(self) -> bool:
        return self.is_alive


@attrs.frozen(kw_only=True)
class ExecuteBashSessionResponse:
    """Result of the SDK's (deprecated) ``run_nohup_and_wait``."""

    success: bool = False
    message: str = ""


@attrs.frozen(kw_only=True)
class ChownResponse:
    """Result of the SDK's ``fs.chown``."""

    success: bool = False
    message: str = ""


@attrs.frozen(kw_only=True)
class ChmodResponse:
    """Result of the SDK's ``fs.chmod``."""

    success: bool = False
    message: str = ""


@attrs.frozen(kw_only=True)
class DownloadFileResponse:
    """Result of the SDK's ``fs.download_file``."""

    success: bool = False
    message: str = ""


#: ROCK's older name of :class:`DownloadFileResponse`.
DownloadResponse = DownloadFileResponse


@attrs.frozen(kw_only=True)
class InterruptSessionResponse:
    """Result of the rocklet's ``/interrupt_session`` (rock addition): whether a command was
    running and was interrupted, what it printed, and its exit code (130 after Ctrl-C)."""

    session_type: Literal["bash"] = "bash"
    interrupted: bool = False
    output: str = ""
    exit_code: int | None = None


@attrs.frozen(kw_only=True)
class ProcessInfo:
    """A background process in a sandbox (rock addition; the rocklet's ``/processes``).

    ``exit_code`` is the command's real exit code once it ended (``-N`` with ``signal=N`` when a
    signal killed it); ``wall_time``/``cpu_time`` are seconds, ``max_rss_bytes`` its peak memory;
    ``output_tail`` the end of its combined stdout and stderr, ``output_size`` their full size.
    """

    process_id: str
    pid: int | None = None
    command: CommandLine = ""
    running: bool = False
    exit_code: int | None = None
    signal: int | None = None
    timed_out: bool = False
    started_at: float | None = None
    wall_time: float | None = None
    cpu_time: float | None = None
    max_rss_bytes: int | None = None
    output_size: int = 0
    output_tail: str = ""


@attrs.frozen(kw_only=True)
class DirEntry:
    """One entry of a directory listing: ``type`` is ``file``, ``dir``, ``symlink`` or ``other``;
    ``mode`` the permission bits, ``mtime`` seconds since the epoch, ``target`` a link's target."""

    name: str
    type: str
    size: int = 0
    mode: int = 0
    mtime: float = 0.0
    target: str | None = None


@attrs.frozen(kw_only=True)
class ListDirResponse:
    """Result of the rocklet's ``/list_dir`` (rock addition)."""

    path: str
    entries: list[DirEntry] = attrs.field(factory=list)


@attrs.frozen(kw_only=True)
class CloseResponse:
    """Result of the rocklet's ``/close`` (all sessions closed); no fields."""


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

    from_state: State = attrs.field(converter=State)
    to_state: State = attrs.field(converter=State)
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
    ``security`` is the hardening its unit got: ``pids_limit``, ``nofile_limit``,
    ``no_new_privileges``, ``capabilities`` (those it keeps), ``network`` (``isolated``,
    ``group:NAME``, ``host`` or ``none``) and ``rocklet_auth`` (never the secret itself).
    """

    sandbox_id: str | None = None
    status: dict[str, Phase] | None = None
    state: State | None = attrs.field(default=None, converter=attrs.converters.optional(State))
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


@attrs.frozen(kw_only=True)
class BatchSandboxStatusResponse(SandboxResponse):
    """Result of ``POST /sandboxes/batch``: statuses of the live sandboxes among those asked."""

    statuses: list[SandboxStatusResponse] | None = None


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


@attrs.frozen(kw_only=True)
class EnvMakeResponse:
    """The sandbox that now holds the environment."""

    sandbox_id: str


@attrs.frozen(kw_only=True)
class EnvResetResponse:
    """The first observation after a reset, and GEM's ``info``."""

    observation: Any
    info: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class EnvStepResponse:
    """What one step returned: GEM's five-tuple, as named fields."""

    observation: Any
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class EnvCloseResponse:
    """The sandbox whose environment was closed."""

    sandbox_id: str


@attrs.frozen(kw_only=True)
class EnvListResponse:
    """The registered GEM environment ids."""

    env_id: list[str] = attrs.field(factory=list)
