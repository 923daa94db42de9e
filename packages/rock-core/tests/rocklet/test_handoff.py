"""The listener handoff, against a real rocklet process: the engine makes the rocklet's
listening socket (:class:`rock_core.rocklet_handoff.HandoffDesk`) and the rocklet, started with
``--listen-fd-from``, takes it over a one-shot socket and serves there.
"""

from __future__ import annotations

import signal
import socket
import subprocess
from pathlib import Path

import httpx
import pytest

from rock_core.rocklet.handoff import receive_listener
from rock_core.rocklet_handoff import HandoffDesk

from .conftest import system_python


@pytest.fixture
def desk():
    made = HandoffDesk()
    yield made
    made.close()


def _rocklet(pyz: Path, handoff: Path, tmp: Path) -> tuple[subprocess.Popen[bytes], Path]:
    stderr = tmp / "rocklet.stderr"
    with open(stderr, "wb") as err:
        proc = subprocess.Popen(
            [system_python(), "-I", str(pyz), "--listen-fd-from", str(handoff), "--no-auth"],
            stderr=err,
            cwd=str(tmp),
        )
    return proc, stderr


def _stop(proc: subprocess.Popen[bytes], stderr: Path) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    assert proc.wait(20) == 0, stderr.read_text()


def _refused(path: Path) -> None:
    """Nothing listens at ``path`` any more (its socket file may stay)."""
    with (
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe,
        pytest.raises(ConnectionRefusedError),
    ):
        probe.connect(str(path))


def test_the_rocklet_serves_on_the_socket_the_engine_made(desk, pyz, tmp_path):
    """Connections to the engine's path reach the rocklet, even those made before it took the
    socket (they wait in the backlog); the handoff socket is gone once used, and the engine
    holds no copy of the listener."""
    private, shared = tmp_path / "private", tmp_path / "shared"
    private.mkdir(mode=0o700)
    shared.mkdir()
    listen_path, handoff_path = private / "rocklet.sock", shared / "handoff.sock"
    desk.offer("unit-1", listen_path, handoff_path)
    assert handoff_path.exists() and (handoff_path.stat().st_mode & 0o777) == 0o666
    early = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    early.connect(str(listen_path))  # before the rocklet runs at all: queued
    early.sendall(b"GET /is_alive HTTP/1.1\r\nHost: r\r\nConnection: close\r\n\r\n")
    proc, stderr = _rocklet(pyz, handoff_path, tmp_path)
    try:
        early.settimeout(30)
        assert b'"is_alive": true' in early.recv(65536).replace(
            b'"is_alive":true', b'"is_alive": true'
        )
        early.close()
        with httpx.Client(
            transport=httpx.HTTPTransport(uds=str(listen_path)), base_url="http://rocklet"
        ) as client:
            answer = client.post(
                "/execute", json={"command": ["echo", "handed over"], "shell": False}
            ).json()
            assert answer["stdout"].strip() == "handed over"
            # A command run by the rocklet does not hold its listening socket.
            fds = client.post(
                "/execute", json={"command": "ls -l /proc/self/fd", "shell": True}
            ).json()["stdout"]
            assert "socket:" not in fds, fds
        assert not handoff_path.exists()
        assert len(desk) == 0
    finally:
        _stop(proc, stderr)
    _refused(listen_path)  # the rocklet gone, nothing holds the listener: the engine kept no copy


def test_a_second_offer_replaces_the_first_and_the_old_socket_file(desk, tmp_path):
    """Each start of a unit makes a fresh socket at the same paths (a restarted unit)."""
    listen_path, handoff_path = tmp_path / "rocklet.sock", tmp_path / "handoff.sock"
    desk.offer("unit-1", listen_path, handoff_path)
    desk.offer("unit-1", listen_path, handoff_path)  # the files of the first are replaced
    assert len(desk) == 1
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.connect(str(listen_path))  # the second listens there
    desk.cancel("unit-1")
    _refused(listen_path)  # and the first is closed too


def test_an_offer_nobody_takes_is_cancelled_without_a_trace(desk, tmp_path):
    """The unit never ran its rocklet: cancelling ends the offer, closes both sockets and
    removes the handoff socket; a rocklet connecting afterwards is refused and exits."""
    listen_path, handoff_path = tmp_path / "rocklet.sock", tmp_path / "handoff.sock"
    desk.offer("unit-1", listen_path, handoff_path)
    assert desk.cancel("unit-1") is True
    assert desk.cancel("unit-1") is False
    assert not handoff_path.exists() and len(desk) == 0
    _refused(listen_path)


def test_a_rocklet_whose_handoff_was_cancelled_exits_with_a_clear_message(desk, pyz, tmp_path):
    handoff_path = tmp_path / "handoff.sock"
    desk.offer("unit-1", tmp_path / "rocklet.sock", handoff_path)
    desk.cancel("unit-1")
    proc, stderr = _rocklet(pyz, handoff_path, tmp_path)
    assert proc.wait(30) == 1
    assert (
        f"rocklet: cannot listen on the socket handed over on {handoff_path}" in stderr.read_text()
    )


def test_a_closed_desk_ends_every_offer_and_refuses_new_ones(tmp_path):
    desk = HandoffDesk()
    desk.offer("a", tmp_path / "a.sock", tmp_path / "a-handoff.sock")
    desk.offer("b", tmp_path / "b.sock", tmp_path / "b-handoff.sock")
    desk.close()
    assert (
        len(desk) == 0
        and not (tmp_path / "a-handoff.sock").exists()
        and not (tmp_path / "b-handoff.sock").exists()
    )
    with pytest.raises(RuntimeError, match="closed"):
        desk.offer("c", tmp_path / "c.sock", tmp_path / "c-handoff.sock")
    desk.close()  # idempotent


def test_an_offer_made_right_after_a_handoff_is_not_undone_by_it(desk, tmp_path):
    """A unit stopped and started again at once: the new handoff socket must survive the end of
    the old offer (which once unlinked the path after the rocklet already had its socket)."""
    listen_path, handoff_path = tmp_path / "rocklet.sock", tmp_path / "handoff.sock"
    for _ in range(100):
        desk.offer("unit-1", listen_path, handoff_path)
        receive_listener(str(handoff_path)).close()  # raises if the new handoff socket is gone
        # Gone before the rocklet has its socket, so nothing of the old offer is left to undo.
        assert not handoff_path.exists()
