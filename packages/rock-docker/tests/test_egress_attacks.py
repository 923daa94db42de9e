"""An egress policy's domains as an attacker would feed them: the allow-list follower takes the
addresses a name resolves to from DNS answers it does not control, so a listed name that answers
with the metadata address (link-local) or an address of the host itself (the bridge's gateway:
the admin's port, the host's other services) must not open it; only a rule naming it does."""

from __future__ import annotations

import socket
import socketserver
import struct
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from rock_core.egress import EgressPolicy, EgressRule
from rock_core.errors import RuntimeFailure
from rock_core.testing.fixtures import bridge_gateway
from rock_docker._firewall import Firewall

pytestmark = [pytest.mark.docker]

PROBE = r"""
import socket, sys
s = socket.socket()
s.settimeout(10)
try:
    s.connect((sys.argv[1], int(sys.argv[2])))
    print("connected")
except ConnectionRefusedError:
    print("refused")
except socket.timeout:
    print("timeout")
except OSError as exc:
    print("error", exc.errno)
"""


class _Dns:
    """Answers every ``A`` query with :attr:`address` (UDP, 127.0.0.1, a free port)."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                data, peer = self.sock.recvfrom(512)
            except OSError:
                continue
            offset = 12
            while data[offset]:
                offset += data[offset] + 1
            question = data[12 : offset + 5]
            answer = b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 1, 4) + socket.inet_aton(self.address)
            head = struct.pack(">HHHHHH", struct.unpack(">H", data[:2])[0], 0x8180, 1, 1, 0, 0)
            self.sock.sendto(head + question + answer, peer)

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self.sock.close()


@pytest.fixture
def container(docker_client: Any, run_labels: Any) -> Iterator[Any]:
    found = docker_client.containers.run(
        "python:3.11",
        ["sleep", "300"],
        detach=True,
        labels=run_labels,
        network="bridge",
        cap_drop=["NET_RAW"],  # as rock's sandboxes (a policy refuses a container with it)
    )
    try:
        yield found
    finally:
        found.remove(force=True)


def _rules_of(unit_id: str) -> list[str]:
    saved = subprocess.run(
        ["iptables-save", "-t", "filter"], capture_output=True, text=True, check=True
    ).stdout
    return [line for line in saved.splitlines() if unit_id[:16] in line]


def _probe(container: Any, host: str, port: int) -> str:
    done = container.exec_run(["python3", "-c", PROBE, host, str(port)])
    return str(done.output.decode().strip())


def test_a_listed_domain_answering_the_metadata_address_does_not_open_it(
    docker_client: Any, container: Any
):
    dns = _Dns("169.254.169.254")
    firewall = Firewall((f"127.0.0.1:{dns.port}",), 30.0)
    try:
        firewall.apply(docker_client.api, container.id, EgressPolicy.deny_all(domains=["x.test"]))
        assert not [r for r in _rules_of(container.id) if "169.254.169.254/32 -j RETURN" in r]
        assert _probe(container, "169.254.169.254", 80) == "refused"
        # A rule naming it still opens it (the operator's choice, not a DNS answer's).
        named = EgressPolicy.deny_all(
            [EgressRule.allow("169.254.169.254", [80], "tcp")], domains=["x.test"]
        )
        firewall.apply(docker_client.api, container.id, named)
        assert [r for r in _rules_of(container.id) if "169.254.169.254/32 -p tcp" in r]
    finally:
        firewall.drop(container.id)
        dns.close()
    assert _rules_of(container.id) == []


class _Hello(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        self.request.sendall(b"hello\n")


def test_a_listed_domain_answering_the_hosts_own_address_does_not_open_the_host(
    docker_client: Any, container: Any
):
    gateway = bridge_gateway(docker_client)
    server = socketserver.ThreadingTCPServer((gateway, 0), _Hello)
    threading.Thread(
        target=server.serve_forever,
        args=(0.05,),  # shutdown() waits one poll: a twentieth of a second, not half
        daemon=True,
    ).start()
    port = int(server.server_address[1])
    dns = _Dns(gateway)
    firewall = Firewall((f"127.0.0.1:{dns.port}",), 30.0)
    try:
        firewall.apply(docker_client.api, container.id, EgressPolicy.deny_all(domains=["x.test"]))
        assert _probe(container, gateway, port) == "refused"
        # A rule naming the host's address opens it.
        named = EgressPolicy.deny_all(
            [EgressRule.allow(gateway, [port], "tcp")], domains=["x.test"]
        )
        firewall.apply(docker_client.api, container.id, named)
        assert _probe(container, gateway, port) == "connected"
    finally:
        firewall.drop(container.id)
        dns.close()
        server.shutdown()
        server.server_close()


def test_a_policy_on_a_container_with_an_ipv6_address_is_refused_not_left_open(
    docker_client: Any, run_labels: Any
):
    # The rules are iptables' (IPv4): on a bridge with IPv6 (an operator's daemon.json "ipv6":
    # true), the container's IPv6 traffic would pass untouched, so the policy cannot hold.
    network = docker_client.networks.create(
        f"rock-test-v6-{threading.get_native_id()}",
        enable_ipv6=True,
        ipam={"Config": [{"Subnet": "fd00:5e7:2::/64"}]},
        labels=run_labels,
    )
    found = docker_client.containers.run(
        "python:3.11",
        ["sleep", "300"],
        detach=True,
        labels=run_labels,
        network=network.name,
        cap_drop=["NET_RAW"],
    )
    firewall = Firewall((), 30.0)
    try:
        with pytest.raises(RuntimeFailure, match="IPv6"):
            firewall.apply(docker_client.api, found.id, EgressPolicy.deny_all())
        assert _rules_of(found.id) == []
    finally:
        found.remove(force=True)
        network.remove()


@pytest.mark.parametrize("capability", ["NET_RAW", "NET_ADMIN"])
def test_a_policy_on_a_container_that_may_forge_its_source_address_is_refused(
    docker_client: Any, run_labels: Any, capability: str
):
    # The rules match the container's address: with raw sockets (NET_RAW) or its own interfaces
    # (NET_ADMIN) it sends from another address of its bridge, which no rule matches.
    found = docker_client.containers.run(
        "python:3.11",
        ["sleep", "300"],
        detach=True,
        labels=run_labels,
        network="bridge",
        cap_add=[capability],
    )
    firewall = Firewall((), 30.0)
    try:
        with pytest.raises(RuntimeFailure, match=capability):
            firewall.apply(docker_client.api, found.id, EgressPolicy.deny_all())
        assert _rules_of(found.id) == []
    finally:
        found.remove(force=True)
