"""The machinery behind ``Sandbox.arun(mode="nohup")``: a command submitted in the background
of a bash session, watched until it ends, its output (and, in rock, its real exit status) read
back from files in the sandbox.

The :class:`~rock.sdk.sandbox.client.Sandbox` keeps ROCK's methods (``arun``,
``start_nohup_process``, ``wait_for_process_completion``, ``handle_nohup_output``,
``run_nohup_and_wait``); each is a thin call into the functions here, which take the sandbox
first and go back through its methods, so a subclass that overrides one still sees it used.
"""

from __future__ import annotations

import contextlib
import logging
import posixpath
import re
import shlex
import time
from typing import TYPE_CHECKING

from rock.sdk.common.constants import PID_PREFIX, PID_SUFFIX
from rock_core.actions import (
    Action,
    BashAction,
    Command,
    CreateBashSessionRequest,
    ExecuteBashSessionResponse,
    Observation,
    SandboxCommand,
)
from rock_core.actions.commands import EXECUTE
from rock_core.errors import (
    BadRequestRockError,
    CommandTimeout,
    RockError,
    RockletUnreachable,
    SandboxNotFound,
)
from rock_core.models import NonBlankStr

if TYPE_CHECKING:
    from rock.sdk.sandbox.client import Sandbox

log = logging.getLogger("rock.sdk.sandbox.client")  # where these warnings were always logged

_PID = re.compile(re.escape(PID_PREFIX) + r"(\d+)" + re.escape(PID_SUFFIX))
# Seconds between two looks at a nohup command inside the sandbox (one round trip covers many).
_POLL = 0.05


def _extract_pid(output: str) -> int | None:
    match = _PID.search(output)
    return int(match.group(1)) if match else None


def _size_text(size: int) -> str:
    if size < 1024:
        return f"{size} bytes"
    if size < 1024 * 1024:
        return f"{size / 1024:.2f} KB"
    return f"{size / (1024 * 1024):.2f} MB"


def _status_file(timestamp: str) -> str:
    """Where the backgrounded command leaves its exit status (read and removed once it ends)."""
    return f"/tmp/.rock_nohup_{timestamp}.status"


async def arun(
    sandbox: Sandbox,
    cmd: str,
    session: str | None,
    wait_timeout: float,
    wait_interval: float,
    response_limited_bytes_in_nohup: int | None,
    ignore_output: bool,
    output_file: str | None = None,
) -> Observation:
    """``arun(mode="nohup")``: submit, wait, read back; every failure an :class:`Observation`."""
    try:
        timestamp = str(time.time_ns())
        if session is None:
            session = f"bash-{timestamp}"
            await sandbox.create_session(CreateBashSessionRequest(session=session))
        if output_file:
            dir_path, file_name = posixpath.split(output_file)
            if not file_name or "." not in file_name:
                raise BadRequestRockError(
                    f"Failed parse output file path: {output_file}", attempted="arun"
                )
            await sandbox._run_in_session(
                Action(command=f"mkdir -p {dir_path or '.'}", session=session)
            )
        tmp_file = output_file or f"/tmp/tmp_{timestamp}.out"
        status_file = _status_file(timestamp)
        pid, error = await sandbox.start_nohup_process(
            cmd=cmd, tmp_file=tmp_file, session=session, status_file=status_file
        )
        if error is not None:
            return error
        if pid is None:
            message = "Failed to submit command, nohup failed to extract PID"
            return Observation(output=message, exit_code=1, failure_reason=message)
        success, message = await sandbox.wait_for_process_completion(
            pid=pid,
            session=session,
            wait_timeout=wait_timeout,
            wait_interval=wait_interval,
            status_file=status_file,
        )
        exit_code = await collect_exit_status(sandbox, status_file) if success else None
        if exit_code:
            success, message = False, f"Process {pid} exited with code {exit_code}"
        return await sandbox.handle_nohup_output(
            tmp_file=tmp_file,
            session=session,
            success=success,
            message=message,
            ignore_output=ignore_output,
            response_limited_bytes_in_nohup=response_limited_bytes_in_nohup,
            exit_code=exit_code,
        )
    except CommandTimeout:
        message = (
            f"Command execution failed due to timeout: '{cmd}'. "
            "This may be caused by an interactive command that requires user input."
        )
        return Observation(output=message, exit_code=1, failure_reason=message)
    except Exception as exc:  # noqa: BLE001 - ROCK reports every nohup failure as an Observation
        message = f"Failed to execute nohup command '{cmd}': {exc}"
        return Observation(output=message, exit_code=1, failure_reason=message)


