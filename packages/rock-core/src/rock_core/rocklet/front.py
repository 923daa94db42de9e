"""The rocklet's front: it listens, answers the readiness probe, and loads the rest on first use.

A sandbox's start ends with the engine's ``GET /is_alive``; most of what the rocklet is (its
HTTP server, endpoints, ``json``) is needed only by the first real request. While hundreds of
sandboxes start at once on a machine, every module each imports is CPU the starts share: the
:mod:`socket`, :mod:`signal` and :mod:`threading` modules alone pull in :mod:`enum`,
:mod:`functools` and :mod:`collections`, some 14 ms of CPU a container. So until the first
request that is not a bare probe, the rocklet runs this front, built on the interpreter's own
``_socket``, ``_thread`` and ``select``:

* the main thread accepts connections (waking for signals, as
  :meth:`.server.RockletServer.serve_forever` does) and gives each a thread;
* a connection whose request is exactly ``GET /is_alive HTTP/1.1`` with no body is answered
  here, byte for byte as the full server answers it (the probe needs no secret there either);
* any other request is looked at without being read (``MSG_PEEK``): the full server is loaded
  (``load``, once), and the connection, its bytes unread, is served by it from then on, with
  every check the server makes (the secret first). Connections accepted later go straight to it.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # signal's own, without its enums
import _socket
import _thread
import posix
import select
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

__all__ = ["Front", "PROBE_BODY", "TOKEN_ENV", "probe_answer"]

#: The environment variable a runtime hands the secret to the rocklet in; the rocklet removes it
#: from its own environment at start, so the sandbox's commands do not inherit it.
TOKEN_ENV = "ROCK_ROCKLET_TOKEN"

#: ``GET /is_alive``'s body, as the full server's json writes it.
PROBE_BODY = b'{"is_alive":true,"message":""}'
# How much of a request is looked at to tell a probe: a probe's head is far shorter.
_PEEK = 4096
_PROBE_LINE = b"GET /is_alive HTTP/1.1\r\n"
# Headers that announce a body or a protocol change: such a request is the full server's.
_NOT_BARE = (b"content-length", b"transfer-encoding", b"expect", b"upgrade")


def probe_answer(keep_alive: bool) -> bytes:
    """The full server's answer to ``GET /is_alive``, as bytes on the wire."""
    return (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n%s\r\n%s"
        % (
            len(PROBE_BODY),
            b"" if keep_alive else b"connection: close\r\n",
            PROBE_BODY,
        )
    )


def _bare_probe(data: bytes) -> tuple[int, bool] | None:
    """``(length of the request, keep-alive)`` if ``data`` starts with a whole bare probe."""
    if not data.startswith(_PROBE_LINE):
        return None
    end = data.find(b"\r\n\r\n", len(_PROBE_LINE) - 2)
    if end < 0:
        return None  # not all here yet: the full server reads the rest
    keep_alive = True
    for line in data[len(_PROBE_LINE) : end].split(b"\r\n"):
        if not line:
            continue
        name, sep, value = line.partition(b":")
        if not sep:
            return None  # malformed: the full server says so
        name = name.strip().lower()
        if name in _NOT_BARE:
            return None
        if name == b"connection" and b"close" in value.lower():
            keep_alive = False
    return end + 4, keep_alive


