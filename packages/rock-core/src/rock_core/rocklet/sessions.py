"""The named sessions of one rocklet (ROCK's ``/create_session``, ``/run_in_session``,
``/close_session``, and rock's ``/interrupt_session``).

Each session is a :class:`~.bash_session.BashSession` (see there for how a command runs); a new
shell's environment is the rocklet's own with ``env_enable``, else a minimal one.
"""

from __future__ import annotations

import os
import pwd
import threading

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds at start; annotations are strings anyway
    from collections.abc import Sequence
    from typing import Any

from .bash_session import DEFAULT_PATH, BashSession
from .errors import SessionDoesNotExistError, SessionExistsError

__all__ = ["BashSession", "SessionManager", "DEFAULT_PATH"]


class SessionManager:
    """The named sessions of one rocklet.

    The scratch root is made with the first session, not before: a rocklet that only warms up
    writes nothing to the sandbox's files (a fork of a sandbox unchanged since its last snapshot
    reuses that snapshot only while its files stay as they were)."""

    def __init__(self, scratch_root: str) -> None:
        self._root = scratch_root
        self._sessions: dict[str, BashSession | None] = {}
        self._lock = threading.Lock()
        self._counter = 0
        self._root_made = False

    def create(
        self,
        name: str,
        *,
        startup_source: Sequence[str] = (),
        env_enable: bool = False,
        env: dict[str, str] | None = None,
        remote_user: str | None = None,
        startup_timeout: float = 30.0,
    ) -> str:
        """Start session ``name``; its startup output. A taken name is :class:`SessionExistsError`."""
        with self._lock:
            if name in self._sessions:
                raise SessionExistsError("session %s already exists" % name)
            self._sessions[name] = None  # reserved while the shell starts
            self._counter += 1
            scratch = os.path.join(self._root, "s%d" % self._counter)
            if not self._root_made:
                try:
                    os.makedirs(self._root, exist_ok=True)
                    # Traversable, not listable: a remote_user shell reaches its own dir only.
                    os.chmod(self._root, 0o711)
                except BaseException:
                    self._sessions.pop(name, None)
                    raise
                self._root_made = True
        try:
            session = BashSession(name, scratch, _session_env(env_enable, env), remote_user)
            output = session.start(startup_source, startup_timeout)
        except BaseException:
            with self._lock:
                self._sessions.pop(name, None)
            raise
        with self._lock:
            self._sessions[name] = session
        return output

    def get(self, name: str) -> BashSession:
        """The session ``name`` or :class:`SessionDoesNotExistError`."""
        with self._lock:
            session = self._sessions.get(name)
        if session is None or session.dead:
            raise SessionDoesNotExistError("session %r does not exist" % name)
        return session

    def run(self, name: str, command: str, **kwargs: Any) -> dict[str, Any]:
        """Run ``command`` in session ``name`` (see :meth:`BashSession.run`)."""
        session = self.get(name)
        try:
            return session.run(command, **kwargs)
        finally:
            if session.dead:
                self._forget(name, session)

    def interrupt(self, name: str) -> dict[str, Any]:
        """Interrupt the command running in session ``name``."""
        session = self.get(name)
        try:
            return session.interrupt()
        finally:
            if session.dead:
                self._forget(name, session)

    def close(self, name: str) -> None:
        """Close session ``name``; an unknown name is :class:`SessionDoesNotExistError`."""
        with self._lock:
            session = self._sessions.get(name)
            if session is None:
                raise SessionDoesNotExistError("session %r does not exist" % name)
            del self._sessions[name]
        session.close()

    def close_all(self) -> None:
        """Close every session."""
        with self._lock:
            sessions = [s for s in self._sessions.values() if s is not None]
            self._sessions.clear()
        threads = [threading.Thread(target=s.close, daemon=True) for s in sessions]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def names(self) -> list[str]:
        """Names of the live sessions."""
        with self._lock:
            return sorted(n for n, s in self._sessions.items() if s is not None and not s.dead)

    def _forget(self, name: str, session: BashSession) -> None:
        with self._lock:
            if self._sessions.get(name) is session:
                del self._sessions[name]
        session.close()


def _session_env(env_enable: bool, env: dict[str, str] | None) -> dict[str, str]:
    """The environment of a new shell: the rocklet's own when ``env_enable``, else a minimal one."""
    if env_enable:
        result = dict(os.environ)
    else:
        result = {"PATH": DEFAULT_PATH}
        try:
            pw = pwd.getpwuid(os.getuid())
            result.update(HOME=pw.pw_dir, USER=pw.pw_name, LOGNAME=pw.pw_name)
        except KeyError:
            pass
    result.update(PS1="", PS2="", PS0="")
    if env:
        result.update(env)
    return result
