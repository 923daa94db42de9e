"""``GET /tunnel``: a raw TCP connection to a port inside the sandbox, through the rocklet."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from rock_core.rocklet.server import TOKEN_HEADER
from rock_core.testing import upper_echo_server

from .conftest import RockletProcess


@pytest.fixture
def echo_port() -> Iterator[int]:
    """A service on 127.0.0.1 that upper-cases what it gets (the test's host plays the sandbox)."""
    with upper_echo_server() as port:
        yield port


def _tunnel(
    rocklet: RockletProcess, port: object, *, token: str | None = "ok", upgrade: bool = True
) -> tuple[socket.socket, bytes]:
    sock = socket.create_connection(("127.0.0.1", rocklet.port), timeout=10)
    headers = f"{TOKEN_HEADER}: {rocklet.token if token == 'ok' else token}\r\n" if token else ""
    if upgrade:
        headers += "Connection: Upgrade\r\nUpgrade: rock-tunnel\r\n"
    sock.sendall(f"GET /tunnel?port={port} HTTP/1.1\r\nHost: x\r\n{headers}\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(4096)
        if not chunk:
            break
        head += chunk
    return sock, head


def test_a_tunnel_carries_bytes_both_ways_until_closed(
    rocklet: RockletProcess, echo_port: int
) -> None:
    sock, head = _tunnel(rocklet, echo_port)
    with sock:
        assert head.startswith(b"HTTP/1.1 101 "), head
        assert b"upgrade: rock-tunnel" in head.lower()
        sock.sendall(b"hello")
        assert sock.recv(100) == b"HELLO"
        payload = bytes(range(256)) * 4096  # 1 MiB, more than any buffer
        received = bytearray()
        sender = threading.Thread(
            target=lambda: (sock.sendall(payload.lower()), sock.shutdown(socket.SHUT_WR))
        )
        sender.start()
        while data := sock.recv(65536):
            received += data
        sender.join()
        assert bytes(received) == payload.lower().upper()


def test_nothing_listening_is_a_502_naming_the_port(rocklet: RockletProcess) -> None:
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()
    sock, head = _tunnel(rocklet, port)
    sock.close()
    assert head.startswith(b"HTTP/1.1 502 "), head
    assert f"nothing listens on port {port} in the sandbox".encode() in head


@pytest.mark.parametrize("port", ["0", "65536", "http", ""])
def test_a_bad_port_is_a_400(rocklet: RockletProcess, port: str) -> None:
    sock, head = _tunnel(rocklet, port)
    sock.close()
    assert head.startswith(b"HTTP/1.1 400 "), head
    assert b"port: expected a port number 1..65535" in head


def test_a_tunnel_needs_the_secret_and_the_upgrade_header(
    rocklet: RockletProcess, echo_port: int
) -> None:
    sock, head = _tunnel(rocklet, echo_port, token="wrong")
    sock.close()
    assert head.startswith(b"HTTP/1.1 401 "), head
    sock, head = _tunnel(rocklet, echo_port, upgrade=False)
    sock.close()
    assert head.startswith(b"HTTP/1.1 400 ") and b"Upgrade: rock-tunnel" in head, head