class Front:
    """Serves ``listener`` (a listening ``_socket.socket``) until :meth:`shutdown`.

    :param load: returns the full server (an object with ``serve_connection(conn)``, given
        the ``_socket.socket`` of an accepted connection); called once, at the first request
        that is not a bare probe, or by :meth:`full`.
    """

    def __init__(self, listener: Any, load: Callable[[], Any]) -> None:
        self.listener = listener
        self._load = load
        self._loading = _thread.allocate_lock()
        self._loaded = _thread.allocate_lock()  # held until the load is done (or failed)
        self._loaded.acquire()
        self._full: Any = None
        self._failed = False
        self._closing = False
        self._main: int | None = None  # the thread of serve_forever, which loads
        self._wake_w: int | None = None
        #: Called once, in the thread of the first answer, after it is sent.
        self.after_first_answer: list[Callable[[], None]] = []

    @property
    def loaded(self) -> bool:
        """Whether the full server is loaded."""
        return self._full is not None

    def full(self) -> Any:
        """The full server, loaded now if it was not yet.

        Loaded in the thread of :meth:`serve_forever` (the process's main thread): the first
        import of :mod:`threading` takes the thread it runs in for the main thread, and one of
        the connection threads taken so would keep the interpreter from exiting. Another thread
        wakes it and waits.
        """
        if self._full is None:
            wake = self._wake_w
            if wake is not None and _thread.get_ident() != self._main:
                try:
                    posix.write(wake, b"L")
                except OSError:
                    pass  # full of wake-ups: the loop wakes anyway
                self._loaded.acquire()
                self._loaded.release()
            else:
                self._load_now()
        if self._full is None:
            raise RuntimeError("the rocklet's server could not be loaded")
        return self._full

    def _load_now(self) -> None:
        with self._loading:
            if self._full is not None or self._failed:
                return
            try:
                self._full = self._load()
            except BaseException:
                self._failed = True
                raise
            finally:
                self._loaded.release()

    def serve_forever(self) -> None:
        """Accept until :meth:`shutdown`; each connection is served in a thread of its own."""
        wake_r, wake_w = posix.pipe()
        posix.set_blocking(wake_r, False)
        posix.set_blocking(wake_w, False)
        try:
            old_wakeup = _signal.set_wakeup_fd(wake_w)
        except ValueError:  # not the main thread: signals are not ours to watch
            old_wakeup = None
        listener = self.listener
        # poll, not select: select refuses a descriptor numbered past 1,024.
        poller = select.poll()
        listener_fd = listener.fileno()
        poller.register(listener_fd, select.POLLIN)
        poller.register(wake_r, select.POLLIN)
        self._main = _thread.get_ident()
        self._wake_w = wake_w
        try:
            while not self._closing:
                if self._full is None and not self._failed and self._loaded.locked():
                    if b"L" in _drain(wake_r):
                        try:
                            self._load_now()
                        except Exception:
                            import traceback

                            sys.stderr.write("rocklet: could not load its server\n")
                            traceback.print_exc()
                try:
                    ready = {fd for fd, _ in poller.poll()}
                except OSError:
                    if self._closing:
                        return
                    continue
                if wake_r in ready and not self._loaded.locked():
                    _drain(wake_r)  # a signal's: its handler runs once this thread runs bytecode
                if listener_fd not in ready:
                    continue
                try:
                    fd, _ = listener._accept()
                except OSError:
                    if self._closing:
                        return
                    continue
                conn = _socket.socket(fileno=fd)
                _thread.start_new_thread(self._serve, (conn,))
        finally:
            self._wake_w = None
            if self._loaded.locked() and self._full is None:
                self._failed = True
                self._loaded.release()  # no thread waits for a load that will not come
            if old_wakeup is not None:
                _signal.set_wakeup_fd(old_wakeup)
            posix.close(wake_r)
            posix.close(wake_w)

    def shutdown(self) -> None:
        """Stop accepting connections (the full server's, too)."""
        self._closing = True
        try:
            self.listener.shutdown(_socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()
        if self._full is not None:
            self._full.shutdown()

    def _serve(self, conn: Any) -> None:
        try:
            while self._full is None:
                data = conn.recv(_PEEK, _socket.MSG_PEEK)
                if not data:
                    conn.close()
                    return
                probe = _bare_probe(data)
                if probe is None:
                    break
                length, keep_alive = probe
                conn.recv(length)  # the peeked bytes are there: this takes exactly the probe
                conn.sendall(probe_answer(keep_alive))
                while self.after_first_answer:
                    try:
                        self.after_first_answer.pop()()
                    except IndexError:
                        break
                if not keep_alive:
                    conn.close()
                    return
            full = self.full()
        except (OSError, RuntimeError):
            conn.close()
            return
        full.serve_connection(conn)


def _drain(fd: int) -> bytes:
    """What the non-blocking pipe ``fd`` holds (its wake-ups), read out."""
    got = b""
    while True:
        try:
            chunk = posix.read(fd, 512)
        except OSError:
            return got
        if not chunk:
            return got
        got += chunk
