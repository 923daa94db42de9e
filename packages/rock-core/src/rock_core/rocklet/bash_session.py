"""One persistent bash session over a pseudo-terminal, one write and one read per command.

A session is an interactive ``bash --noediting`` (or ``su <user> -c ...`` for ``remote_user``)
on its own pty, with echo off and ``\\n`` left as ``\\n``. ROCK drives its shell with pexpect,
sleeps 0.3 s at start, forks ``bash -n`` for every command and sends a second command to learn
the exit code. Here a command costs one write and one read:

* The command text goes into a per-session file; the line typed into the shell is always the
  same short *trigger*: read the file into a variable, check its syntax, ``eval`` it, remember
  ``$?``, restore the prompt. So any text works (heredocs, many lines, megabytes, quotes, text
  that looks like a prompt) and the tty's 4 KiB line limit never applies.
* The prompt ``PS1`` carries a random per-session nonce and the exit status:
  ``__ROCK_PS1_<nonce>_<status>__``. The trigger first prints a begin mark with the command's
  sequence number; the first prompt after it ends the read and gives the exit code in the same
  round trip. Prompts before the begin mark (a stray prompt after a late Ctrl-C) are dropped.
  Both marks are taken out of the output.
* Syntax is checked inside the shell without running anything: the text is parsed as the body
  of a throwaway function definition (``bash -n`` would cost a fork and an exec per command).
  A text that could close that body early (a ``}`` standing as a word) is checked with a real
  ``bash -n`` instead, so nothing of an invalid command ever runs.
* ``timeout`` (``None`` = none) and :meth:`BashSession.interrupt` send Ctrl-C, then again, then
  SIGKILL to the terminal's foreground process group, until the prompt is back; the session
  stays usable. A shell that cannot be brought back is killed and the session removed.
* ``expect`` strings end a read early (literal text, or a regular expression as pexpect treats
  them in ROCK); the program keeps running and the next command's text is typed to it as input.

Output between commands (from background jobs) is not read until the next command, as in ROCK,
and is returned with it.

What is typed and read back is in :mod:`.bash_protocol`, the terminal plumbing in
:mod:`.pty_shell`, the named sessions of a rocklet in :mod:`.sessions`.
"""

from __future__ import annotations

import os
import pwd
import select
import subprocess
import threading
import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds at start; annotations are strings anyway
    from collections.abc import Sequence
    from typing import Any

from .bash_protocol import (
    Expect,
    ShellMarks,
    bootstrap_line,
    clean_output,
    needs_bash_n,
    observation,
    syntax_error,
)
from .errors import (
    BashIncorrectSyntaxError,
    CommandTimeoutError,
    NonZeroExitCodeError,
    SessionDoesNotExistError,
    SessionExitedError,
    SessionNotInitializedError,
)
from .pty_shell import Child, hang_up, kill_foreground, spawn_on_pty, write_all

__all__ = ["BashSession", "DEFAULT_PATH"]

# The PATH of a session created without env_enable (ROCK leaves it to bash's compiled default,
# which on Debian ends in "."; this is the same list without the current directory).
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

_READ_SIZE = 1 << 18
# Escalation after an interrupt: (seconds after the first Ctrl-C, action).
_ESCALATION = ((1.0, "intr"), (2.0, "kill"), (5.0, "abandon"))


def _find_bash() -> str:
    if os.path.exists("/bin/bash"):
        return "/bin/bash"
    found = _which("bash")
    if not found:
        raise SessionNotInitializedError(
            "bash is not installed in this sandbox: sessions need /bin/bash"
        )
    return found


