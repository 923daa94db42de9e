"""Interactive terminals: ``GET /pty`` with ``Upgrade: rock-pty``.

The rocklet starts a program (the user's shell by default) on a new pseudo-terminal, answers
``101 Switching Protocols``, and from then on the connection carries *frames* both ways until
the program ends. A frame is one type byte, a 4-byte big-endian length, then that many bytes:

=====  ==========  ==================================================================
type   direction   payload
=====  ==========  ==================================================================
``d``  both        terminal bytes: keystrokes in, output out (Ctrl-C is the byte 0x03:
                   the terminal's line discipline turns it into SIGINT for the
                   foreground program, as on any terminal)
``r``  in          a window size: rows and columns, two big-endian 16-bit numbers
``x``  out         the program's exit code (4-byte signed; 128+N after signal N), last
=====  ==========  ==================================================================

A client that goes away hangs the terminal up (SIGHUP to its programs), as closing a terminal
window does. Query parameters: ``user`` (run as that user, default the rocklet's), ``rows``,
``cols``, ``term`` (``TERM``, default ``xterm-256color``), ``command`` (a command line run by
the user's shell with ``-c``; default that shell itself). Errors come before the switch, as JSON
``{"detail": ...}`` with HTTP 400.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import struct
import threading

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

from .errors import BadRequest
from .http_messages import Request, Response
from .pty_shell import exit_code, spawn_on_terminal

__all__ = ["DATA", "EXIT", "RESIZE", "UPGRADE", "encode_frame", "open_pty", "FrameReader"]

#: The ``Upgrade`` token of a terminal request.
UPGRADE = "rock-pty"
#: Frame types.
DATA = b"d"
RESIZE = b"r"
EXIT = b"x"
_HEADER = struct.Struct(">cI")
_MAX_FRAME = 1 << 20
_CHUNK = 65536
# Seconds the end of a terminal waits for its client's thread (which closes the terminal
# itself if it is still running then).
_JOIN = 5.0


def encode_frame(kind: bytes, payload: bytes = b"") -> bytes:
    """One frame: ``kind`` (``DATA``, ``RESIZE``, ``EXIT``) and its payload."""
    return _HEADER.pack(kind, len(payload)) + payload


def resize_payload(rows: int, cols: int) -> bytes:
    """The payload of a ``RESIZE`` frame."""
    return struct.pack(">HH", max(0, min(rows, 65535)), max(0, min(cols, 65535)))


def exit_payload(code: int) -> bytes:
    """The payload of an ``EXIT`` frame."""
    return struct.pack(">i", code)


class FrameReader:
    """Splits bytes fed to it into frames (``feed`` returns the complete ones)."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> list[tuple[bytes, bytes]]:
        """Add ``data``; return the frames now complete, as ``(kind, payload)``."""
        self._buffer += data
        frames = []
        while len(self._buffer) >= _HEADER.size:
            kind, length = _HEADER.unpack_from(self._buffer)
            if length > _MAX_FRAME:
                raise ValueError("frame of %d bytes is too large" % length)
            end = _HEADER.size + length
            if len(self._buffer) < end:
                break
            frames.append((kind, self._buffer[_HEADER.size : end]))
            self._buffer = self._buffer[end:]
        return frames


def _set_size(fd: int, rows: int, cols: int) -> None:
    import fcntl
    import termios

    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def _int(request: Request, name: str, default: int) -> int:
    raw = request.query.get(name, "")
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest("%s: expected a number, got %r" % (name, raw)) from None
    if not 1 <= value <= 65535:
        raise BadRequest("%s: expected 1..65535, got %d" % (name, value))
    return value


