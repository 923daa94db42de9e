"""One-shot commands (ROCK's ``/execute``), with their wall time, CPU time and peak memory.

ROCK runs ``subprocess.run(command, shell=shell, timeout, cwd, env, capture_output=True)``. This
module does the same with three differences a user notices:

* the child is reaped with ``os.wait4``, so the answer also carries ``wall_time`` (seconds),
  ``cpu_time`` (user + system seconds of the command and the children it waited for) and
  ``max_rss_bytes`` (the kernel's ``ru_maxrss``: the peak resident memory of the largest of
  them). Linux also counts, in that peak, the memory of the forked rocklet just before it
  executed the command, so a command smaller than the rocklet (about 12-20 MB) reports the
  rocklet's size; larger peaks are the command's own;
* the command runs in its own process group with stdin at ``/dev/null``; on timeout the whole
  group is killed, and once the command has exited the answer does not wait for background
  children that keep its output pipes open (ROCK hangs until they exit);
* output can be consumed as it arrives (:meth:`CommandRun.events`, used by ``/execute_stream``).
"""

from __future__ import annotations

import codecs
import os
import select
import signal
import subprocess
import threading
import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds at start; annotations are strings anyway
    from collections.abc import Iterator
    from typing import Any

from .errors import CommandTimeoutError, NonZeroExitCodeError

__all__ = ["CommandRun", "execute", "exit_code_of", "resource_usage"]

# After the command exits, how long to keep reading pipes that stay open (held by a background
# grandchild) before answering anyway.
_LINGER = 0.1


def exit_code_of(status: int) -> tuple[int, int | None]:
    """``(exit code, signal)`` from a wait status; a signal death is ``-signal`` as in subprocess."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        return -sig, sig
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status), None
    return -1, None


def resource_usage(rusage: Any) -> tuple[float, int]:
    """``(cpu seconds, peak RSS bytes)`` from ``os.wait4``'s rusage (``ru_maxrss`` is KiB on Linux)."""
    if rusage is None:
        return 0.0, 0
    return round(rusage.ru_utime + rusage.ru_stime, 6), int(rusage.ru_maxrss) * 1024


def reap(pid: int, started: float) -> tuple[int, int | None, float, float, int]:
    """Wait for child ``pid`` to end: ``(exit code, signal, wall s, cpu s, peak RSS bytes)``.

    ``started`` is its ``time.monotonic()`` start. A pid that is not our child (already reaped)
    reports exit code -1.
    """
    status, rusage = None, None
    while True:
        try:
            _, status, rusage = os.wait4(pid, 0)
            break
        except InterruptedError:
            continue
        except ChildProcessError:
            break
    wall = round(time.monotonic() - started, 6)
    code, sig = exit_code_of(status) if status is not None else (-1, None)
    cpu, rss = resource_usage(rusage)
    return code, sig, wall, cpu, rss