def _which(name: str) -> str | None:
    """``shutil.which(name)``, without importing shutil (and its bz2 and lzma: milliseconds
    of CPU in each sandbox's warm-up, while others are still starting)."""
    for folder in os.environ.get("PATH", os.defpath).split(os.pathsep):
        path = os.path.join(folder or ".", name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


class BashSession:
    """One persistent shell. Thread-safe: commands on one session run one at a time.

    :param name: the session's name (for messages).
    :param scratch_dir: a private directory for the command file; removed by :meth:`close`.
    :param env: the shell's environment.
    :param remote_user: run the shell as this user (through ``su``) unless ``None``/``root``.
    """

    def __init__(
        self, name: str, scratch_dir: str, env: dict[str, str], remote_user: str | None = None
    ) -> None:
        self.name = name
        self._dir = scratch_dir
        self._env = env
        self._user = remote_user if remote_user and remote_user != "root" else None
        self._marks = ShellMarks(os.urandom(8).hex())
        self._seq = 0
        self._lock = threading.Lock()  # one command at a time
        self._state = threading.Lock()  # guards _inflight/_interrupt_at against interrupt()
        self._inflight = False
        self._interrupt_at: float | None = None
        self._stage = 0
        self._foreground = False  # a program matched an expect string and may still read input
        self._pending = bytearray()  # output read past the last prompt
        self._fd = -1
        self._cmd_fd = -1
        self._proc: Child | None = None
        self._shell_pid = 0
        self._closing = False
        self.dead = False
        self.last_exit_code: int | None = None

    # -- start --------------------------------------------------------------------------

    def start(self, startup_source: Sequence[str] = (), timeout: float = 30.0) -> str:
        """Spawn the shell, source ``startup_source``, and wait for the first prompt.

        :returns: what the shell printed while starting (ANSI escapes removed).
        """
        bash = _find_bash()
        os.makedirs(self._dir, mode=0o700, exist_ok=True)
        if self._user is not None:
            try:
                pw = pwd.getpwnam(self._user)
            except KeyError:
                raise SessionNotInitializedError(
                    "remote_user %r does not exist in this sandbox" % self._user
                ) from None
            os.chown(self._dir, pw.pw_uid, pw.pw_gid)
            su = _which("su") or "/bin/su"
            argv = [su, self._user, "-c", bash + " --noediting"]
        else:
            argv = [bash, "--noediting"]
        cmd_path = os.path.join(self._dir, "command")
        self._cmd_fd = os.open(cmd_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        err_path = os.path.join(self._dir, "syntax")

        self._fd, self._proc = spawn_on_pty(argv, self._env)
        self._write_command(self._marks.setup_script(err_path, startup_source))

        deadline = time.monotonic() + timeout
        try:
            self._type(bootstrap_line(cmd_path))
            with self._lock:
                data, code, _, timed_out = self._collect(
                    deadline, (), None, interrupt_on_timeout=False
                )
        except SessionExitedError as exc:
            self.close()
            raise SessionNotInitializedError(
                "the shell of session %r exited while starting: %s"
                % (self.name, exc.extra_info.get("output", "")),
                extra_info=exc.extra_info,
            ) from None
        if timed_out:
            self.close()
            raise SessionNotInitializedError(
                "session %r did not reach its prompt within %s s (startup_source or .bashrc still running?)"
                % (self.name, timeout),
                extra_info={"output": clean_output(bytes(data))},
            )
        self._shell_pid = self._marks.take_shell_pid(data)
        return clean_output(bytes(data))

    # -- commands -----------------------------------------------------------------------

    def run(
        self,
        command: str,
        *,
        timeout: float | None = None,
        check: str = "raise",
        expect: Sequence[str] = (),
        error_msg: str = "",
        interactive: bool = False,
    ) -> dict[str, Any]:
        """Run ``command`` and return ROCK's ``BashObservation`` as a dict.

        :param timeout: seconds, ``None`` for no limit; past it the command is interrupted and
            :class:`CommandTimeoutError` raised with the session back at its prompt.
        :param check: ``"raise"`` (non-zero exit → :class:`NonZeroExitCodeError`), ``"silent"``
            (report the exit code) or ``"ignore"`` (``exit_code`` is ``None``).
        :param expect: strings that end the read when they appear in the output; the program
            that printed them keeps running and receives the next command as input.
        :param interactive: ROCK's ``is_interactive_command``/``is_interactive_quit``: an expect
            match reports exit code 0.
        """
        if "\x00" in command:
            raise BashIncorrectSyntaxError(
                "the command contains a NUL character, which bash cannot represent"
            )
        patterns = [Expect(e) for e in expect if e]
        with self._lock:
            self._check_usable()
            raw = self._foreground
            begin: bytes | None = None
            if raw:
                # A program is reading the terminal: the text is its input.
                payload = command.encode("utf-8")
                if not payload.endswith(b"\n"):
                    payload += b"\n"
            else:
                payload, begin = self._prepare(command)
            deadline = None if timeout is None else time.monotonic() + timeout
            with self._state:
                self._inflight = True
                self._interrupt_at = None
            try:
                self._type(payload)
                data, code, matched, timed_out = self._collect(deadline, patterns, begin)
            finally:
                with self._state:
                    self._inflight = False
                    self._interrupt_at = None
            self._foreground = matched is not None
            if code is not None:
                self.last_exit_code = code
        if not raw:
            self._marks.raise_syntax_error(data, command)
        output = clean_output(bytes(data))
        if raw and output.startswith(command.strip()):
            output = output[len(command.strip()) :].strip()  # the program echoed our input
        if timed_out:
            raise CommandTimeoutError(
                "timeout after %s seconds while running command %r" % (timeout, command),
                extra_info={"output": output, "exit_code": code},
            )
        if matched is not None:
            return observation(output, 0 if interactive else None, matched)
        if check == "ignore":
            return observation(output, None, "")
        if check == "raise" and code != 0:
            msg = "Command %r failed with exit code %s. Here is the output:\n%r" % (
                command,
                code,
                output,
            )
            if error_msg:
                msg = "%s: %s" % (error_msg, msg)
            raise NonZeroExitCodeError(msg, extra_info={"output": output, "exit_code": code})
        return observation(output, code, "")

    def interrupt(self) -> dict[str, Any]:
        """Ctrl-C the running command (escalating to SIGKILL) and wait for the prompt.

        Works both while another request is running a command in this session (that request
        then returns with the interrupted command's result) and when a program left running by
        an ``expect`` match is in the foreground. The session stays usable.
        """
        with self._state:
            if self._inflight:
                self._begin_interrupt()
                waited = True
            else:
                waited = False
        if waited:
            with self._lock:  # the running request sees the prompt and releases the session
                return {
                    "session_type": "bash",
                    "interrupted": True,
                    "output": "",
                    "exit_code": self.last_exit_code,
                }
        with self._lock:
            self._check_usable()
            if not self._foreground:
                return {
                    "session_type": "bash",
                    "interrupted": False,
                    "output": "",
                    "exit_code": None,
                }
            with self._state:
                self._inflight = True
                self._begin_interrupt()
            try:
                data, code, _, _ = self._collect(None, (), None)
            finally:
                with self._state:
                    self._inflight = False
                    self._interrupt_at = None
            self._foreground = False
            self.last_exit_code = code
        return {
            "session_type": "bash",
            "interrupted": True,
            "output": clean_output(bytes(data)),
            "exit_code": code,
        }

    def close(self) -> None:
        """Hang up the shell (as closing a terminal does) and free the session's resources.

        Jobs started with ``nohup`` (or disowned) survive, as they would in ROCK.
        """
        self._closing = True
        self._hang_up()
        acquired = self._lock.acquire(timeout=10)
        try:
            if self._fd != -1:
                os.close(self._fd)
                self._fd = -1
            if self._cmd_fd != -1:
                os.close(self._cmd_fd)
                self._cmd_fd = -1
        finally:
            if acquired:
                self._lock.release()
        self.dead = True
        import shutil  # here, not at start: shutil imports bz2 and lzma (see _which)

        shutil.rmtree(self._dir, ignore_errors=True)

    # -- internals ----------------------------------------------------------------------

    def _check_usable(self) -> None:
        if self.dead or self._closing or self._fd == -1:
            raise SessionDoesNotExistError("session %r does not exist" % self.name)

    def _write_command(self, payload: bytes) -> None:
        os.ftruncate(self._cmd_fd, 0)
        view = memoryview(payload)
        offset = 0
        while offset < len(payload):
            offset += os.pwrite(self._cmd_fd, view[offset:], offset)

    def _prepare(self, command: str) -> tuple[bytes, bytes]:
        """Store ``command`` for the shell; the trigger line to type and its begin mark."""
        self._seq += 1
        checked = bool(command.strip())
        if checked and needs_bash_n(command):
            self._syntax_check_with_bash_n(command)
            checked = False
        self._write_command(command.encode("utf-8"))
        return self._marks.trigger(self._seq, checked)

    def _syntax_check_with_bash_n(self, command: str) -> None:
        proc = subprocess.run(
            [_find_bash(), "-n"],
            input=command.encode("utf-8") + b"\n",
            capture_output=True,
            env={"PATH": DEFAULT_PATH},
        )
        if proc.returncode != 0:
            raise syntax_error(
                command,
                proc.returncode,
                proc.stdout.decode("utf-8", "backslashreplace"),
                proc.stderr.decode("utf-8", "backslashreplace"),
            )

    def _type(self, payload: bytes) -> None:
        """Write ``payload`` to the terminal."""
        write_all(self._fd, payload)

    def _begin_interrupt(self) -> None:
        """Send the first Ctrl-C (caller holds ``_state``)."""
        if self._interrupt_at is None:
            self._interrupt_at = time.monotonic()
            self._stage = 0
            self._type(b"\x03")

    def _escalate(self, now: float) -> float | None:
        """Run the interrupt escalation due at ``now``; the time of the next step."""
        with self._state:
            start = self._interrupt_at
            if start is None:
                return None
            while self._stage < len(_ESCALATION) and now - start >= _ESCALATION[self._stage][0]:
                action = _ESCALATION[self._stage][1]
                self._stage += 1
                if action == "intr":
                    self._type(b"\x03")
                elif action == "kill":
                    self._kill_foreground()
                else:
                    # The shell itself ignores SIGINT and keeps the terminal: give up on it.
                    self._hang_up(force=True)
            if self._stage < len(_ESCALATION):
                return start + _ESCALATION[self._stage][0]
            return None

    def _kill_foreground(self) -> None:
        shell_pgrp = self._shell_pid or (self._proc.pid if self._proc else 0)
        if kill_foreground(self._fd, shell_pgrp):
            self._type(b"\x03")

    def _collect(
        self,
        deadline: float | None,
        patterns: Sequence[Expect],
        begin: bytes | None,
        interrupt_on_timeout: bool = True,
    ) -> tuple[bytearray, int | None, str | None, bool]:
        """Read until this command's prompt (the first after ``begin``) or an expect match.

        :returns: ``(output bytes, exit code or None, matched expect text or None, timed out)``.
        """
        buf = self._pending
        self._pending = bytearray()
        scan = 0
        escan = 0
        bscan = 0
        timed_out = False
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        while True:
            if begin is not None:
                i = buf.find(begin, bscan)
                if i == -1:
                    bscan = max(0, len(buf) - len(begin) + 1)
                else:
                    # Whatever came before the begin mark is output of earlier jobs; a prompt
                    # there is a stray one (a Ctrl-C that arrived after its command ended).
                    head = self._marks.drop_prompts(buf[:i])
                    del buf[: i + len(begin)]
                    buf[:0] = head
                    scan = escan = len(head)
                    begin = None
            if begin is not None:
                prompt = None
            else:
                prompt = self._marks.find_prompt(buf, scan)
            if isinstance(prompt, int):
                scan = prompt
                prompt = None
            best: tuple[int, int, str] | None = None
            for pat in patterns if begin is None else ():
                hit = pat.search(buf, escan)
                if hit is not None and (best is None or hit[0] < best[0]):
                    best = (hit[0], hit[1], bytes(buf[hit[0] : hit[1]]).decode("utf-8", "replace"))
            escan = len(buf)
            if best is not None and (prompt is None or best[0] < prompt[0]):
                self._pending = buf[best[1] :]
                del buf[best[0] :]
                return buf, None, best[2], timed_out
            if prompt is not None:
                start, end, code = prompt
                self._pending = buf[end:]
                del buf[start:]
                return buf, code, None, timed_out

            now = time.monotonic()
            wait = 0.25
            if deadline is not None and not timed_out:
                if now >= deadline:
                    timed_out = True
                    if not interrupt_on_timeout:
                        return buf, None, None, True
                    with self._state:
                        self._begin_interrupt()
                else:
                    wait = min(wait, deadline - now)
            if self._interrupt_at is not None:
                nxt = self._escalate(now)
                if nxt is not None:
                    wait = min(wait, max(0.0, nxt - now))
            if not poller.poll(int(wait * 1000) + 1):
                continue
            try:
                chunk = os.read(self._fd, _READ_SIZE)
            except BlockingIOError:
                continue
            except OSError:
                chunk = b""  # EIO: the terminal's other side is closed
            if not chunk:
                self._on_shell_exit(buf)
            buf += chunk

    def _on_shell_exit(self, buf: bytearray) -> None:
        status = None
        if self._proc is not None:
            try:
                status = self._proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                pass
        self.dead = True
        output = clean_output(bytes(buf))
        if self._closing:
            raise SessionDoesNotExistError(
                "session %r was closed while running a command" % self.name,
                extra_info={"output": output},
            )
        raise SessionExitedError(
            "the shell of session %r exited (status %s); create a new session"
            % (self.name, status),
            extra_info={"output": output, "exit_code": status},
        )

    def _hang_up(self, force: bool = False) -> None:
        hang_up(self._proc, self._shell_pid, force)
