"""Background processes whose real exit code, output and resource usage can be read later.

ROCK's ``nohup`` protocol only learns that a background command is gone (``kill -0`` fails),
never how it ended. Here ``POST /processes`` starts a command in its own session and process
group with stdin at ``/dev/null`` and stdout+stderr appended to a file in the rocklet's state
directory; a reaper thread per process waits for it with ``os.wait4`` and records the exit code
(or the signal), the wall time, the CPU time and the peak resident memory (with the same floor
as :mod:`.execute` explains: a process smaller than the rocklet reports the rocklet's size).
While it runs, CPU time and peak memory are read from ``/proc/<pid>`` (the main process only,
and there the peak is its own).
"""

from __future__ import annotations

import os
import signal as signals
import subprocess
import threading
import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds at start; annotations are strings anyway
    from typing import Any

from .errors import ProcessDoesNotExistError
from .execute import reap

__all__ = ["BackgroundProcess", "ProcessTable", "end_other_processes", "parse_signal"]

_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def parse_signal(value: int | str | None) -> int:
    """A signal number from ``15``, ``"15"``, ``"TERM"`` or ``"SIGTERM"`` (default SIGTERM)."""
    if value is None:
        return int(signals.SIGTERM)
    if isinstance(value, int):
        return value
    text = value.strip().upper()
    if text.isdigit():
        return int(text)
    if not text.startswith("SIG"):
        text = "SIG" + text
    sig = getattr(signals, text, None)
    if not isinstance(sig, int):
        raise ValueError("unknown signal %r" % value)
    return int(sig)


def _decode_tail(data: bytes) -> str:
    # A tail cut in the middle of a UTF-8 character: drop the orphaned continuation bytes.
    cut = 0
    while cut < min(3, len(data)) and 0x80 <= data[cut] <= 0xBF:
        cut += 1
    return data[cut:].decode("utf-8", "backslashreplace")


