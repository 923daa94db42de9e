"""``GET /pty``: a program on a pseudo-terminal, carried as frames over the upgraded connection
(a real rocklet process, from source and from the pyz; the test's host plays the sandbox)."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import pytest

from rock_core.rocklet.server import TOKEN_HEADER
from rock_core.rocklet.terminal import DATA, EXIT, RESIZE, FrameReader, encode_frame, resize_payload
from rock_core.testing import eventually

from .conftest import RockletProcess


class Reachable(Protocol):
    """Where a rocklet listens on 127.0.0.1, and its secret."""

    port: int
    token: str


class Terminal:
    """The client side of ``GET /pty`` for tests: frames over a socket."""

    def __init__(self, rocklet: Reachable, query: str, token: str | None = "ok") -> None:
        self.sock = socket.create_connection(("127.0.0.1", rocklet.port), timeout=20)
        auth = f"{TOKEN_HEADER}: {rocklet.token}\r\n" if token == "ok" else ""
        self.sock.sendall(
            f"GET /pty?{query} HTTP/1.1\r\nHost: x\r\n{auth}Connection: Upgrade\r\nUpgrade: rock-pty\r\n\r\n".encode()
        )
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                break
            head += chunk
        self.head, _, rest = head.partition(b"\r\n\r\n")
        self.reader = FrameReader()
        self.output = b""
        self.exit_code: int | None = None
        if self.head.startswith(b"HTTP/1.1 101 "):
            self._take(rest)

    def _take(self, data: bytes) -> None:
        for kind, payload in self.reader.feed(data):
            if kind == DATA:
                self.output += payload
            elif kind == EXIT:
                self.exit_code = int.from_bytes(payload, "big", signed=True)

    def send(self, data: bytes) -> None:
        self.sock.sendall(encode_frame(DATA, data))

    def resize(self, rows: int, cols: int) -> None:
        self.sock.sendall(encode_frame(RESIZE, resize_payload(rows, cols)))

    def expect(self, text: bytes, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.output:
            assert self.exit_code is None, (
                f"the program ended ({self.exit_code}) before {text!r}: {self.output[-500:]!r}"
            )
            assert time.monotonic() < deadline, f"no {text!r} in {self.output[-500:]!r}"
            self.sock.settimeout(max(deadline - time.monotonic(), 0.01))
            chunk = self.sock.recv(65536)
            assert chunk, f"connection closed before {text!r}: {self.output[-500:]!r}"
            self._take(chunk)

    def wait_exit(self, timeout: float = 20.0) -> int:
        deadline = time.monotonic() + timeout
        while self.exit_code is None:
            assert time.monotonic() < deadline, "the program did not end"
            self.sock.settimeout(max(deadline - time.monotonic(), 0.01))
            chunk = self.sock.recv(65536)
            assert chunk, "connection closed without an exit frame"
            self._take(chunk)
        return self.exit_code


def test_python_runs_interactively_with_resize_ctrl_c_and_exit_code(
    rocklet: RockletProcess, plain_python: str
) -> None:
    term = Terminal(rocklet, f"rows=30&cols=90&command={plain_python}%20-q")
    assert term.head.startswith(b"HTTP/1.1 101 "), term.head
    term.expect(b">>> ")
    term.send(b"import os, time; print('size', tuple(os.get_terminal_size()))\r")
    term.expect(b"size (90, 30)")
    term.resize(40, 120)
    term.send(b"print('size', tuple(os.get_terminal_size()))\r")
    term.expect(b"size (120, 40)")
    # Short sleeps in a loop: a SIGINT that lands between the print and a long sleep's system
    # call only sets Python's flag, which the sleep would not look at for its whole 60 s (a
    # race of CPython's, seen under load); the loop looks at the flag between its sleeps.
    term.send(b"print('in ' + 'sleep'); [time.sleep(0.05) for _ in range(1200)]\r")
    term.expect(
        b"in sleep"
    )  # the program's own output (the echoed line reads 'in ' + 'sleep'): it runs
    term.send(b"\x03")  # Ctrl-C: the terminal's line discipline interrupts the foreground program
    term.expect(b"KeyboardInterrupt")
    term.send(b"raise SystemExit(7)\r")
    assert term.wait_exit() == 7
    term.sock.close()


def test_a_signal_death_is_128_plus_the_signal(rocklet: RockletProcess) -> None:
    term = Terminal(rocklet, "command=kill%20-TERM%20%24%24")
    assert term.wait_exit() == 128 + 15


def test_refusals_come_before_the_switch(rocklet: RockletProcess) -> None:
    assert b" 400 " in Terminal(rocklet, "user=no-such-user-here").head.split(b"\r\n")[0]
    assert b" 400 " in Terminal(rocklet, "rows=0").head.split(b"\r\n")[0]
    assert b" 401 " in Terminal(rocklet, "", token=None).head.split(b"\r\n")[0]


def test_a_client_that_goes_away_hangs_the_terminal_up(
    rocklet: RockletProcess, tmp_path: pytest.TempPathFactory
) -> None:
    marker = f"{tmp_path}/hup"
    term = Terminal(
        rocklet,
        f"command=trap%20%27touch%20{marker}%3B%20exit%27%20HUP%3B%20echo%20ready%3B%20sleep%20600%20%26%20wait",
    )
    term.expect(b"ready")
    term.sock.close()
    eventually(
        lambda: os.path.exists(marker), what="the program's SIGHUP (its marker file)", timeout=20
    )


def test_a_rocklet_started_with_sighup_ignored_still_hangs_the_terminal_up(
    tmp_path: Path,
) -> None:
    """Started under ``nohup`` (SIGHUP ignored, which a program inherits across exec), the
    rocklet still gives its terminal's program the default actions: a client that goes away
    hangs it up. Before, the program inherited the ignored SIGHUP and ran on."""
    ignore_hup = 'trap \'\' HUP; exec "$0" "$@"'
    argv = ["sh", "-c", ignore_hup, sys.executable, "-m", "rock_core.rocklet"]
    rocklet = RockletProcess(argv, tmp_path)
    try:
        marker = f"{tmp_path}/hup"
        term = Terminal(
            rocklet,
            f"command=trap%20%27touch%20{marker}%3B%20exit%27%20HUP%3B%20echo%20ready%3B%20sleep%20600%20%26%20wait",
        )
        term.expect(b"ready")
        term.sock.close()
        eventually(
            lambda: os.path.exists(marker),
            what="the program's SIGHUP (its marker file)",
            timeout=20,
        )
    finally:
        rocklet.stop()


def test_a_terminal_opened_while_the_rocklet_warms_up_starts_its_program(
    pyz: Path, tmp_path: Path
) -> None:
    """The rocklet has threads (its warm-up imports the endpoints after the first answer): a
    program on a terminal must start even when the terminal is opened in the middle of those
    imports. A child forked from the threaded rocklet that ran Python before its exec could
    wait forever on an import lock another thread held at the fork (seen in a sandbox's first
    shell, about one start in three)."""
    from .conftest import start_rocklet

    for attempt in range(12):
        (tmp_path / str(attempt)).mkdir()
        rocklet = start_rocklet("pyz", pyz, tmp_path / str(attempt))
        try:
            assert rocklet.client.get("/is_alive").status_code == 200  # the warm-up starts
            terminal = Terminal(rocklet, "command=echo+opened-%24((6*7))")
            terminal.expect(b"opened-42", timeout=10)
            assert terminal.wait_exit() == 0
            terminal.sock.close()
        finally:
            rocklet.stop()


@pytest.mark.skipif(os.getuid() != 0, reason="switching to another user needs root")
def test_a_terminal_runs_as_the_user_asked_for_in_its_home(rocklet: RockletProcess) -> None:
    import pwd

    nobody = pwd.getpwnam("nobody")
    terminal = Terminal(
        rocklet, "user=nobody&command=id+-u;id+-g;pwd;:+</dev/tty+%26%26+echo+ctty-ok"
    )
    assert terminal.wait_exit() == 0
    lines = terminal.output.decode().split()
    home = nobody.pw_dir if os.path.isdir(nobody.pw_dir) else "/"
    assert lines[:3] == [str(nobody.pw_uid), str(nobody.pw_gid), home]
    assert lines[3] == "ctty-ok"  # /dev/tty opens: the terminal is its controlling terminal


class InProcessRocklet:
    """A rocklet server in the test's own process (its route table, on 127.0.0.1): the test
    sees its descriptors, threads and system calls."""

    def __init__(self, state: Path) -> None:
        from rock_core.rocklet.api import Rocklet, build_router
        from rock_core.rocklet.server import RockletServer

        self.token = "in-process-secret"
        self.server = RockletServer(
            build_router(Rocklet(str(state))), "127.0.0.1", 0, token=self.token
        )
        self.port = self.server.address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()


@pytest.fixture
def in_process(tmp_path: Path) -> Iterator[InProcessRocklet]:
    rocklet = InProcessRocklet(tmp_path / "state")
    yield rocklet
    rocklet.server.shutdown()
    rocklet.thread.join(10)


def _terminals() -> set[int]:
    """This process's descriptors on a terminal's master side (``/dev/ptmx``)."""
    found = set()
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/self/fd/{name}") == "/dev/ptmx":
                found.add(int(name))
    return found


def _end_of_a_terminal(rocklet: InProcessRocklet) -> tuple[Terminal, int, list[threading.Thread]]:
    """Open a terminal running ``cat``, end it (Ctrl-D), read its exit frame and the end of the
    connection; the terminal, its master's descriptor number and the server's threads then."""
    threads = set(threading.enumerate())
    before = _terminals()
    term = Terminal(rocklet, "command=cat")
    assert term.head.startswith(b"HTTP/1.1 101 "), term.head
    masters = [fd for fd in _terminals() if fd not in before]
    assert len(masters) == 1, masters
    term.send(b"\x04")  # Ctrl-D at the start of a line: cat reads the end of its input
    assert term.wait_exit() == 0
    while term.sock.recv(65536):
        pass  # the rocklet is done with the connection
    return term, masters[0], [t for t in threading.enumerate() if t not in threads]


def _the_connection_ends(term: Terminal, threads: list[threading.Thread]) -> None:
    term.sock.close()
    eventually(
        lambda: not any(thread.is_alive() for thread in threads),
        what="the connection's threads to end",
    )


def test_keystrokes_sent_after_the_end_never_reach_what_reuses_the_terminals_number(
    in_process: InProcessRocklet, tmp_path: Path
) -> None:
    """The client keeps typing after the exit frame. Before, the end closed the terminal while
    the thread carrying the client's frames still waited for more: the terminal's descriptor
    number was free for the next file or connection the rocklet opened (here: the test's file,
    as the rocklet's process is the test's), and the late keystrokes were written into it."""
    term, master, threads = _end_of_a_terminal(in_process)
    landing = tmp_path / "landing"
    fds = [os.open(landing, os.O_RDWR | os.O_CREAT)]
    while fds[-1] < master:  # the lowest free numbers: the terminal's, if it was let go
        fds.append(os.dup(fds[0]))
    try:
        with contextlib.suppress(OSError):  # the rocklet may have closed the connection
            term.send(b"echo typed-after-the-end\r")
            term.resize(50, 100)
        _the_connection_ends(term, threads)
    finally:
        for fd in fds:
            os.close(fd)
    assert landing.read_bytes() == b""


@pytest.mark.parametrize("end", ["the program exits", "the client goes away"])
def test_the_programs_group_is_signalled_only_before_it_is_reaped(
    in_process: InProcessRocklet, monkeypatch: pytest.MonkeyPatch, end: str
) -> None:
    """Once reaped, a program's number may be a new process's (and its group's): a hang-up sent
    then could reach an unrelated program. Before, the end of a terminal signalled the group
    after reaping it (and the client's thread, when the client went away, at any time)."""
    calls: list[tuple[str, int]] = []
    real_waitpid, real_killpg = os.waitpid, os.killpg

    def waitpid(pid: int, options: int) -> tuple[int, int]:
        done, status = real_waitpid(pid, options)
        if done:
            calls.append(("reaped", done))
        return done, status

    def killpg(pgid: int, sig: int) -> None:
        calls.append(("signalled", pgid))
        real_killpg(pgid, sig)

    monkeypatch.setattr(os, "waitpid", waitpid)
    monkeypatch.setattr(os, "killpg", killpg)
    threads = set(threading.enumerate())
    if end == "the program exits":
        term, _, _ = _end_of_a_terminal(in_process)
    else:
        term = Terminal(in_process, "command=echo+ready;+sleep+600")
        term.expect(b"ready")
    _the_connection_ends(term, [t for t in threading.enumerate() if t not in threads])
    reaped = [pid for what, pid in calls if what == "reaped"]
    assert len(reaped) == 1, calls
    after = calls[calls.index(("reaped", reaped[0])) :]
    assert ("signalled", reaped[0]) not in after, calls


def test_a_rocklet_whose_descriptors_are_past_1024_serves_a_terminal(tmp_path: Path) -> None:
    """A rocklet holding more than 1,024 descriptors (a sandbox's many files and connections)
    gets numbers ``select`` refuses for what it opens next: its listener and wake-up socket
    (the accept loop) and a new terminal. It still accepts, and the terminal carries its
    program's output and exit code."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1200:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(1200, hard), hard))
    held: list[int] = []
    rocklet = None
    try:
        while not held or held[-1] <= 1030:
            held.append(os.open("/dev/null", os.O_RDONLY))
        rocklet = InProcessRocklet(tmp_path / "state")  # its own numbers are past 1,030
        assert _fds_opened_after(held[-1]), "the rocklet's listener is numbered past 1,030"
        term = Terminal(rocklet, "command=echo+past-select")
        assert term.head.startswith(b"HTTP/1.1 101 "), term.head
        term.expect(b"past-select")
        assert term.wait_exit() == 0
        term.sock.close()
    finally:
        if rocklet is not None:
            rocklet.server.shutdown()
            rocklet.thread.join(10)
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _fds_opened_after(last: int) -> set[int]:
    """This process's descriptors numbered above ``last``."""
    return {int(name) for name in os.listdir("/proc/self/fd") if int(name) > last}
