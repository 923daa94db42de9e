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
import termios

__all__ = ["spawn_on_pty", "write_all", "kill_foreground", "hang_up", "default_signals"]

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


def spawn_on_pty(argv: list[str], env: dict[str, str]) -> tuple[int, subprocess.Popen[bytes]]:
    """Start ``argv`` in a new session on a new pty (echo off, ``\\n`` left as ``\\n``, 24x80),
    the pty its controlling terminal; the pty's master side (non-blocking) and the process."""
    master, slave = os.openpty()
    try:
        attrs = termios.tcgetattr(slave)
        attrs[1] &= ~termios.ONLCR  # keep "\n" as "\n" in output
        attrs[3] &= ~(termios.ECHO | termios.ECHONL)  # do not echo what we type
        termios.tcsetattr(slave, termios.TCSANOW, attrs)
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
        proc = subprocess.Popen(
            argv,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            start_new_session=True,
            preexec_fn=_take_controlling_tty,
            close_fds=True,
        )
    except BaseException:
        os.close(master)
        raise
    finally:
        os.close(slave)
    os.set_blocking(master, False)
    return master, proc


def _take_controlling_tty() -> None:
    """In the child, before exec: make the pty (already on fd 0) the controlling terminal, with
    the signals' default actions."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    default_signals()


def default_signals() -> None:
    """In a child about to exec a program on a terminal: the default action for each of
    :data:`_DEFAULT_SIGNALS` (an ignored signal stays ignored across exec)."""
    for name in _DEFAULT_SIGNALS:
        signal.signal(getattr(signal, name), signal.SIG_DFL)


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


def hang_up(proc: subprocess.Popen[bytes] | None, shell_pid: int, force: bool = False) -> None:
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