async def submit(
    sandbox: Sandbox,
    cmd: str,
    tmp_file: str,
    session: str,
    status_file: str | None,
    *,
    timeout: float,
) -> tuple[int | None, Observation | None]:
    """``start_nohup_process``: ``(pid, None)``, ``(None, error)``, or ``(None, None)`` when no
    PID could be read; the submission itself may take ``timeout`` seconds."""
    tail = f" < /dev/null > {tmp_file} 2>&1 & echo {PID_PREFIX}${{!}}{PID_SUFFIX};disown"
    if status_file is None:
        command = f"nohup {cmd}{tail}"
    else:
        # A function wraps nohup so the words of cmd parse exactly as after ROCK's "nohup ";
        # the background subshell that runs it writes the command's status once it ends.
        status = shlex.quote(status_file)
        # (A subshell body, not braces: a "}" word would cost the rocklet a `bash -n` per submission.)
        # Only the backgrounded call (stdin /dev/null) records a status: in "a; b" the
        # foreground "a" is not the command that arun waits for.
        command = (
            f"__rock_nohup() ( trap '' HUP; nohup \"$@\"; s=$?; [ -t 0 ] || echo $s > {status} ); "
            f"__rock_nohup {cmd}{tail}"
        )
    action = BashAction(command=command, session=session, timeout=timeout)
    response = await sandbox._run_in_session(action)
    if response.exit_code != 0:
        return None, response
    pid = _extract_pid(response.output)
    return (pid, None) if pid else (None, None)


def _look_seconds(sandbox: Sandbox, wait_interval: float) -> float:
    """How long one look may wait: ``wait_interval`` clamped as in ROCK (at least 5 s, at most
    ``auto_clear_seconds - 2``, never under 1 s)."""
    interval = max(5.0, float(wait_interval))
    if sandbox.config.auto_clear_seconds:
        interval = min(interval, sandbox.config.auto_clear_seconds - 2)
    return max(interval, 1.0)


async def wait(
    sandbox: Sandbox,
    pid: int,
    wait_timeout: float,
    wait_interval: float,
    status_file: str | None = None,
) -> tuple[bool, str]:
    """``wait_for_process_completion``: ``(True, "Process completed ...")`` once ``pid`` ended,
    else ``(False, why)``; each look one call into the sandbox, ended as soon as the process is."""
    interval = _look_seconds(sandbox, wait_interval)
    sandbox_id = sandbox._require_id("arun")
    driver = sandbox._get_driver()
    alive = f"kill -0 {pid} 2>/dev/null"
    if status_file is not None:
        alive = f"[ ! -s {shlex.quote(status_file)} ] && {alive}"
    script = f"while {alive}; do sleep {_POLL}; done"
    start = time.perf_counter()
    deadline = start + wait_timeout
    while True:
        remaining = deadline - time.perf_counter()
        if remaining <= 0:
            break
        try:
            # check: a timeout raises (the process still runs) instead of answering -1.
            await driver.call(
                sandbox_id,
                EXECUTE,
                SandboxCommand(
                    command=["/bin/sh", "-c", script],
                    timeout=min(interval, remaining),
                    check=True,
                    sandbox_id=NonBlankStr(sandbox_id),
                ),
            )
        except CommandTimeout:
            continue  # still running
        except (SandboxNotFound, RockletUnreachable) as exc:
            return False, f"Process {pid} could not be watched: {exc}"
        return True, f"Process completed successfully in {time.perf_counter() - start:.1f}s"
    elapsed = time.perf_counter() - start
    return False, f"Process {pid} did not complete within {elapsed:.1f}s (timeout: {wait_timeout}s)"