class Terminal(Response):
    """A response that switches the connection to frames of a program on a pseudo-terminal."""

    __slots__ = ("pid", "master")

    def __init__(self, pid: int, master: int) -> None:
        super().__init__(b"", status=101, headers={"upgrade": UPGRADE, "connection": "Upgrade"})
        self.pid = pid
        self.master = master

    def splice(self, conn: socket.socket, rfile: Any) -> None:
        """Carry frames between the client and the terminal until the program ends (or the
        client goes away: then the terminal is hung up).

        A thread of its own writes what the client sends into the terminal. The terminal's
        descriptor is closed by whichever of the two threads finishes last, never while the
        other may still use it: a number closed early is soon the next file, connection or
        terminal the rocklet opens, and a late keystroke would land there. Only this thread
        signals the program's process group, and only while the program is not yet reaped: once
        reaped, its number may be another process's.
        """
        master, pid = self.master, self.pid
        os.set_blocking(master, False)  # a write waits in poll, where the end can stop it
        ending = threading.Event()  # set at the end: the client's bytes go nowhere any more
        client_gone = threading.Event()
        holders = [2]  # this thread and the client's: the last one out closes the terminal
        lock = threading.Lock()

        def release() -> None:
            with lock:
                holders[0] -= 1
                last = holders[0] == 0
            if last:
                os.close(master)

        def from_client() -> None:
            reader = FrameReader()
            try:
                while not ending.is_set():
                    data = rfile.read1(_CHUNK)
                    if not data:
                        break
                    for kind, payload in reader.feed(data):
                        if ending.is_set():
                            break
                        if kind == DATA:
                            _write(master, payload, ending)
                        elif kind == RESIZE and len(payload) == 4:
                            rows, cols = struct.unpack(">HH", payload)
                            _set_size(master, rows, cols)
            except (OSError, ValueError):
                pass
            finally:
                client_gone.set()  # the terminal was closed: the loop below hangs it up
                release()

        thread = threading.Thread(target=from_client, daemon=True)
        thread.start()
        status: int | None = None
        try:
            while True:
                if _readable(master, 0.2):
                    data = _read(master)
                    if data is None:
                        continue
                    if data:
                        conn.sendall(encode_frame(DATA, data))
                        continue
                    break  # every holder of the terminal's other end closed it
                if _ended(pid):
                    # The program ended; what it wrote is already readable. Programs it left
                    # in the background may hold the terminal: do not wait for them.
                    while _readable(master, 0):
                        data = _read(master)
                        if not data:
                            break
                        conn.sendall(encode_frame(DATA, data))
                    break
                if client_gone.is_set():
                    break
            # A program that closed the terminal may run on: until it ends or the client goes.
            while not _ended(pid) and not client_gone.wait(0.2):
                pass
            status = _reap(pid, client_gone.is_set())
            conn.sendall(encode_frame(EXIT, exit_payload(exit_code(status))))
        except OSError:
            pass
        finally:
            ending.set()
            if status is None:
                _reap(pid, True)
            try:
                # Both ways: the client's thread, waiting for its next bytes, wakes with none.
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            thread.join(_JOIN)
            release()


