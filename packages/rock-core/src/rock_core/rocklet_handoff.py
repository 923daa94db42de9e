"""The engine's side of the listener handoff: a rocklet's listening socket, made by the engine.

Why: an engine that connects to a socket the *rocklet* bound, at a path in a directory the
sandbox can write, follows whatever the sandbox puts there (``ln -s /var/run/docker.sock``)
and speaks to it on the host. So a runtime on the engine's host makes the socket itself:

1. before the unit starts, :meth:`HandoffDesk.offer` binds and listens on the rocklet's socket
   at ``listen_path``, in a directory only the engine's user may enter and no unit mounts, and
   listens on a one-shot *handoff* socket at ``handoff_path``, in a directory the unit mounts
   read-only (``connect()`` to a socket needs no write access to its mount);
2. the rocklet, started with ``--listen-fd-from <handoff_path as the unit sees it>``, connects
   there at once and receives the listening socket (``SCM_RIGHTS``;
   :func:`rock_core.rocklet.handoff.receive_listener`), then serves on it;
3. the desk sends it to the first connection, closes and unlinks the handoff socket and closes
   its own copy of the listener. The engine connects only to ``listen_path``. Connections made
   before the rocklet serves wait in the listener's backlog, so the engine sees the rocklet
   ready without polling for a file; after an engine restart the rocklet still holds the
   socket, and ``listen_path`` still reaches it.

Every start of a unit makes a fresh offer (a fresh socket at the same path). An offer nobody
takes is ended by :meth:`HandoffDesk.cancel` (the unit stopped or removed) or :meth:`close`;
a rocklet waiting then sees its connection closed and exits.

One thread per desk waits on every pending handoff socket at once (``selectors``), and sleeps
when none is pending: an offer costs two binds, and the handoff one accept and one send.
"""

from __future__ import annotations

import array
import logging
import os
import selectors
import socket
import threading
from pathlib import Path

__all__ = ["HandoffDesk"]

log = logging.getLogger("rock.rocklet_handoff")


class _Offer:
    """One pending handoff: the rocklet's listener, and the socket it is offered on."""

    __slots__ = ("key", "listener", "handoff", "handoff_path")

    def __init__(
        self, key: str, listener: socket.socket, handoff: socket.socket, handoff_path: Path
    ) -> None:
        self.key = key
        self.listener = listener
        self.handoff = handoff
        self.handoff_path = handoff_path

    def end(self) -> None:
        """Close both sockets and unlink the handoff socket (the listener's path stays: the
        rocklet serves there once it has the socket)."""
        self.handoff.close()
        _unlink(self.handoff_path)
        self.listener.close()


class HandoffDesk:
    """The pending handoffs of one runtime, served by one thread.

    Thread-safe: offers and cancellations may come from any thread.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._offers: dict[str, _Offer] = {}
        self._selector: selectors.BaseSelector | None = None
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._closed = False

    def __len__(self) -> int:
        return len(self._offers)

    def offer(
        self, key: str, listen_path: str | os.PathLike[str], handoff_path: str | os.PathLike[str]
    ) -> None:
        """Listen at ``listen_path`` for the rocklet of unit ``key``, and offer that socket once
        on a new socket at ``handoff_path`` (mode 0666: any user of the unit may take it).

        Files left at either path by an earlier start are replaced; an earlier offer of ``key``
        is cancelled. Blocking, but only for a few system calls.

        :raises OSError: a path cannot be bound (too long, its folder missing).
        :raises RuntimeError: the desk is closed.
        """
        self.cancel(key)
        listen_path, handoff_path = Path(listen_path), Path(handoff_path)
        listener = _listening(listen_path, backlog=1024)
        try:
            handoff = _listening(handoff_path, backlog=1)
            os.chmod(handoff_path, 0o666)
        except BaseException:
            listener.close()
            _unlink(handoff_path)
            raise
        handoff.setblocking(False)
        offer = _Offer(key, listener, handoff, handoff_path)
        with self._lock:
            if self._closed:
                offer.end()
                raise RuntimeError("the rocklet handoff desk is closed")
            self._start_thread()
            assert self._selector is not None
            self._offers[key] = offer
            self._selector.register(handoff, selectors.EVENT_READ, offer)
        self._wake()

    def cancel(self, key: str) -> bool:
        """End the offer of ``key`` if it is still pending; whether one was."""
        with self._lock:
            offer = self._offers.pop(key, None)
            if offer is None:
                return False
            self._unregister(offer)
        offer.end()
        return True

    def close(self) -> None:
        """Cancel every pending offer and end the thread. Idempotent."""
        with self._lock:
            self._closed = True
            offers, self._offers = list(self._offers.values()), {}
            for offer in offers:
                self._unregister(offer)
        for offer in offers:
            offer.end()
        self._wake()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    # -- the thread --------------------------------------------------------------------------

    def _start_thread(self) -> None:
        """Start the thread on the first offer (the lock is held)."""
        if self._thread is not None:
            return
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._thread = threading.Thread(target=self._serve, name="rocklet-handoff", daemon=True)
        self._thread.start()

    def _wake(self) -> None:
        """Make the thread look at its registrations again."""
        if self._wake_w is not None:
            try:
                self._wake_w.send(b"\0")
            except OSError:
                pass  # its buffer is full: the thread is awake anyway

    def _unregister(self, offer: _Offer) -> None:
        if self._selector is not None:
            try:
                self._selector.unregister(offer.handoff)
            except (KeyError, ValueError):
                pass

    def _serve(self) -> None:
        assert self._selector is not None and self._wake_r is not None and self._wake_w is not None
        selector, wake_r, wake_w = self._selector, self._wake_r, self._wake_w
        try:
            while not self._closed:
                for key, _ in selector.select():
                    offer = key.data
                    if offer is None:
                        try:
                            wake_r.recv(4096)
                        except OSError:
                            pass
                        continue
                    self._hand_over(offer)
        finally:
            selector.close()
            wake_r.close()
            wake_w.close()

    def _hand_over(self, offer: _Offer) -> None:
        """Send the listener to the rocklet that connected, and end the offer."""
        try:
            conn, _ = offer.handoff.accept()
        except (BlockingIOError, InterruptedError):
            return  # the connection went away meanwhile: wait for the next
        except OSError:
            conn = None  # cancelled meanwhile
        with self._lock:
            if self._offers.get(offer.key) is not offer:
                if conn is not None:
                    conn.close()
                return  # cancelled meanwhile: cancel ended it
            del self._offers[offer.key]
            self._unregister(offer)
        # The handoff socket goes before the rocklet has its listener: once it has, the unit may
        # be stopped and started again at once, and a new offer bind the same path.
        offer.handoff.close()
        _unlink(offer.handoff_path)
        try:
            if conn is not None:
                with conn:
                    conn.settimeout(5.0)
                    conn.sendmsg(
                        [b"\0"],
                        [
                            (
                                socket.SOL_SOCKET,
                                socket.SCM_RIGHTS,
                                array.array("i", [offer.listener.fileno()]),
                            )
                        ],
                    )
        except OSError as exc:
            log.warning("could not hand unit %s its rocklet socket: %s", offer.key, exc)
        finally:
            offer.listener.close()


def _listening(path: Path, *, backlog: int) -> socket.socket:
    """A unix socket bound at ``path`` (replacing what is there) and listening."""
    _unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
        sock.listen(backlog)
    except BaseException:
        sock.close()
        raise
    return sock


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
