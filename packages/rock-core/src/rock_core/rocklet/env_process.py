"""One GEM environment's process, as the rocklet sees it: the socket to it, one request and
one answer at a time (newline-delimited JSON), and how it fails.

The process itself is a child of the env worker (:mod:`.env_worker`); :mod:`.envs` starts it.
A failure is :class:`~.errors.EnvError` with ``extra_info.kind`` (``env_died``, ``timeout``,
the env's own kinds).
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import threading
import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds at start; annotations are strings anyway
    from typing import Any

from .errors import EnvError

__all__ = ["EnvProcess", "LineReader", "env_error", "result_of"]


def env_error(kind: str, message: str, **extra: Any) -> EnvError:
    """An :class:`EnvError` of ``kind`` (``extra_info.kind``) with ``extra`` beside it."""
    info = {"kind": kind}
    info.update(extra)
    return EnvError(message, extra_info=info)


class LineReader:
    """Newline-delimited JSON from a socket, with a deadline per read."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""

    def line(self, deadline: float | None) -> bytes | None:
        """The next line, ``None`` at EOF; raises :class:`socket.timeout` past ``deadline``."""
        while True:
            end = self.buf.find(b"\n")
            if end >= 0:
                line, self.buf = self.buf[:end], self.buf[end + 1 :]
                return line
            if deadline is not None:
                left = deadline - time.monotonic()
                # poll, not select: past 1,024 descriptors select refuses the socket's number
                poller = select.poll()
                poller.register(self.sock, select.POLLIN)
                if left <= 0 or not poller.poll(max(1, int(left * 1000))):
                    raise TimeoutError()
            try:
                chunk = self.sock.recv(1 << 16)
            except (ConnectionResetError, BrokenPipeError):
                chunk = b""
            if not chunk:
                return None
            self.buf += chunk


class EnvProcess:
    """An env's forked process and the socket to it; a shared one (``shared``) hosts several
    envs, each named in a request by its key (``s``)."""

    def __init__(self, key: str, sock: socket.socket, pid: int, *, shared: bool = False) -> None:
        self.key = key
        self.sock = sock
        self.reader = LineReader(sock)
        self.pid = pid
        self.env_id: str | None = None
        self.shared = shared
        #: The keys of the envs it hosts.
        self.envs: list[str] = []
        self.dead: str | None = None
        # Requests are written as they come (one writer at a time) and answered in that order:
        # each gets a ticket, and its answer is read by whoever holds it, when its turn comes.
        self._send_lock = threading.Lock()
        self._turn = threading.Condition()
        self._sent = 0
        self._read = 0
        self._pending: dict[int, frozenset[str]] = {}

    @property
    def pending(self) -> frozenset[str]:
        """The envs with a request sent to the process and its answer not read yet."""
        return frozenset().union(*list(self._pending.values()))

    @property
    def busy(self) -> bool:
        """A request was sent to the process and its answer is not read yet."""
        return bool(self._pending)

    def describe(self) -> str:
        if self.shared:
            return "the env process of %s (pid %d)" % (", ".join(self.envs) or "no env", self.pid)
        return "env %s (%s, pid %d)" % (self.key, self.env_id or "not made yet", self.pid)

    def send(self, request: dict[str, Any], keys: frozenset[str] | None = None) -> int:
        """Write one request (for the envs ``keys``, default its ``s``) and return its ticket
        for :meth:`receive`; a dead process raises ``env_died``."""
        data = json.dumps(request, separators=(",", ":")).encode("utf-8") + b"\n"
        with self._send_lock:
            if self.dead is not None:
                raise env_error("env_died", self.dead, env=self.key)
            try:
                self.sock.sendall(data)
            except OSError:
                raise self._died() from None
            ticket = self._sent
            self._sent += 1
            self._pending[ticket] = (
                keys if keys is not None else frozenset((str(request.get("s", "")),))
            )
            return ticket

    def receive(self, ticket: int, deadline: float | None) -> dict[str, Any]:
        """Read the answer of ``ticket``, after those sent before it: ``{"ok": ...}`` or
        ``{"error": ...}``; EOF or the deadline (the process is then ended) raise."""
        answer: dict[str, Any] = json.loads(self.receive_line(ticket, deadline))
        return answer

    def receive_line(self, ticket: int, deadline: float | None) -> bytes:
        """:meth:`receive`'s answer line as it came (not read as JSON)."""
        with self._turn:
            try:
                while self._read != ticket and self.dead is None:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        raise self._timed_out()
                    self._turn.wait(left)
                if self.dead is not None:
                    raise env_error("env_died", self.dead, env=self.key)
                try:
                    line = self.reader.line(deadline)
                except TimeoutError:
                    raise self._timed_out() from None
                self._read += 1
                if line is None:
                    raise self._died()
            finally:
                self._pending.pop(ticket, None)
                self._turn.notify_all()
        return line

    def _timed_out(self) -> EnvError:
        self.kill()
        self.dead = "%s did not answer in time and was ended" % self.describe()
        return env_error("timeout", self.dead, env=self.key)

    def call(self, request: dict[str, Any], timeout: float | None) -> Any:
        """Send ``request`` and return its ``ok`` result (raises the env's error)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        return result_of(self.receive(self.send(request), deadline), self)

    def _died(self) -> EnvError:
        self.dead = "the process of %s has exited; make the env again" % self.describe()
        if self.shared:
            self.dead = "%s has exited; make the env again" % self.describe()
        self.close_socket()
        return env_error("env_died", self.dead, env=self.key)

    def kill(self) -> None:
        """SIGKILL the process (it is the fork server's child, not ours: no wait) and close the socket."""
        try:
            os.kill(self.pid, signal.SIGKILL)
        except OSError:
            pass
        self.close_socket()

    def close_socket(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def result_of(answer: dict[str, Any], env: EnvProcess) -> Any:
    """The result of an answer, or its error raised as :class:`EnvError`."""
    if "error" in answer:
        err = answer["error"] or {}
        raise env_error(
            str(err.get("kind", "env_error")),
            str(err.get("message", "")),
            env=env.key,
            env_id=env.env_id,
            traceback=err.get("traceback") or [],
        )
    return answer.get("ok")
