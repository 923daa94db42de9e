"""A simulated sandboxes' shared rocklet that answers readiness probes in an event loop.

The control-plane benches (``rock bench control-plane``: the scripted runtime, and the stand-in
Nomad's simulated tasks) start thousands of sandboxes whose every rocklet is one real rocklet.
That rocklet serves a connection per thread, as a sandbox's own rocklet does: fine for one
sandbox's few connections, but 16,000 readiness probes at once (a fresh connection each) meant
16,000 threads in one process, which neither accepted nor answered in time (starts failed while
their containers were long "up"). A real deployment has a rocklet per sandbox, each answering
its own probe at once.

:class:`LoopFirstRocklet` keeps the real rocklet for everything it serves, and answers the probe
itself: an accepted connection is watched by the event loop, which peeks at its first bytes; a
bare ``GET /is_alive`` is read and answered there (as the rocklet answers it, ``Connection:
close`` honoured, else the next request is peeked at the same way), and any other request is
handed, unread, to the real rocklet's connection loop in a thread of its own. So a probe costs
no thread, and commands, files and sessions still run.

:func:`serve_loop_first_rocklet` serves one on a port of its own, or on a unix socket as
rock-docker's sandboxes are reached by default, in this process's main thread (``python -m
rock.bench.scripted_admin --serve-rocklet``: a process apart from the admin's, so its CPU is not
the admin's).
"""

from __future__ import annotations

import asyncio
import socket
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

__all__ = ["ALIVE_RESPONSE", "LoopFirstRocklet", "serve_loop_first_rocklet"]

_ALIVE_BODY = b'{"is_alive":true,"message":""}'
#: The rocklet's answer to ``GET /is_alive`` (its body as the rocklet writes it).
ALIVE_RESPONSE = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
    b"Content-Length: %d\r\n" % len(_ALIVE_BODY)
)
_PROBE = b"GET /is_alive"
#: Longest request head read in the loop; past it, the connection goes to the real rocklet.
_MAX_HEAD = 8192


class LoopFirstRocklet:
    """A real rocklet (no secret asked) whose readiness probes an event loop answers (see the
    module docstring). Bound to a port of its own it never accepts on: connections come from
    elsewhere through :meth:`serve`.

    :param work_dir: where the rocklet's state folder is made (a temporary folder otherwise).
    """

    def __init__(self, work_dir: Path | None = None) -> None:
        from rock_core.rocklet.api import Rocklet, build_router
        from rock_core.rocklet.server import RockletServer

        self._dir = tempfile.TemporaryDirectory(prefix="rocklet-", dir=work_dir)
        self.server = RockletServer(build_router(Rocklet(self._dir.name)), "127.0.0.1", 0)
        #: Probes answered in the loop, and connections handed to the real rocklet.
        self.probes = 0
        self.handed_over = 0

    def serve(self, conn: socket.socket, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Serve ``conn`` (an accepted connection): probes in ``loop`` (the running one by
        default), anything else by the real rocklet in a thread of its own."""
        loop = loop or asyncio.get_running_loop()
        conn.setblocking(False)
        fd = conn.fileno()

        def done() -> None:
            loop.remove_reader(fd)

        def readable() -> None:
            try:
                head = conn.recv(_MAX_HEAD, socket.MSG_PEEK)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                done()
                conn.close()
                return
            if not head:  # the client closed it
                done()
                conn.close()
                return
            probe = head.startswith(_PROBE) and head[len(_PROBE) : len(_PROBE) + 1] in b" ?"
            if not probe and not (len(head) < len(_PROBE) + 1 and _PROBE.startswith(head)):
                done()
                self._hand_over(conn)
                return
            end = head.find(b"\r\n\r\n")
            if end < 0:
                if len(head) >= _MAX_HEAD:
                    done()
                    self._hand_over(conn)
                return  # the rest of the head is still on its way
            request = conn.recv(end + 4)  # exactly this request (it has no body)
            close = b"connection: close" in request.lower()
            self.probes += 1
            try:
                conn.send(
                    ALIVE_RESPONSE
                    + (b"Connection: close\r\n\r\n" if close else b"\r\n")
                    + _ALIVE_BODY
                )
            except OSError:
                close = True
            if close:
                done()
                conn.close()

        loop.add_reader(fd, readable)

    def _hand_over(self, conn: socket.socket) -> None:
        self.handed_over += 1
        conn.setblocking(True)
        threading.Thread(
            target=self.server._serve_connection,  # noqa: SLF001 - the rocklet's own connection loop
            args=(conn,),
            name="rocklet-connection",
            daemon=True,
        ).start()

    def close(self) -> None:
        """Stop the rocklet (connections in its threads finish on their own)."""
        self.server.shutdown()
        self._dir.cleanup()


def serve_loop_first_rocklet(
    on_listening: Callable[[tuple[str, int]], None],
    until: Callable[[], bool],
    *,
    unix_path: str | None = None,
) -> None:
    """Serve a :class:`LoopFirstRocklet` on a free port of 127.0.0.1 (or on the unix socket
    ``unix_path``, which must not exist) in this thread's new event loop; call
    ``on_listening((host, port))`` (``(unix_path, 0)``) once it listens, and end once
    ``until()`` is true (asked every half second)."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        rocklet = LoopFirstRocklet()
        if unix_path is None:
            listener = socket.socket()
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", 0))
        else:
            listener = socket.socket(socket.AF_UNIX)
            listener.bind(unix_path)
        listener.listen(4096)
        listener.setblocking(False)

        def accept() -> None:
            for _ in range(256):  # a burst: accept what is there, then let probes be answered
                try:
                    conn, _ = listener.accept()
                except (BlockingIOError, InterruptedError):
                    return
                except OSError:
                    return
                if unix_path is None:
                    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                rocklet.serve(conn, loop)

        loop.add_reader(listener.fileno(), accept)
        on_listening(listener.getsockname()[:2] if unix_path is None else (unix_path, 0))
        try:
            while not until():  # noqa: ASYNC110 - a condition no event tells
                await asyncio.sleep(0.5)
        finally:
            loop.remove_reader(listener.fileno())
            listener.close()
            rocklet.close()

    asyncio.run(main())