class CommandRun:
    """A started one-shot command.

    :param command: an argv list, or a string (a program name, or a shell line with ``shell``).
    :param env: variables set over the rocklet's own environment.
    :param timeout: seconds, ``None`` for no limit.
    """

    def __init__(
        self,
        command: str | list[str],
        *,
        shell: bool = False,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> None:
        self.command = command
        self.timeout = timeout
        full_env = None
        if env:
            full_env = dict(os.environ)
            full_env.update(env)
        self._start = time.monotonic()
        self._deadline = None if timeout is None else self._start + timeout
        self._proc = subprocess.Popen(
            command,
            shell=shell,
            cwd=cwd or None,
            env=full_env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self.pid = self._proc.pid
        self.exit_code: int | None = None
        self.signal: int | None = None
        self.wall_time = 0.0
        self.cpu_time = 0.0
        self.max_rss_bytes = 0
        self.timed_out = False
        self._done = threading.Event()
        threading.Thread(target=self._reap, daemon=True).start()

    def _reap(self) -> None:
        self.exit_code, self.signal, self.wall_time, self.cpu_time, self.max_rss_bytes = reap(
            self.pid, self._start
        )
        # Popen must not try to reap the pid again (it may belong to someone else by then).
        self._proc.returncode = self.exit_code
        self._done.set()

    def kill(self) -> None:
        """SIGKILL the command's process group."""
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except OSError:
            pass

    def events(self) -> Iterator[tuple[str, bytes]]:
        """Yield ``("stdout"|"stderr", bytes)`` as output arrives, until the command is done.

        When the generator ends, ``exit_code``, ``wall_time``, ``cpu_time``, ``max_rss_bytes``
        and ``timed_out`` are set. Closing the generator early kills the command.
        """
        pipes = {}
        poller = select.poll()
        for name, pipe in (("stdout", self._proc.stdout), ("stderr", self._proc.stderr)):
            if pipe is not None:
                pipes[pipe.fileno()] = (name, pipe)
                poller.register(pipe.fileno(), select.POLLIN)
        exited_at: float | None = None
        finished = False
        try:
            while pipes:
                now = time.monotonic()
                if self._deadline is not None and now >= self._deadline and not self.timed_out:
                    self.timed_out = True
                    self.kill()
                wait = 0.25
                if self._deadline is not None and not self.timed_out:
                    wait = min(wait, self._deadline - now)
                if self._done.is_set():
                    if exited_at is None:
                        exited_at = now
                    if now - exited_at >= _LINGER:
                        break
                    wait = min(wait, _LINGER)
                for fd, _ in poller.poll(max(0, int(wait * 1000)) + 1):
                    name, pipe = pipes[fd]
                    try:
                        data = os.read(fd, 1 << 16)
                    except InterruptedError:
                        continue
                    if data:
                        yield name, data
                    else:
                        poller.unregister(fd)
                        del pipes[fd]
            remaining = None
            if self._deadline is not None and not self.timed_out:
                remaining = max(0.0, self._deadline - time.monotonic())
            if not self._done.wait(remaining):
                self.timed_out = True
                self.kill()
                self._done.wait()
            finished = True
        finally:
            if not finished:
                self.kill()
            for _, pipe in pipes.values():
                pipe.close()
            for pipe in (self._proc.stdout, self._proc.stderr):
                if pipe is not None and not pipe.closed:
                    pipe.close()

    def usage(self) -> dict[str, Any]:
        """The extras rock adds to ROCK's answer."""
        return {
            "wall_time": self.wall_time,
            "cpu_time": self.cpu_time,
            "max_rss_bytes": self.max_rss_bytes,
        }


def execute(
    command: str | list[str],
    *,
    shell: bool = False,
    cwd: str | None = None,
    env: dict[str, str] | None = None,
    timeout: float | None = 1200,
    check: bool = False,
    error_msg: str = "",
) -> dict[str, Any]:
    """Run ``command`` to completion: ROCK's ``CommandResponse`` plus the resource usage.

    As ROCK, a program that cannot be run (missing, not executable, a bad ``cwd``) and a command
    killed at its ``timeout`` answer ``exit_code`` -1; rock adds the reason to ``stderr``. With
    ``check`` they raise instead (the OS error, :class:`CommandTimeoutError`), as does a non-zero
    exit (:class:`NonZeroExitCodeError`).
    """
    try:
        run = CommandRun(command, shell=shell, cwd=cwd, env=env, timeout=timeout)
    except OSError as exc:
        if check:
            raise
        reason = "rock: cannot run %r: %s" % (command, exc.strerror or exc)
        if exc.filename:
            reason += ": %r" % exc.filename
        return {
            "stdout": "",
            "stderr": reason + "\n",
            "exit_code": -1,
            "wall_time": 0.0,
            "cpu_time": 0.0,
            "max_rss_bytes": 0,
        }
    out = bytearray()
    err = bytearray()
    for name, data in run.events():
        (out if name == "stdout" else err).extend(data)
    stdout = out.decode("utf-8", "backslashreplace")
    stderr = err.decode("utf-8", "backslashreplace")
    if run.timed_out:
        message = "Timeout (%gs) exceeded while running command %r" % (timeout or 0.0, command)
        if check:
            raise CommandTimeoutError(
                message, extra_info=dict(run.usage(), stdout=stdout, stderr=stderr)
            )
        result: dict[str, Any] = {
            "stdout": stdout,
            "stderr": stderr + "rock: %s; the command was killed\n" % message,
            "exit_code": -1,
            "timed_out": True,
        }
        result.update(run.usage())
        return result
    if check and run.exit_code != 0:
        msg = "Command %r failed with exit code %s. Stdout:\n%r\nStderr:\n%r" % (
            command,
            run.exit_code,
            stdout,
            stderr,
        )
        if error_msg:
            msg = "%s: %s" % (error_msg, msg)
        raise NonZeroExitCodeError(
            msg, extra_info=dict(run.usage(), stdout=stdout, stderr=stderr, exit_code=run.exit_code)
        )
    result = {"stdout": stdout, "stderr": stderr, "exit_code": run.exit_code}
    result.update(run.usage())
    return result


def stream_events(run: CommandRun) -> Iterator[dict[str, Any]]:
    """The events of ``/execute_stream`` for ``run``: start, output chunks, exit."""
    yield {"type": "start", "pid": run.pid}
    decoders = {
        "stdout": codecs.getincrementaldecoder("utf-8")("backslashreplace"),
        "stderr": codecs.getincrementaldecoder("utf-8")("backslashreplace"),
    }
    for name, data in run.events():
        text = decoders[name].decode(data)
        if text:
            yield {"type": "output", "stream": name, "data": text}
    for name, decoder in decoders.items():
        tail = decoder.decode(b"", final=True)
        if tail:
            yield {"type": "output", "stream": name, "data": tail}
    event: dict[str, Any] = {
        "type": "exit",
        "exit_code": run.exit_code,
        "signal": run.signal,
        "timed_out": run.timed_out,
    }
    event.update(run.usage())
    yield event