def _readable(fd: int, timeout: float) -> bool:
    """Whether the terminal ``fd`` has something to read (or its end) within ``timeout``
    seconds. ``poll``, not ``select``: a rocklet holding more than 1,024 descriptors gives a
    new terminal a number ``select`` refuses."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(int(timeout * 1000)))


def _read(fd: int) -> bytes | None:
    """What the terminal ``fd`` has: ``b""`` at its end, ``None`` when nothing is there now."""
    try:
        return os.read(fd, _CHUNK)
    except BlockingIOError:
        return None
    except OSError:  # EIO: every holder of the terminal's other end closed it
        return b""


def _write(fd: int, payload: bytes, ending: threading.Event) -> None:
    """Write ``payload`` to the terminal ``fd`` (non-blocking), waiting while it is full;
    give up when ``ending`` is set."""
    view = memoryview(payload)
    poller = None
    while view and not ending.is_set():
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            if poller is None:
                poller = select.poll()
                poller.register(fd, select.POLLOUT)
            poller.poll(200)


def _ended(pid: int, block: bool = False) -> bool:
    """Whether ``pid`` has ended (``block``: wait until it has), leaving it unreaped: until it is
    reaped its number, and its process group's, cannot be another process's."""
    flags = os.WEXITED | os.WNOWAIT | (0 if block else os.WNOHANG)
    try:
        return os.waitid(os.P_PID, pid, flags) is not None
    except ChildProcessError:
        return True


def _reap(pid: int, hang_up: bool) -> int:
    """Reap ``pid`` and return its wait status: when it ends; ``hang_up``: SIGHUP to its process
    group first (then SIGKILL). Its group gets SIGHUP before the reaping in any case, for the
    programs it left in the background, as when a terminal closes."""
    for sig in [signal.SIGHUP] * 20 + [signal.SIGKILL] * 20 if hang_up else []:
        if _ended(pid):
            break
        _hang_up(pid, sig)
        threading.Event().wait(0.05)
    _ended(pid, block=True)
    _hang_up(pid, signal.SIGHUP)
    try:
        return os.waitpid(pid, 0)[1]
    except ChildProcessError:
        return 0


def _hang_up(pid: int, sig: int) -> None:
    """``sig`` to the process group of ``pid``, which must not be reaped yet."""
    try:
        os.killpg(pid, sig)
    except OSError:
        pass


def _account(user: str) -> tuple[Any | None, str]:
    """The password entry of ``user`` ('' = the rocklet's own) and the shell to start."""
    import pwd

    entry = None
    if user:
        try:
            entry = pwd.getpwnam(user)
        except KeyError:
            raise BadRequest("user: %r does not exist in this sandbox" % user) from None
    else:
        try:
            entry = pwd.getpwuid(os.getuid())
        except KeyError:
            entry = None
    shell = entry.pw_shell if entry is not None else ""
    if not shell or not os.access(shell, os.X_OK) or shell.endswith(("nologin", "false")):
        shell = next((s for s in ("/bin/bash", "/bin/sh") if os.access(s, os.X_OK)), "")
    if not shell:
        raise BadRequest("this sandbox has no shell (/bin/bash or /bin/sh)")
    return entry, shell


def open_pty(request: Request) -> Terminal:
    """``GET /pty``: start a program on a new pseudo-terminal and switch to frames."""
    if UPGRADE not in request.headers.get("upgrade", "").lower():
        raise BadRequest("a terminal needs the header 'Upgrade: %s'" % UPGRADE)
    rows, cols = _int(request, "rows", 24), _int(request, "cols", 80)
    user = request.query.get("user", "")
    if user == "root" and os.getuid() == 0:
        user = ""
    entry, shell = _account(user)
    command = request.query.get("command", "")
    # The user's shell runs a command line: bash runs a simple command in its own place, so
    # Ctrl-C reaches the program alone (a `sh -c` kept waiting would die of it too).
    argv = [shell, "-c", command] if command else [shell]
    env = dict(os.environ)  # the rocklet's secret left its environment at start
    env["TERM"] = request.query.get("term", "") or "xterm-256color"
    home = "/"
    if entry is not None:
        home = entry.pw_dir or "/"
        env.update(HOME=home, USER=entry.pw_name, LOGNAME=entry.pw_name, SHELL=shell)
    # The window size is set before the program starts: it sees it from its first instruction,
    # and a resize the client sends later always comes after it.
    master, slave = os.openpty()
    _set_size(slave, rows, cols)
    uid = gid = -1
    if entry is not None and user:
        uid, gid = entry.pw_uid, entry.pw_gid
    try:
        pid = spawn_on_terminal(argv, env, slave, home=home, uid=uid, gid=gid)
    except OSError as exc:
        os.close(master)
        raise BadRequest("cannot start %s: %s" % (argv[0], exc)) from None
    finally:
        os.close(slave)
    return Terminal(pid, master)