class BackgroundProcess:
    """One background command and what is known about it."""

    def __init__(
        self,
        process_id: str,
        command: str | list[str],
        output_path: str,
        *,
        shell: bool,
        cwd: str | None,
        env: dict[str, str] | None,
        timeout: float | None,
    ) -> None:
        self.id = process_id
        self.command = command
        self.output_path = output_path
        full_env = None
        if env:
            full_env = dict(os.environ)
            full_env.update(env)
        self.started_at = time.time()
        self._start = time.monotonic()
        with open(output_path, "wb") as out:
            self._proc = subprocess.Popen(
                command,
                shell=shell,
                cwd=cwd or None,
                env=full_env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.pid = self._proc.pid
        self.exit_code: int | None = None
        self.signal: int | None = None
        self.timed_out = False
        self.wall_time: float | None = None
        self.cpu_time: float | None = None
        self.max_rss_bytes: int | None = None
        self._done = threading.Event()
        threading.Thread(target=self._reap, daemon=True).start()
        if timeout is not None:
            timer = threading.Timer(timeout, self._time_out)
            timer.daemon = True
            timer.start()

    def _reap(self) -> None:
        self.exit_code, self.signal, self.wall_time, self.cpu_time, self.max_rss_bytes = reap(
            self.pid, self._start
        )
        self._proc.returncode = self.exit_code
        self._done.set()

    def _time_out(self) -> None:
        if not self._done.is_set():
            self.timed_out = True
            self.kill(signals.SIGKILL)

    @property
    def running(self) -> bool:
        """Whether the process has not been reaped yet."""
        return not self._done.is_set()

    def wait(self, timeout: float | None) -> bool:
        """Wait up to ``timeout`` seconds for the process to end; whether it has."""
        return self._done.wait(timeout)

    def kill(self, sig: int = signals.SIGTERM, group: bool = True) -> None:
        """Send ``sig`` to the process group (or only the process)."""
        if self._done.is_set():
            return
        try:
            if group:
                os.killpg(self.pid, sig)
            else:
                os.kill(self.pid, sig)
        except OSError:
            pass

    def output_size(self) -> int:
        """Bytes of output written so far."""
        try:
            return os.path.getsize(self.output_path)
        except OSError:
            return 0

    def read_output(self, offset: int = 0, limit: int | None = None) -> tuple[bytes, int]:
        """Output bytes from ``offset`` (at most ``limit``) and the total size so far."""
        try:
            with open(self.output_path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if offset < 0:
                    offset = max(0, size + offset)
                f.seek(offset)
                data = f.read(
                    max(0, size - offset) if limit is None else max(0, min(limit, size - offset))
                )
        except OSError:
            return b"", 0
        return data, size

    def _live_usage(self) -> tuple[float | None, int | None]:
        try:
            with open("/proc/%d/stat" % self.pid, "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            cpu = (int(fields[11]) + int(fields[12])) / float(_CLK_TCK)
        except (OSError, IndexError, ValueError):
            cpu = None
        rss = None
        try:
            with open("/proc/%d/status" % self.pid, "rb") as f:
                for line in f:
                    if line.startswith(b"VmHWM:"):
                        rss = int(line.split()[1]) * 1024
                        break
        except (OSError, IndexError, ValueError):
            pass
        return cpu, rss

    def status(self, tail_bytes: int = 4096) -> dict[str, Any]:
        """What a client sees at ``GET /processes/{id}``."""
        running = self.running
        wall: float | None
        if running:
            wall = round(time.monotonic() - self._start, 6)
            cpu, rss = self._live_usage()
        else:
            wall, cpu, rss = self.wall_time, self.cpu_time, self.max_rss_bytes
        if tail_bytes > 0:
            data, size = self.read_output(-tail_bytes)
        else:
            data, size = b"", self.output_size()
        return {
            "process_id": self.id,
            "pid": self.pid,
            "command": self.command,
            "running": running,
            "exit_code": None if running else self.exit_code,
            "signal": None if running else self.signal,
            "timed_out": self.timed_out,
            "started_at": self.started_at,
            "wall_time": wall,
            "cpu_time": cpu,
            "max_rss_bytes": rss,
            "output_size": size,
            "output_tail": _decode_tail(data),
        }


class ProcessTable:
    """The background processes of one rocklet, by id."""

    def __init__(self, root: str) -> None:
        self._root = root
        self._procs: dict[str, BackgroundProcess] = {}
        self._lock = threading.Lock()

    def start(
        self,
        command: str | list[str],
        *,
        shell: bool | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> BackgroundProcess:
        """Start ``command``; a string runs through ``/bin/sh -c`` unless ``shell`` is False."""
        if shell is None:
            shell = isinstance(command, str)
        os.makedirs(self._root, mode=0o700, exist_ok=True)
        process_id = os.urandom(6).hex()
        proc = BackgroundProcess(
            process_id,
            command,
            os.path.join(self._root, process_id + ".out"),
            shell=shell,
            cwd=cwd,
            env=env,
            timeout=timeout,
        )
        with self._lock:
            self._procs[process_id] = proc
        return proc

    def get(self, process_id: str) -> BackgroundProcess:
        """The process ``process_id`` or :class:`ProcessDoesNotExistError`."""
        with self._lock:
            proc = self._procs.get(process_id)
        if proc is None:
            raise ProcessDoesNotExistError("background process %r does not exist" % process_id)
        return proc

    def all(self) -> list[BackgroundProcess]:
        """Every process started, oldest first."""
        with self._lock:
            return sorted(self._procs.values(), key=lambda p: p.started_at)

    def kill_all(self) -> None:
        """SIGKILL every process group still running (the rocklet is shutting down)."""
        for proc in self.all():
            proc.kill(signals.SIGKILL)


def _running_pids() -> list[int]:
    """Every process of this PID namespace that is not a zombie (as ``/proc`` shows them)."""
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name, "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in (b"Z", b"X"):
            pids.append(int(name))
    return pids


def end_other_processes(within: float = 2.0) -> int:
    """SIGKILL every process of this PID namespace but this one and PID 1 (the sandbox's init),
    again until none is left or ``within`` seconds passed (a process may fork meanwhile); how
    many were killed. Only for the agent of a sandbox, whose namespace is the sandbox's."""
    spared = {1, os.getpid()}
    killed: set[int] = set()
    deadline = time.monotonic() + within
    while True:
        others = [pid for pid in _running_pids() if pid not in spared]
        if not others or time.monotonic() > deadline:
            return len(killed)
        for pid in others:
            try:
                os.kill(pid, signals.SIGKILL)
                killed.add(pid)
            except OSError:
                pass
        time.sleep(0.01)
