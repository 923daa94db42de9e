"""ROCK's ``Sandbox`` and ``SandboxGroup``, on rock's engines.

A :class:`Sandbox` is a handle on one sandbox: ``start()`` it (or ``attach()`` to one), run
commands in persistent bash sessions with :meth:`Sandbox.arun`, move files, ``stop()`` it.
Signatures, defaults, return types and field names are ROCK's (``rl-rock`` 1.11), so ROCK code
keeps working; where ROCK has a known quirk rock does the right thing, as the README's
"Differences from ROCK" lists.

Where the sandbox runs is the engine's business (:class:`~rock.sdk._engine.base.Engine`): with
no ``base_url`` the process-wide embedded engine starts it on the local Docker engine.

Quick start::

    from rock.actions import CreateBashSessionRequest
    from rock.sdk.sandbox.client import Sandbox
    from rock.sdk.sandbox.config import SandboxConfig

    async with Sandbox(SandboxConfig(image="python:3.11", memory="2g", cpus=1)) as sandbox:
        await sandbox.create_session(CreateBashSessionRequest(session="main"))
        obs = await sandbox.arun("python -V", session="main")
        print(obs.output, obs.exit_code)

Beyond ROCK (documented on each method): ``arun(mode="nohup")`` returns the command's real exit
code; :meth:`Sandbox.interrupt`, background processes (:meth:`Sandbox.start_process` ...),
:meth:`Sandbox.execute_stream`, :meth:`Sandbox.list_dir`, :meth:`Sandbox.download`.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import math
import os
import time
import uuid
import warnings
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

from rock.sdk._engine.base import Engine
from rock.sdk._engine.connect import PortConnection, Shell
from rock.sdk.common.constants import RunModeType
from rock.sdk.common.exceptions import InvalidParameterRockException
from rock.sdk.sandbox import _nohup
from rock.sdk.sandbox.config import SandboxConfig, SandboxGroupConfig
from rock.sdk.sandbox.file_system import FileSystem, LinuxFileSystem
from rock.sdk.sandbox.network import Network
from rock.sdk.sandbox.process import Process
from rock.sdk.sandbox.remote_user import LinuxRemoteUser, RemoteUser
from rock_core.actions import (
    Action,
    CloseSessionRequest,
    CloseSessionResponse,
    Command,
    CommandLine,
    CommandResponse,
    CreateBashSessionRequest,
    CreateBashSessionResponse,
    ExecuteBashSessionResponse,
    InterruptSessionResponse,
    IsAliveResponse,
    ListDirRequest,
    ListDirResponse,
    Observation,
    ProcessInfo,
    ReadFileRequest,
    ReadFileResponse,
    SandboxCommand,
    SandboxStartRequest,
    SandboxStatusResponse,
    UploadMode,
    UploadRequest,
    UploadResponse,
    WriteFileRequest,
    WriteFileResponse,
)
from rock_core.actions.commands import EXECUTE
from rock_core.actions.files import LIST_DIR, READ_FILE, STAT, WRITE_FILE, StatRequest, StatResponse
from rock_core.actions.sessions import (
    CLOSE_SESSION,
    CREATE_SESSION,
    INTERRUPT_SESSION,
    RUN_IN_SESSION,
    InterruptSessionRequest,
)
from rock_core.errors import (
    BadRequestRockError,
    CommandRockError,
    InternalServerRockError,
    InvalidParameter,
    RockError,
    RockletUnreachable,
    SandboxNotFound,
    StartupTimeout,
)
from rock_core.models import NonBlankStr
from rock_core.operations import Operation
from rock_core.states import LIVE_STATES

if TYPE_CHECKING:  # imported when chat() is called: most trainers never chat
    from rock.sdk.chat import ChatAction, ChatConfig, ChatResponse

__all__ = ["RunMode", "Sandbox", "SandboxGroup", "NOHUP_SUBMIT_TIMEOUT"]

log = logging.getLogger(__name__)

Req = TypeVar("Req")
Resp = TypeVar("Resp")


class RunMode(str, enum.Enum):
    """How :meth:`Sandbox.arun` runs a command: in the session and wait (``normal``), or in the
    background under ``nohup`` with its output in a file (``nohup``)."""

    NORMAL = "normal"
    NOHUP = "nohup"


#: Seconds the nohup *submission* may take (ROCK's 30 s); the command itself may run for hours.
NOHUP_SUBMIT_TIMEOUT = 30.0


class Sandbox:
    """A handle on one sandbox (ROCK's ``rock.sdk.sandbox.client.Sandbox``).

    :param config: what to start (default: ``SandboxConfig()``, i.e. ``python:3.11``).
    :param engine: the engine to use (default: the process-wide embedded engine when
        ``config.base_url`` is unset).

    Helper objects: :attr:`fs` (:class:`~rock.sdk.sandbox.file_system.LinuxFileSystem`),
    :attr:`process` (:class:`~rock.sdk.sandbox.process.Process`), :attr:`remote_user`
    (:class:`~rock.sdk.sandbox.remote_user.LinuxRemoteUser`), :attr:`network`
    (:class:`~rock.sdk.sandbox.network.Network`: mirror speedups).

    Use as ``async with Sandbox(config) as sandbox:`` to start on entry and stop on exit.
    """

    fs: FileSystem
    process: Process
    remote_user: RemoteUser
    network: Network

    def __init__(
        self, config: SandboxConfig | None = None, *, engine: Engine | None = None
    ) -> None:
        self.config = config if config is not None else SandboxConfig()
        self._engine = engine
        self._sandbox_id: str | None = None
        self._host_name: str | None = None
        self._host_ip: str | None = None
        self._cluster = self.config.cluster
        base_url = self.config.base_url
        self._url: str | None = f"{base_url.rstrip('/')}/apis/envs/sandbox/v1" if base_url else None
        self.remote_user = LinuxRemoteUser(self)
        self.process = Process(self)
        self.fs = LinuxFileSystem(self)
        self.network = Network(self)

    # -- identity ------------------------------------------------------------------------------

    @property
    def sandbox_id(self) -> str | None:
        """The sandbox's id once started or attached (also its container's name), else ``None``."""
        return self._sandbox_id

    @property
    def host_name(self) -> str | None:
        """The name of the host the sandbox runs on."""
        return self._host_name

    @property
    def host_ip(self) -> str | None:
        """The address of the host the sandbox runs on (``127.0.0.1`` in embedded mode)."""
        return self._host_ip

    @property
    def cluster(self) -> str | None:
        """The cluster label of the sandbox (``config.cluster``)."""
        return self._cluster

    @property
    def url(self) -> str | None:
        """The sandbox API's root on the admin server; ``None`` in embedded mode (no server)."""
        return self._url

    @url.setter
    def url(self, value: str | None) -> None:
        self._url = value

    def __str__(self) -> str:
        return (
            f"Sandbox(sandbox_id={self._sandbox_id}, host_name={self._host_name!r}, host_ip={self._host_ip}, "
            f"image={self.config.image}, cluster={self._cluster})"
        )

    def __repr__(self) -> str:
        return f"Sandbox(config={self.config!r}, sandbox_id={self._sandbox_id!r})"

    def _build_headers(self) -> dict[str, str]:
        """ROCK's request headers for a server: cluster, identity, extra headers, authorization."""
        cfg = self.config
        headers = {"X-Cluster": self._cluster or ""}
        if cfg.xrl_authorization and "XRL-Authorization" not in cfg.extra_headers:
            warnings.warn(
                "xrl_authorization is deprecated; put the header in extra_headers instead",
                DeprecationWarning,
                stacklevel=2,
            )
            headers["XRL-Authorization"] = f"Bearer {cfg.xrl_authorization}"
        headers.update(cfg.extra_headers)
        for name, value in (
            ("X-User-Id", cfg.user_id),
            ("X-Experiment-Id", cfg.experiment_id),
            ("X-Namespace", cfg.namespace),
        ):
            if value:
                headers[name] = value
        return headers

    def _get_engine(self) -> Engine:
        # With a base_url the sandbox lives on an admin server (remote mode); the engine is
        # shared by handles with the same server and headers, so they share connection pools.
        if self._engine is None:
            # Imported here: a remote trainer never loads the embedded engine (rock-core's).
            if self.config.base_url:
                from rock.sdk._engine.remote import get_remote_engine

                self._engine = get_remote_engine(self.config.base_url, self._build_headers())
            else:
                from rock.sdk._engine.embedded_default import get_embedded_engine

                self._engine = get_embedded_engine()
        return self._engine

    async def _call(self, op: Operation[Req, Resp], request: Req) -> Resp:
        """``op`` (an operation of kind ``call`` of :mod:`rock_core.operations`) on this sandbox."""
        return await self._get_engine().call(self._require_id(op.name), op, request)

    def _require_id(self, attempted: str) -> str:
        if not self._sandbox_id:
            raise BadRequestRockError(
                f"{attempted}: this Sandbox has no sandbox yet; call `await sandbox.start()` "
                "(or `await sandbox.attach(sandbox_id)`) first",
                attempted=attempted,
            )
        return self._sandbox_id

    # -- lifecycle -----------------------------------------------------------------------------

    def _start_request(self) -> SandboxStartRequest:
        cfg = self.config
        cfg.check_lifecycle()
        # Plain values: the request's fields check each one (a bad value names its field).
        fields: dict[str, Any] = dict(
            image=cfg.image,
            image_os=cfg.image_os,
            auto_clear_seconds=cfg.auto_clear_seconds,
            auto_clear_time_minutes=math.ceil(cfg.auto_clear_seconds / 60),
            startup_timeout=cfg.startup_timeout,
            memory=cfg.memory,
            cpus=cfg.cpus,
            limit_cpus=cfg.limit_cpus,
            num_gpus=cfg.num_gpus,
            accelerator_type=cfg.accelerator_type,
            registry_username=cfg.registry_username,
            registry_password=cfg.registry_password,
            use_kata_runtime=cfg.use_kata_runtime,
            sandbox_id=cfg.sandbox_id,
            auto_archive_seconds=cfg.auto_archive_seconds,
            auto_delete_seconds=cfg.auto_delete_seconds,
            disk=cfg.disk,
            env=dict(cfg.env) if cfg.env else None,
            metadata=dict(cfg.metadata) if cfg.metadata else None,
            network=cfg.network,
            network_group=cfg.network_group,
            pids_limit=cfg.pids_limit,
            cap_add=list(cfg.cap_add) if cfg.cap_add else None,
            priority=cfg.priority,
            restart_policy=cfg.restart_policy,
            max_restarts=cfg.max_restarts,
        )
        return SandboxStartRequest(**fields)

    async def start(self) -> None:
        """Start the sandbox and wait until it runs (at most ``config.startup_timeout`` seconds).

        A failed start fails at once, naming the phase: ``"Failed to start sandbox because
        image_pull: Failed to pull image ..."``. In embedded mode the wait is on the engine's own
        event, not a 3-second poll. A start that times out is stopped (nothing is left running).

        :raises InvalidParameter: a bad ``memory``/``disk``/``cpus``, a value above the engine's
            maximum (16 CPUs, 64g, 256g), an invalid ``sandbox_id`` (all ``BadRequestRockError``).
        :raises SandboxAlreadyExists: ``config.sandbox_id`` is taken.
        :raises BadRequestRockError: this ``Sandbox`` already holds a pending or running sandbox
            (ROCK would start a second one and lose the first); ``stop()`` it first.
        :raises InternalServerRockError: the start failed (``StartupTimeout`` when it timed out).
        """
        engine = self._get_engine()
        cfg = self.config
        if self._sandbox_id is not None:
            try:
                current = (await engine.get_status(self._sandbox_id, True)).state
            except SandboxNotFound:
                current = None
            if current in LIVE_STATES:
                raise BadRequestRockError(
                    f"this Sandbox already holds sandbox {self._sandbox_id} ({current.value}); a second start() "
                    "would leave it running unreachable: stop() it first, or make another Sandbox",
                    sandbox_id=self._sandbox_id,
                    attempted="start",
                )
        request = self._start_request()
        # Choose the id here, so that a start cancelled at any point can still be stopped.
        chosen = request.sandbox_id is None
        if chosen:
            request = attrs.evolve(request, sandbox_id=NonBlankStr(uuid.uuid4().hex))
        try:
            started = await engine.start_async(
                request,
                user_id=cfg.user_id,
                experiment_id=cfg.experiment_id,
                namespace=cfg.namespace,
                cluster=cfg.cluster,
            )
        except asyncio.CancelledError:
            if chosen:
                await self._stop_after_cancel(str(request.sandbox_id))
            raise
        assert started.sandbox_id is not None
        self._sandbox_id = started.sandbox_id
        self._host_name = started.host_name
        self._host_ip = started.host_ip
        await self._wait_running("start")

    async def _wait_running(self, attempted: str) -> None:
        engine = self._get_engine()
        sandbox_id = self._require_id(attempted)
        try:
            # No client-side deadline: the engine applies ``startup_timeout`` from the moment the
            # start leaves its queue, so a sandbox waiting in a burst is not failed for waiting.
            status = await engine.wait_until_running(sandbox_id, timeout=None)
        except StartupTimeout:
            await self.stop()
            raise
        except asyncio.CancelledError:
            await self._stop_after_cancel(sandbox_id)
            raise
        self._host_name = status.host_name or self._host_name
        self._host_ip = status.host_ip or self._host_ip

    async def _stop_after_cancel(self, sandbox_id: str) -> None:
        # The caller gave up on the start: stop the sandbox rather than leave it running unseen.
        try:
            await asyncio.shield(self._get_engine().stop(sandbox_id))
        except Exception as exc:  # noqa: BLE001 - already unwinding a cancellation
            log.warning(
                "could not stop sandbox %s after its start was cancelled: %s", sandbox_id, exc
            )

    async def stop(self) -> None:
        """Stop the sandbox. Never raises (as ROCK): a failure is logged. No-op before ``start()``.

        With the default lifecycle the stopped sandbox is deleted at once (ROCK's ``--rm``);
        set ``auto_delete_seconds`` to keep it for :meth:`restart`.
        """
        if not self._sandbox_id:
            return
        try:
            await self._get_engine().stop(self._sandbox_id)
        except Exception as exc:  # noqa: BLE001 - ROCK's stop() never raises
            log.warning("could not stop sandbox %s (ignored): %s", self._sandbox_id, exc)

    async def delete(self) -> None:
        """Delete the stopped sandbox and its container (already deleted: no error).

        :raises InvalidTransition: it is still pending or running: ``stop()`` it first.
        """
        await self._get_engine().delete(self._require_id("delete"))

    async def archive(self) -> None:
        """Archive the stopped sandbox: store it in the engine's archive store and remove its
        container. Returns at once; the sandbox is ``archiving``, then ``archived`` (see
        ``get_status(include_all_states=True)``: phases ``image_archive`` and ``log_archive``),
        or ``stopped`` again with the reason when the archive failed. :meth:`restart` brings it
        back where it was.

        Needs an archive store (the engine's ``archive_store``, e.g. ``s3`` from
        rock-archive-s3) and a sandbox kept after its stop (``auto_delete_seconds > 0``).

        :raises BadRequestRockError: it is not stopped, or its container is gone.
        :raises NotSupported: no archive store is configured, or the runtime cannot snapshot.
        """
        await self._get_engine().archive(self._require_id("archive"))

    async def restart(self) -> None:
        """Start a stopped sandbox again, in its own container: files kept, sessions gone. An
        archived sandbox is restored from its archive (files kept, a new container).

        Waits until it runs, as :meth:`start` does. A failed restore leaves the sandbox
        ``archived`` with the reason (and raises it); nothing is lost.

        :raises BadRequestRockError: it is not stopped or archived, or its container is gone (the
            default lifecycle deletes a sandbox when it stops; set ``auto_delete_seconds`` to keep it).
        :raises InternalServerRockError: the restart or restore failed (the phase and its message).
        """
        sandbox_id = self._require_id("restart")
        started = await self._get_engine().restart(sandbox_id)
        self._host_name = started.host_name or self._host_name
        self._host_ip = started.host_ip or self._host_ip
        await self._wait_running("restart")

    async def get_status(self, include_all_states: bool = False) -> SandboxStatusResponse:
        """The sandbox's status: state, phases, port mapping, resources, times, history.

        :raises SandboxNotFound: unknown, or (without ``include_all_states``, as ROCK) not
            pending or running — the message says its state and why it stopped.
        """
        return await self._get_engine().get_status(
            self._require_id("get_status"), include_all_states
        )

    async def is_alive(self) -> IsAliveResponse:
        """Whether the sandbox runs: ``IsAliveResponse(is_alive, message=host_name)``.

        A sandbox that stopped (or was deleted) answers ``is_alive=False`` with the reason in
        ``message`` (ROCK raises instead).

        :raises BadRequestRockError: this handle has no sandbox yet.
        """
        sandbox_id = self._require_id("is_alive")
        status = await self._get_engine().get_status(sandbox_id, True)
        if status.state in LIVE_STATES:
            return IsAliveResponse(is_alive=bool(status.is_alive), message=status.host_name or "")
        state = status.state.value if status.state is not None else "unknown"
        reason = f": {status.reason}" if status.reason else ""
        return IsAliveResponse(is_alive=False, message=f"sandbox {sandbox_id} is {state}{reason}")

    async def attach(self, sandbox_id: str) -> None:
        """Make this handle refer to the existing sandbox ``sandbox_id`` (in any state).

        Copies the sandbox's id, image, cpus, memory, user, experiment and namespace into
        :attr:`config`. In embedded mode only sandboxes of this process's engine can be attached.

        :raises SandboxNotFound: no such sandbox.
        """
        status = await self._get_engine().get_status(sandbox_id, True)
        if status.sandbox_id != sandbox_id:
            raise InternalServerRockError(
                f"asked to attach to {sandbox_id!r} but the engine answered for {status.sandbox_id!r}",
                sandbox_id=sandbox_id,
                attempted="attach",
            )
        self._sandbox_id = sandbox_id
        self._host_name = status.host_name
        self._host_ip = status.host_ip
        cfg = self.config
        cfg.sandbox_id = sandbox_id
        if status.image:
            cfg.image = status.image
        if status.cpus is not None:
            cfg.cpus = status.cpus
        if status.memory:
            cfg.memory = status.memory
        cfg.user_id = status.user_id
        cfg.experiment_id = status.experiment_id
        cfg.namespace = status.namespace

    async def close(self) -> None:
        """ROCK's ``close()``: the same as :meth:`stop`."""
        await self.stop()

    async def __aenter__(self) -> Sandbox:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # -- sessions and commands -------------------------------------------------------------------

    async def create_session(
        self, create_session_request: CreateBashSessionRequest
    ) -> CreateBashSessionResponse:
        """Open a persistent bash session (named by ``request.session``).

        :raises SessionAlreadyExists: a session of that name is open (ROCK silently succeeds).
        """
        return await self._call(CREATE_SESSION, create_session_request)

    async def close_session(self, request: CloseSessionRequest) -> CloseSessionResponse:
        """Close a bash session.

        :raises SessionNotFound: no open session of that name (ROCK silently succeeds).
        """
        return await self._call(CLOSE_SESSION, request)

    async def _run_in_session(self, action: Action) -> Observation:
        return await self._call(RUN_IN_SESSION, action)

    async def run_in_session(self, action: Action) -> Observation:
        """Deprecated in ROCK ("Use arun instead"): run ``action`` in its session.

        ``action.check="raise"`` (the default) raises :class:`~rock_core.errors.NonZeroExitCode`
        on a non-zero exit; ``action.timeout`` raises :class:`~rock_core.errors.CommandTimeout`
        (the session is interrupted and stays usable).
        """
        warnings.warn(
            "Sandbox.run_in_session is deprecated; use arun instead",
            DeprecationWarning,
            stacklevel=2,
        )
        return await self._run_in_session(action)

    async def execute(self, command: Command, *, check: bool = False) -> CommandResponse:
        """Run a one-shot command (not in a session): ``command.command`` as an argv list (or one
        program name), with ``timeout``, ``cwd`` and ``env``. Returns stdout, stderr, exit code,
        and (rock) ``wall_time``, ``cpu_time``, ``max_rss_bytes``.

        As ROCK, a command killed at its ``timeout`` and a program that cannot be run (missing,
        or a ``cwd`` that is not a directory) answer ``exit_code=-1``; rock puts the reason in
        ``stderr``.

        :param check: (rock) raise instead: :class:`~rock_core.errors.CommandTimeout` past the
            timeout, :class:`~rock_core.errors.InvalidParameter` for a program that cannot be run,
            :class:`~rock_core.errors.NonZeroExitCode` for a non-zero exit.
        """
        sandbox_id = self._require_id("execute")
        if check:
            fields = {f.name: getattr(command, f.name) for f in attrs.fields(Command)}
            command = SandboxCommand(**fields, check=True, sandbox_id=NonBlankStr(sandbox_id))
        return await self._get_engine().call(sandbox_id, EXECUTE, command)

    async def arun(
        self,
        cmd: str,
        session: str | None = None,
        wait_timeout: float = 300,
        wait_interval: float = 10,
        mode: RunModeType | RunMode = RunMode.NORMAL,
        response_limited_bytes_in_nohup: int | None = None,
        ignore_output: bool = False,
        output_file: str | None = None,
    ) -> Observation:
        """Run ``cmd`` in a bash session (ROCK's ``arun``).

        ``mode="normal"``: run in ``session`` (a new ``bash-<ns>`` session when ``None``) and
        wait. A non-zero exit raises :class:`~rock_core.errors.NonZeroExitCode` (message with
        the output), a missing session :class:`~rock_core.errors.SessionNotFound`. No time limit
        (ROCK's rocklet cuts requests at 85 s).

        ``mode="nohup"``: submit ``nohup cmd < /dev/null > FILE 2>&1 &`` in the session (its
        cwd and environment apply), wait up to ``wait_timeout`` seconds for it to end, then
        return the file's content (first ``response_limited_bytes_in_nohup`` bytes), or with
        ``ignore_output`` a hint with the file's path and size. ``FILE`` is ``output_file``
        (its name must contain a ".", its directory is created) or ``/tmp/tmp_<ns>.out``.
        Failures come back as ``Observation(exit_code=1, failure_reason=...)``, never raised:
        a submission that hangs past 30 s gives "Command execution failed due to timeout: ...".

        Beyond ROCK: in nohup mode ``exit_code`` is the command's **real exit code** (ROCK
        reports 0 whenever the process ended): the submission records the status of the
        backgrounded command in a file under ``/tmp``, read and removed once it ends. When the
        command text backgrounds something other than its first command (``a; b``), that status
        is unknown and ``exit_code`` is 0 as in ROCK. The end of the command is noticed within
        ~50 ms (ROCK polls every ``wait_interval`` >= 5 s); ``wait_interval`` (clamped as in
        ROCK: at least 5 s, at most ``auto_clear_seconds - 2``) is how long one look may wait.

        :raises InvalidParameterRockException: ``mode`` is neither ``normal`` nor ``nohup``.
        """
        if mode not in (RunMode.NORMAL, RunMode.NOHUP):
            raise InvalidParameterRockException(
                f"Unsupported arun mode: {mode!r} (use 'normal' or 'nohup')",
                field="mode",
                value=mode,
                attempted="arun",
            )
        if mode == RunMode.NORMAL:
            if session is None:
                session = f"bash-{time.time_ns()}"
                await self.create_session(CreateBashSessionRequest(session=session))
            return await self._run_in_session(Action(command=cmd, session=session))
        return await _nohup.arun(
            self,
            cmd=cmd,
            session=session,
            wait_timeout=wait_timeout,
            wait_interval=wait_interval,
            response_limited_bytes_in_nohup=response_limited_bytes_in_nohup,
            ignore_output=ignore_output,
            output_file=output_file,
        )

    async def start_nohup_process(
        self, cmd: str, tmp_file: str, session: str, status_file: str | None = None
    ) -> tuple[int | None, Observation | None]:
        """Submit ``cmd`` under nohup in ``session``; return ``(pid, None)``, or ``(None, error)``.

        ``(None, None)`` means no PID could be read from the submission's output. With
        ``status_file`` (rock), the command's exit status is written there when it ends.
        """
        return await _nohup.submit(
            self, cmd, tmp_file, session, status_file, timeout=NOHUP_SUBMIT_TIMEOUT
        )

    async def wait_for_process_completion(
        self,
        pid: int,
        session: str,
        wait_timeout: float,
        wait_interval: float,
        status_file: str | None = None,
    ) -> tuple[bool, str]:
        """Wait up to ``wait_timeout`` seconds for the nohup process ``pid`` to end.

        Returns ``(True, "Process completed successfully in 1.2s")`` once it ended, or
        ``(False, "Process N did not complete within ...")``. Each look is one call into the
        sandbox that returns as soon as the process ends, or after the clamped ``wait_interval``
        (so the sandbox never looks idle while waiting). ``session`` is unused: looking does not
        occupy the session, which stays free for other commands.
        """
        return await _nohup.wait(self, pid, wait_timeout, wait_interval, status_file)

    async def handle_nohup_output(
        self,
        tmp_file: str,
        session: str,
        success: bool,
        message: str,
        ignore_output: bool,
        response_limited_bytes_in_nohup: int | None,
        exit_code: int | None = None,
    ) -> Observation:
        """The :class:`Observation` of a finished (or timed-out) nohup command, as ROCK builds it.

        ``exit_code`` (rock) is the command's real exit code when known; otherwise 0 for a
        completed command and 1 for a failure, as in ROCK.
        """
        return await _nohup.output(
            self,
            tmp_file,
            session,
            success,
            message,
            ignore_output,
            response_limited_bytes_in_nohup,
            exit_code,
        )

    async def run_nohup_and_wait(
        self,
        cmd: str,
        redirect_file_path: str = "/dev/null",
        wait_timeout: float = 300,
        wait_interval: float = 10,
    ) -> ExecuteBashSessionResponse:
        """Deprecated in ROCK: run ``cmd`` under nohup in a new session and wait for it.

        ``success`` is true when it ended with exit code 0 (ROCK: whenever it ended).
        """
        warnings.warn(
            "Sandbox.run_nohup_and_wait is deprecated; use arun(mode='nohup')",
            DeprecationWarning,
            stacklevel=2,
        )
        return await _nohup.run_and_wait(self, cmd, redirect_file_path, wait_timeout, wait_interval)

    # -- files -------------------------------------------------------------------------------

    async def read_file(self, request: ReadFileRequest) -> ReadFileResponse:
        """Read a text file (``request.encoding``/``errors`` as ``Path.read_text``).

        :raises InvalidParameter: no such file, a directory, or text that does not decode
            (message with the byte offset; pass ``errors="replace"`` to read it anyway).
            ROCK answers ``content=""`` for a missing file.
        """
        return await self._call(READ_FILE, request)

    async def write_file(self, request: WriteFileRequest) -> WriteFileResponse:
        """Write ``request.content`` to ``request.path`` (parents created, file replaced).

        A failure is ``WriteFileResponse(success=False, message=<why>)`` (ROCK reports success).
        """
        return await self._do_write_file(request.content, request.path)

    async def write_file_by_path(self, content: str, path: str) -> WriteFileResponse:
        """:meth:`write_file` with the content and path as arguments."""
        return await self._do_write_file(content, path)

    async def _do_write_file(self, content: str, path: str) -> WriteFileResponse:
        sandbox_id = self._require_id("write_file")
        try:
            await self._get_engine().call(
                sandbox_id, WRITE_FILE, WriteFileRequest(content=content, path=path)
            )
        except RockError as exc:
            return WriteFileResponse(success=False, message=f"Failed to write file {path}: {exc}")
        return WriteFileResponse(success=True, message=f"Successfully write content to file {path}")

    async def upload(self, request: UploadRequest) -> UploadResponse:
        """Upload the local file ``request.source_path`` to ``request.target_path``."""
        return await self.upload_by_path(
            request.source_path, request.target_path, request.upload_mode
        )

    async def upload_by_path(
        self,
        file_path: str | os.PathLike[str],
        target_path: str,
        upload_mode: UploadMode | str = UploadMode.AUTO,
    ) -> UploadResponse:
        """Upload a local file to ``target_path`` in the sandbox (parents created), streamed.

        Every ``upload_mode`` uploads directly to the sandbox (rock has no object-storage path
        and needs none: the file is streamed, whatever its size). A missing local file is
        ``UploadResponse(success=False, message="File not found: ...")`` as in ROCK; a failed
        upload is ``success=False`` with the reason (ROCK reports success).
        """
        try:
            UploadMode(upload_mode)
        except ValueError:
            modes = ", ".join(m.value for m in UploadMode)
            raise InvalidParameter(
                f"upload_mode: {upload_mode!r} is not one of {modes}",
                field="upload_mode",
                value=upload_mode,
            ) from None
        sandbox_id = self._require_id("upload")
        path = Path(file_path)
        if not path.exists():  # noqa: ASYNC240 - a local stat, not worth a thread
            return UploadResponse(success=False, message=f"File not found: {path}")
        if not path.is_file():  # noqa: ASYNC240
            return UploadResponse(
                success=False,
                message=f"Not a regular file: {path} (use fs.upload_dir for a directory)",
            )
        try:
            result = await self._get_engine().upload(sandbox_id, target_path, path)
        except RockError as exc:
            return UploadResponse(
                success=False, message=f"Failed to upload {path} to {target_path}: {exc}"
            )
        return UploadResponse(
            success=True,
            message=f"Successfully uploaded file {path.name} to {target_path}",
            file_name=result.file_name or target_path,
        )

    async def read_file_by_line_range(
        self,
        file_path: str,
        start_line: int | None = None,
        end_line: int | None = None,
        lines_per_request: int = 1000,
        session: str | None = None,
    ) -> ReadFileResponse:
        """Deprecated in ROCK: lines ``start_line``..``end_line`` (1-based, inclusive) of a file,
        read with ``sed`` in chunks of ``lines_per_request``; to the end when ``end_line`` is None.

        :raises InvalidParameter: ``start_line < 1``, ``end_line < start_line``,
            ``lines_per_request`` outside 1..10000.
        :raises CommandRockError: ``wc``/``sed`` failed (e.g. no such file).
        """
        if session is not None:
            warnings.warn(
                "the session argument of read_file_by_line_range is ignored",
                DeprecationWarning,
                stacklevel=2,
            )
        start_line = 1 if start_line is None else start_line
        if start_line < 1:
            raise InvalidParameter(
                f"start_line({start_line}) must be positive", field="start_line", value=start_line
            )
        if end_line is not None and end_line < start_line:
            raise InvalidParameter(
                f"end_line({end_line}) must be greater than start_line({start_line})",
                field="end_line",
                value=end_line,
            )
        if not 1 <= lines_per_request <= 10000:
            raise InvalidParameter(
                f"lines_per_request({lines_per_request}) must be between 1 and 10000",
                field="lines_per_request",
                value=lines_per_request,
            )
        if end_line is None:
            counted = await self._execute_checked(
                ["wc", "-l", file_path], f"Failed to count lines of file {file_path}"
            )
            end_line = int(counted.split()[0])
        parts = []
        first = start_line
        while first <= end_line:
            last = min(first + lines_per_request - 1, end_line)
            parts.append(
                await self._execute_checked(
                    ["sed", "-n", f"{first},{last}p", file_path], f"Failed to read file {file_path}"
                )
            )
            first = last + 1
        return ReadFileResponse(content="".join(parts))

    async def _execute_checked(self, argv: list[str], what: str) -> str:
        # Retried (as ROCK, 3 attempts) only when the sandbox did not answer; a non-zero exit is final.
        for attempt in range(3):
            try:
                result = await self.execute(Command(command=argv))
                break
            except RockletUnreachable:
                if attempt == 2:
                    raise
                await asyncio.sleep(1.0)
        if result.exit_code != 0:
            raise CommandRockError(
                f"{what}: {argv[0]} exited with code {result.exit_code}: {result.stderr.strip()}",
                sandbox_id=self._sandbox_id,
                attempted="read_file_by_line_range",
            )
        return result.stdout

    # -- rock's extras -----------------------------------------------------------------------------

    async def interrupt(self, session: str = "default") -> InterruptSessionResponse:
        """(rock) Ctrl-C the command running in ``session``; the session stays usable.

        Returns whether something was interrupted, its output so far and its exit code (130).
        """
        return await self._call(INTERRUPT_SESSION, InterruptSessionRequest(session=session))

    async def execute_stream(self, command: Command | CommandLine) -> AsyncIterator[dict[str, Any]]:
        """(rock) Run a one-shot command and yield its events while it runs.

        ``{"type": "start", "pid"}``, then ``{"type": "output", "stream": "stdout"|"stderr",
        "data"}`` as output arrives, then ``{"type": "exit", "exit_code", "signal", "timed_out",
        "wall_time", "cpu_time", "max_rss_bytes"}``.
        """
        cmd = command if isinstance(command, Command) else Command(command=command)
        events = self._get_engine().execute_stream(self._require_id("execute_stream"), cmd)
        async with contextlib.aclosing(events):  # type: ignore[type-var]
            async for event in events:
                yield event

    async def list_dir(self, path: str) -> ListDirResponse:
        """(rock) The entries of a directory: name, type, size, mode, mtime, symlink target."""
        return await self._call(LIST_DIR, ListDirRequest(path=NonBlankStr(path)))

    async def stat(self, path: str) -> StatResponse:
        """(rock) File information of ``path``: type (``file``, ``dir``, ``symlink``, ``other``),
        size, permission bits, mtime; a symbolic link is described itself, with its target.

        :raises InvalidParameter: no such path (as :meth:`read_file`), or a blank one.
        """
        return await self._call(STAT, StatRequest(path=NonBlankStr(path)))

    async def download(self, path: str) -> bytes:
        """(rock) The raw bytes of a file in the sandbox (any content, any size that fits in memory).

        :raises InvalidParameter: no such file, or a directory.
        """
        return b"".join([chunk async for chunk in self._download_chunks(path, "download")])

    # -- the sandbox's own services -----------------------------------------------------------

    async def get_url(self, port: int, path: str = "") -> str:
        """(rock) A URL that reaches ``port`` in the sandbox, ``path`` appended (any port but
        the rocklet's 22555; traffic goes through the rocklet, so no port needs publishing).

        Embedded: ``http://127.0.0.1:P/path``, a local port opened on first use for this
        sandbox port (closed when the sandbox stops); the service sees the path as is.
        Remote: the admin's proxy, ``{base_url}/apis/envs/sandbox/v1/sandboxes/{id}/proxy/port/{port}/path``
        (HTTP and WebSocket; with API keys on, send ``X-API-Key``); the service sees ``/path``.

        :raises InvalidParameter: not a port, or 22555.
        """
        return await self._get_engine().port_url(self._require_id("get_url"), port, path)

    async def open_port(self, port: int) -> PortConnection:
        """(rock) A TCP connection to ``127.0.0.1:port`` inside the sandbox (what
        ``rock sandbox port-forward`` carries): ``send``, ``send_eof``, ``receive`` (``b""`` at
        the end), ``aclose``; an async context manager.

        :raises InvalidParameter: not a port, or 22555.
        :raises InternalServerRockError: nothing listens on the port.
        """
        return await self._get_engine().open_port(self._require_id("open_port"), port)

    async def open_shell(
        self,
        *,
        user: str | None = None,
        rows: int = 24,
        cols: int = 80,
        term: str | None = None,
        command: str | None = None,
    ) -> Shell:
        """(rock) A terminal in the sandbox: ``command`` (default the user's shell) on a new
        pseudo-terminal, as ``user`` (default the rocklet's, root). ``send`` keystrokes,
        ``resize``, ``receive`` output (``None`` when the program ended: then ``exit_code``);
        an async context manager. Embedded it talks to the rocklet directly; remote, through
        the admin's ``/shell`` WebSocket (what ``rock sandbox shell`` uses).

        :raises InvalidParameter: an unknown user.
        """
        options: dict[str, Any] = {"rows": rows, "cols": cols}
        for name, value in (("user", user), ("term", term), ("command", command)):
            if value:
                options[name] = value
        return await self._get_engine().open_shell(self._require_id("open_shell"), **options)

    async def chat(
        self,
        prompt: str,
        *,
        confirm: bool = False,
        dry_run: bool = False,
        config: ChatConfig | None = None,
        on_action: Callable[[ChatAction], Any] | None = None,
    ) -> ChatResponse:
        """(rock) The Chat protocol: carry out an instruction in plain English or Chinese
        ("install numpy", "显示资源使用情况") and answer in the prompt's language. Returns a
        :class:`~rock.sdk.chat.ChatResponse` (``reply``, ``actions``, ``observations``).

        Each action is previewed in the reply before it runs; destructive ones (delete, stop,
        ``rm -rf``) run only with ``confirm=True``; ``dry_run=True`` runs nothing. ``config`` is
        a :class:`~rock.sdk.chat.ChatConfig` (mirrors, the optional LLM backend; default from
        ``ROCK_CHAT_*``). See :mod:`rock.sdk.chat`.

        :raises InvalidParameter: a blank prompt.
        """
        from rock.sdk.chat import chat

        return await chat(
            self, prompt, confirm=confirm, dry_run=dry_run, config=config, on_action=on_action
        )

    async def _download_chunks(self, path: str, attempted: str) -> AsyncIterator[bytes]:
        chunks = self._get_engine().download(self._require_id(attempted), path)
        async with contextlib.aclosing(chunks):  # type: ignore[type-var]
            async for chunk in chunks:
                yield chunk

    async def get_statistics(self) -> dict[str, Any]:
        """(rock) CPU, memory and disk use (percent) and network bytes of the sandbox."""
        return await self._get_engine().get_statistics(self._require_id("get_statistics"))

    async def start_process(
        self,
        command: CommandLine,
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> ProcessInfo:
        """(rock) Start a background command (a string runs through ``/bin/sh -c``).

        Its real exit code, resource use and output stay readable with :meth:`process_status`
        and :meth:`process_output`; ``timeout`` seconds kills it.
        """
        return await self._get_engine().start_process(
            self._require_id("start_process"), command, cwd=cwd, env=env, timeout=timeout
        )

    async def process_status(
        self, process_id: str, *, wait: float = 0.0, tail: int = 4096
    ) -> ProcessInfo:
        """(rock) A background process's state, waiting up to ``wait`` seconds for it to end;
        ``output_tail`` holds the last ``tail`` bytes of its output."""
        return await self._get_engine().process_status(
            self._require_id("process_status"), process_id, wait=wait, tail=tail
        )

    async def process_output(
        self, process_id: str, *, offset: int = 0, limit: int | None = None
    ) -> bytes:
        """(rock) A background process's combined output bytes from ``offset`` (negative: from the end)."""
        return await self._get_engine().process_output(
            self._require_id("process_output"), process_id, offset=offset, limit=limit
        )

    async def kill_process(
        self, process_id: str, *, signal: int | str = 15, wait: float = 5.0
    ) -> ProcessInfo:
        """(rock) Send ``signal`` to a background process and its group; wait up to ``wait`` s for it to end."""
        return await self._get_engine().kill_process(
            self._require_id("kill_process"), process_id, signal=signal, wait=wait
        )


class SandboxGroup:
    """``size`` sandboxes of one config (ROCK's ``SandboxGroup``).

    :param config: the group's config; every sandbox is started from it.
    """

    def __init__(self, config: SandboxGroupConfig) -> None:
        self.config = config
        self.sandbox_list: list[Sandbox] = [Sandbox(config) for _ in range(config.size)]

    async def start(self) -> None:
        """Start every sandbox, ``start_concurrency`` at a time, each tried up to
        ``start_retry_times`` times (1 s apart).

        A bad request (4xxx: bad size, too many CPUs, ...) is not retried: it cannot succeed.
        When a sandbox cannot be started, the ones that did are stopped and the error is raised
        (ROCK leaves them running).
        """
        semaphore = asyncio.Semaphore(self.config.start_concurrency)
        attempts = self.config.start_retry_times

        async def start_one(index: int, sandbox: Sandbox) -> None:
            async with semaphore:
                for attempt in range(1, attempts + 1):
                    try:
                        await sandbox.start()
                        return
                    except BadRequestRockError:
                        raise
                    except Exception as exc:
                        if attempt == attempts:
                            log.error(
                                "sandbox %d of the group failed to start after %d attempts: %s",
                                index,
                                attempts,
                                exc,
                            )
                            raise
                        log.warning(
                            "sandbox %d of the group failed to start (attempt %d/%d): %s; retrying",
                            index,
                            attempt,
                            attempts,
                            exc,
                        )
                        await sandbox.stop()
                        await asyncio.sleep(1)

        results = await asyncio.gather(
            *(start_one(i, s) for i, s in enumerate(self.sandbox_list)), return_exceptions=True
        )
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            await self.stop()
            raise errors[0]

    async def stop(self) -> None:
        """Stop every sandbox of the group (never raises)."""
        await asyncio.gather(*(s.stop() for s in self.sandbox_list), return_exceptions=True)
