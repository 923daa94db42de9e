"""The IPv4 addresses domain names resolve to now, for egress allow-lists.

With resolvers named (the docker runtime's ``egress_dns``: ``host`` or ``host:port``), each name
is asked of them over UDP (an ``A`` query; the answer's ``A`` records, through its CNAMEs);
without, of the host's own resolver (``getaddrinfo``). A name that does not resolve adds no
address (and is logged): its sandboxes cannot reach it until it does.
"""

from __future__ import annotations

import logging
import os
import socket
import struct
from collections.abc import Iterable

__all__ = ["query_a", "resolve_all"]

log = logging.getLogger("rock.docker")

_TIMEOUT = 2.0


def _server(text: str) -> tuple[str, int]:
    host, _, port = text.partition(":") if text.count(":") == 1 else (text, "", "")
    return host, int(port or 53)


def _skip_name(data: bytes, offset: int) -> int:
    while True:
        length = data[offset]
        if length & 0xC0 == 0xC0:
            return offset + 2
        if length == 0:
            return offset + 1
        offset += length + 1


def query_a(name: str, server: str, timeout: float = _TIMEOUT) -> list[str]:
    """The ``A`` records ``server`` answers for ``name`` (empty: none, or no answer in time)."""
    ident = int.from_bytes(os.urandom(2), "big")
    question = b"".join(bytes([len(p)]) + p.encode("ascii") for p in name.split(".")) + b"\0"
    packet = struct.pack(">HHHHHH", ident, 0x0100, 1, 0, 0, 0) + question + b"\0\1\0\1"
    host, port = _server(server)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(timeout)
        sock.sendto(packet, (host, port))
        try:
            while True:
                data, _ = sock.recvfrom(4096)
                if len(data) >= 12 and struct.unpack(">H", data[:2])[0] == ident:
                    break
        except OSError:
            return []
    _id, flags, qdcount, ancount, _ns, _ar = struct.unpack(">HHHHHH", data[:12])
    if flags & 0x000F:  # an error code (NXDOMAIN, ...)
        return []
    offset = 12
    for _ in range(qdcount):
        offset = _skip_name(data, offset) + 4
    found = []
    for _ in range(ancount):
        offset = _skip_name(data, offset)
        rtype, _rclass, _ttl, length = struct.unpack(">HHIH", data[offset : offset + 10])
        offset += 10
        if rtype == 1 and length == 4:
            found.append(socket.inet_ntoa(data[offset : offset + 4]))
        offset += length
    return found


def resolve_all(names: Iterable[str], servers: Iterable[str]) -> set[str]:
    """Every IPv4 address ``names`` resolve to now, asked of ``servers`` (none: the host's)."""
    servers = tuple(servers)
    addresses: set[str] = set()
    for name in names:
        found: list[str] = []
        try:
            if servers:
                for server in servers:
                    found = query_a(name, server)
                    if found:
                        break
            else:
                infos = socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM)
                found = [str(info[4][0]) for info in infos]
        except (OSError, UnicodeError, IndexError, struct.error) as exc:
            log.warning("could not resolve %s for an egress allow-list: %s", name, exc)
        if not found:
            log.warning("%s resolves to no IPv4 address: sandboxes allowed it reach nothing", name)
        addresses.update(found)
    return addresses
