"""A shell on a pseudo-terminal of its own: start it, type into it, signal it, hang it up.

The terminal plumbing of :class:`.bash_session.BashSession`, with no knowledge of what is typed
(that is :mod:`.bash_protocol`).
"""

from __future__ import annotations

import fcntl
import os
import select
import signal
import struct
import subprocess
import sys
import termios
import time

__all__ = [
    "Child",
    "exit_code",
    "spawn_on_pty",
    "spawn_on_terminal",
    "write_all",
    "kill_foreground",
    "hang_up",
]

#: What a program on a new terminal gets with its default action, whatever the rocklet inherited
#: (under ``nohup`` SIGHUP is ignored, and Python ignores SIGPIPE): else a hang-up, an interrupt
#: or a closed pipe would not reach it, as they reach a program on a real terminal.
_DEFAULT_SIGNALS = (
    "SIGHUP",
    "SIGINT",
    "SIGQUIT",
    "SIGTERM",
    "SIGPIPE",
    "SIGTSTP",
    "SIGTTIN",
    "SIGTTOU",
)


def spawn_on_pty(argv: list[str], env: dict[str, str]) -> tuple[int, Child]:
    """Start ``argv`` in a new session on a new pty (echo off, ``\\n`` left as ``\\n``, 24x80),
    the pty its controlling terminal; the pty's master side (non-blocking) and the process."""
    master, slave = os.openpty()
    try:
        attrs = termios.tcgetattr(slave)
        attrs[1] &= ~termios.ONLCR  # keep "\n" as "\n" in output
        attrs[3] &= ~(termios.ECHO | termios.ECHONL)  # do not echo what we type
        termios.tcsetattr(slave, termios.TCSANOW, attrs)
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
        child = Child(spawn_on_terminal(argv, env, slave))
    except BaseException:
        os.close(master)
        raise
    finally:
        os.close(slave)
    os.set_blocking(master, False)
    return master, child


#: Run by the sandbox's own Python when a program on a terminal needs what ``posix_spawn``
#: cannot do: a working directory, another user, or (a C library without ``POSIX_SPAWN_SETSID``)
#: a session of its own. It is a new process: it shares no lock with the rocklet's threads.
#: Arguments: the directory ('' = stay), uid and gid (-1 = stay), the signals to reset, argv.
_SHIM = """
import fcntl, os, signal, sys, termios
home, uid, gid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
if os.getsid(0) != os.getpid():
    os.setsid()
fcntl.ioctl(0, termios.TIOCSCTTY, 0)
for name in sys.argv[4].split(","):
    signal.signal(getattr(signal, name), signal.SIG_DFL)
if uid >= 0:
    import pwd
    os.setgroups(os.getgrouplist(pwd.getpwuid(uid).pw_name, gid))
    os.setgid(gid)
    os.setuid(uid)
if home:
    try:
        os.chdir(home)
    except OSError:
        os.chdir("/")
os.execvpe(sys.argv[5], sys.argv[5:], os.environ)
"""


def spawn_on_terminal(
    argv: list[str],
    env: dict[str, str],
    slave: int,
    *,
    home: str = "",
    uid: int = -1,
    gid: int = -1,
) -> int:
    """Start ``argv`` with the terminal ``slave`` as its standard streams and controlling
    terminal, in a session of its own, with the default action for :data:`_DEFAULT_SIGNALS`;
    its pid. ``home``: its working directory; ``uid``/``gid``: the user it runs as.

    The rocklet has threads, so no Python code may run between a fork and the exec: a lock
    another thread held at the fork stays held in the child forever (seen: a terminal whose
    program never started). ``posix_spawn`` does it all in the C library, and it opens the
    terminal by its path after ``setsid``, which makes it the controlling terminal. What it
    cannot do is left to :data:`_SHIM`, started the same way.
    """
    path = os.ttyname(slave)
    signals = [getattr(signal, name) for name in _DEFAULT_SIGNALS]
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, path, os.O_RDWR, 0),
        (os.POSIX_SPAWN_DUP2, 0, 1),
        (os.POSIX_SPAWN_DUP2, 0, 2),
    ]
    shim = [sys.executable, "-I", "-S", "-c", _SHIM, home, str(uid), str(gid)]
    shim.append(",".join(_DEFAULT_SIGNALS))
    shimmed = [*shim, *argv] if home or uid >= 0 else argv
    try:
        return os.posix_spawn(
            shimmed[0], shimmed, env, file_actions=actions, setsid=True, setsigdef=signals
        )
    except NotImplementedError:  # no POSIX_SPAWN_SETSID in this C library: the shim's setsid
        shimmed = [*shim, *argv]
        return os.posix_spawn(shimmed[0], shimmed, env, file_actions=actions, setsigdef=signals)


def exit_code(status: int) -> int:
    """A wait status as a shell shows it: the exit code, or 128 + the signal that ended it."""
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status)
    return 1


class Child:
    """A process :func:`spawn_on_pty` started, with ``poll`` and ``wait`` as
    :class:`subprocess.Popen` has them (``wait`` raises :class:`subprocess.TimeoutExpired`)."""

    __slots__ = ("pid", "returncode")

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                done, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere
                done, status = self.pid, 0
            if done:
                self.returncode = exit_code(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.001
        while True:
            code = self.poll()
            if code is not None:
                return code
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0.0)
            time.sleep(delay)
            delay = min(delay * 2, 0.05)


def write_all(fd: int, payload: bytes) -> None:
    """Write ``payload`` to the terminal ``fd``; a terminal whose shell is gone takes nothing
    (the read that follows reports it)."""
    view = memoryview(payload)
    while view:
        try:
            n = os.write(fd, view)
        except BlockingIOError:
            poller = select.poll()
            poller.register(fd, select.POLLOUT)
            poller.poll(1000)
            continue
        except OSError:
            return
        view = view[n:]


def kill_foreground(fd: int, shell_pgrp: int) -> bool:
    """SIGKILL the terminal's foreground process group unless it is the shell's own; ``True``
    when the shell itself is in the foreground (nothing was killed: Ctrl-C is the caller's)."""
    try:
        pgrp = os.tcgetpgrp(fd)
    except OSError:
        return False
    if pgrp > 0 and pgrp != shell_pgrp:
        try:
            os.killpg(pgrp, signal.SIGKILL)
        except OSError:
            pass
        return False
    return True


def hang_up(proc: Child | None, shell_pid: int, force: bool = False) -> None:
    """End the shell: SIGHUP first (jobs get it as on a real hangup), SIGKILL if it stays;
    ``force``: SIGKILL at once. ``shell_pid`` is the shell's own pid when ``proc`` is ``su``."""
    if proc is None or proc.poll() is not None:
        return
    targets = [p for p in (shell_pid, proc.pid) if p]
    if not force:
        for pid in targets:
            try:
                os.kill(pid, signal.SIGHUP)
            except OSError:
                pass
        try:
            proc.wait(timeout=1.0)
            return
        except subprocess.TimeoutExpired:
            pass
    for pid in targets:
        for kill in (os.killpg, os.kill):
            try:
                kill(pid, signal.SIGKILL)
            except OSError:
                pass
    try:
        proc.wait(timeout=5.0)
    except subprocess.TimeoutExpired:
        pass
