"""ROCK's ``Sandbox`` and ``SandboxGroup``, on rock's engines.

A :class:`Sandbox` is a handle on one sandbox: ``start()`` it (or ``attach()`` to one), run
commands in persistent bash sessions with :meth:`Sandbox.arun`, move files, ``stop()`` it.
Signatures, defaults, return types and field names are ROCK's (``rl-rock`` 1.11), so ROCK code
keeps working; where ROCK has a known quirk rock does the right thing, as the README's
"Differences from ROCK" lists.

Where the sandbox runs is its driver's business (:class:`~rock.sdk._drivers.base.Driver`): with
no ``base_url`` the process-wide embedded driver (rock-core's engine in this process) starts it
on the local Docker engine.

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
import time
import warnings
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any

import attrs

from rock.sdk._drivers.admin_urls import admin_urls
from rock.sdk._drivers.base import Driver
from rock.sdk.common.constants import RunModeType
from rock.sdk.common.exceptions import InvalidParameterRockException
from rock.sdk.sandbox import _nohup
from rock.sdk.sandbox._commits import SandboxCommits
from rock.sdk.sandbox._files import SandboxFiles
from rock.sdk.sandbox._lifecycle import SandboxLifecycle
from rock.sdk.sandbox._services import SandboxServices
from rock.sdk.sandbox._snapshots import SandboxSnapshots
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
    Observation,
    SandboxCommand,
)
from rock_core.actions.commands import EXECUTE
from rock_core.actions.sessions import (
    CLOSE_SESSION,
    CREATE_SESSION,
    INTERRUPT_SESSION,
    RUN_IN_SESSION,
    InterruptSessionRequest,
)
from rock_core.errors import BadRequestRockError
from rock_core.models import NonBlankStr

__all__ = ["RunMode", "Sandbox", "SandboxGroup", "NOHUP_SUBMIT_TIMEOUT"]

log = logging.getLogger(__name__)


class RunMode(str, enum.Enum):
    """How :meth:`Sandbox.arun` runs a command: in the session and wait (``normal``), or in the
    background under ``nohup`` with its output in a file (``nohup``)."""

    NORMAL = "normal"
    NOHUP = "nohup"


#: Seconds the nohup *submission* may take (ROCK's 30 s); the command itself may run for hours.
NOHUP_SUBMIT_TIMEOUT = 30.0


class Sandbox(SandboxLifecycle, SandboxFiles, SandboxServices, SandboxSnapshots, SandboxCommits):
    """A handle on one sandbox (ROCK's ``rock.sdk.sandbox.client.Sandbox``).

    :param config: what to start (default: ``SandboxConfig()``, i.e. ``python:3.11``).
    :param engine: the driver to use (ROCK's keyword; default: the process-wide embedded driver when
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
        self, config: SandboxConfig | None = None, *, engine: Driver | None = None
    ) -> None:
        self.config = config if config is not None else SandboxConfig()
        self._driver = engine
        self._sandbox_id: str | None = None
        self._host_name: str | None = None
        self._host_ip: str | None = None
        self._cluster = self.config.cluster
        base_url = self.config.base_url
        first = admin_urls(base_url)[0] if base_url else None
        self._url: str | None = f"{first}/apis/envs/sandbox/v1" if first else None
        self.remote_user = LinuxRemoteUser(self)
        self.process = Process(self)
        self.fs = LinuxFileSystem(self)
        self.network = Network(self)
        self.model_service: Any = None  # ROCK's: the sandbox's one ModelService, set by its agent
        self._agent: Any = None

    @property
    def agent(self) -> Any:
        """ROCK's ``sandbox.agent``: the sandbox's :class:`~rock.sdk.sandbox.agent.RockAgent`."""
        if self._agent is None:
            from rock.sdk.sandbox.agent import RockAgent

            self._agent = RockAgent(self)
        return self._agent

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
        return await self._get_driver().call(sandbox_id, EXECUTE, command)

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
        events = self._get_driver().execute_stream(self._require_id("execute_stream"), cmd)
        async with contextlib.aclosing(events):  # type: ignore[type-var]
            async for event in events:
                yield event


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