async def collect_exit_status(sandbox: Sandbox, status_file: str) -> int | None:
    """The exit status a nohup command left in ``status_file`` (removed), or ``None``."""
    try:
        result = await sandbox.execute(
            Command(
                command=[
                    "/bin/sh",
                    "-c",
                    f"cat {shlex.quote(status_file)} 2>/dev/null; rm -f {shlex.quote(status_file)}",
                ]
            )
        )
    except RockError as exc:
        log.warning("could not read the exit status of a nohup command: %s", exc)
        return None
    text = result.stdout.strip()
    return int(text) if text.isdigit() else None


async def output(
    sandbox: Sandbox,
    tmp_file: str,
    session: str,
    success: bool,
    message: str,
    ignore_output: bool,
    response_limited_bytes_in_nohup: int | None,
    exit_code: int | None = None,
) -> Observation:
    """``handle_nohup_output``: the :class:`Observation` of a finished (or timed-out) command."""
    code = exit_code if exit_code is not None else (0 if success else 1)
    reason = "" if success else message
    if ignore_output:
        size = None
        with contextlib.suppress(RockError):
            result = await sandbox._run_in_session(
                BashAction(
                    session=session,
                    command=f"stat -c %s {tmp_file} 2>/dev/null || stat -f %z {tmp_file}",
                )
            )
            if result.exit_code == 0 and result.output.strip().isdigit():
                size = int(result.output.strip())
        hint = detached_message(tmp_file, success, message, size)
        return Observation(output=hint, exit_code=code, failure_reason=reason)
    read = (
        f"head -c {int(response_limited_bytes_in_nohup)} {tmp_file}"
        if response_limited_bytes_in_nohup
        else f"cat {tmp_file}"
    )
    result = await sandbox._run_in_session(BashAction(session=session, command=read))
    return Observation(output=result.output, exit_code=code, failure_reason=reason)


def detached_message(
    tmp_file: str, success: bool, detail: str | None, file_size: int | None
) -> str:
    """The hint ``ignore_output=True`` answers instead of the output: where it is, and how big."""
    lines = [
        "Command executed in nohup mode without streaming the log content.",
        f"Status: {'completed' if success else 'finished with errors'}",
        f"Output file: {tmp_file}",
    ]
    if file_size is not None:
        lines.append(f"File size: {_size_text(file_size)}")
    lines.append(
        f"Use Sandbox.read_file(...), download APIs, or run 'cat {tmp_file}' inside the session to inspect the result."
    )
    if detail:
        lines.append(f"Detail: {detail}")
    return "\n".join(lines)


async def run_and_wait(
    sandbox: Sandbox, cmd: str, redirect_file_path: str, wait_timeout: float, wait_interval: float
) -> ExecuteBashSessionResponse:
    """``run_nohup_and_wait`` (deprecated in ROCK): ``success`` when it ended with exit code 0."""
    timestamp = str(time.time_ns())
    session = f"bash-{timestamp}"
    status_file = _status_file(timestamp)
    try:
        await sandbox.create_session(CreateBashSessionRequest(session=session))
        pid, error = await sandbox.start_nohup_process(
            cmd, redirect_file_path, session, status_file=status_file
        )
        if error is not None:
            return ExecuteBashSessionResponse(
                success=False, message=error.failure_reason or error.output
            )
        if pid is None:
            return ExecuteBashSessionResponse(
                success=False, message="Failed to extract PID from the nohup submission"
            )
        success, message = await sandbox.wait_for_process_completion(
            pid, session, wait_timeout, wait_interval, status_file
        )
        exit_code = await collect_exit_status(sandbox, status_file) if success else None
        if exit_code:
            return ExecuteBashSessionResponse(
                success=False, message=f"Process {pid} exited with code {exit_code}"
            )
        return ExecuteBashSessionResponse(success=success, message=message)
    except Exception as exc:  # noqa: BLE001 - ROCK reports failures in the response
        return ExecuteBashSessionResponse(
            success=False, message=f"Failed to execute nohup command '{cmd}': {exc}"
        )
