"""``rock_core.ports.listen_port``: a port a server can listen on, never one the kernel may give to
an outgoing connection in the meantime."""

from __future__ import annotations

import random
import socket
from pathlib import Path

from rock_core.ports import listen_port


def _ephemeral_low() -> int:
    return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])


def test_the_port_is_below_the_kernels_ephemeral_range_and_a_server_listens_on_it() -> None:
    for _ in range(20):
        port = listen_port()
        assert 10_000 <= port < _ephemeral_low()
        with socket.socket() as server:
            server.bind(("127.0.0.1", port))
            server.listen()
            with socket.create_connection(("127.0.0.1", port), timeout=5):
                pass


def test_a_port_something_listens_on_is_never_handed_out() -> None:
    top = _ephemeral_low() - 1
    taken = random.Random(7).randint(10_000, top)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", taken))
        holder.listen()
        port = listen_port(rng=random.Random(7))  # its first try is the port held
    assert port != taken
    assert 10_000 <= port <= top


def test_a_port_is_found_for_an_ipv6_host_too() -> None:
    port = listen_port("::1")
    with socket.socket(socket.AF_INET6) as server:
        server.bind(("::1", port))


def test_a_port_handed_out_lately_is_not_handed_out_again_before_its_server_binds() -> None:
    # Two servers started together are each told a port before either binds: the same draw must
    # not give both the same one (two cluster admins once shared a port, and one failed to bind).
    first = listen_port(rng=random.Random(11))
    second = listen_port(rng=random.Random(11))  # the same first try: the port just handed out
    assert first != second
    assert 10_000 <= second < _ephemeral_low()
