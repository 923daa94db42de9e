"""Egress policies on the host's packet filter: two iptables chains per sandbox.

A container's packets to another host cross the host's ``FORWARD`` chain, which Docker sends
through ``DOCKER-USER`` first; its packets to the host itself (the bridge's gateway, any
address of the host) cross ``INPUT``. For a unit with a policy this module makes
``ROCK-EG-<id>`` (jumped to from ``DOCKER-USER``) and ``ROCK-EGI-<id>`` (from ``INPUT``), both
keyed by the container's address on its bridge and the bridge's interface, tagged with the
comment ``rock-egress:<id>`` (``<id>``: the first 16 digits of the container's id):

- replies of connections already set up pass (``ESTABLISHED,RELATED``), so a policy tightened
  mid-connection ends no connection, and no reply of a connection made to the sandbox is cut;
- the policy's rules in order (allow: ``RETURN`` to Docker's own rules; deny: ``REJECT``), then
  the current addresses of its domains and, when it has domains, DNS to the resolvers;
- then link-local ``169.254.0.0/16`` refused, then the default; in ``ROCK-EGI`` everything
  left is refused (the host's own addresses are denied unless a rule names them).

A domain's addresses come from DNS answers rock does not control: they open neither link-local
addresses nor the host (``ROCK-EGI`` takes no domain's addresses); only a rule does.

``REJECT`` answers at once (a TCP reset, else ICMP port-unreachable): a refused connection
fails in a millisecond, not after a timeout. Each change is one ``iptables-restore --noflush``
(atomic: a chain declared there is flushed and refilled in the same commit) of that unit's own
chains and jumps only, so its cost does not grow with the number of sandboxes: the host's rules
are read once per process (and at each sync), then known by this process's own writes; a
change that meets the host otherwise (another process changed that unit's rules) reads it
again and is made once more. The rules live in
the host's kernel: nothing in the sandbox can lift them (it has no ``NET_ADMIN``; its own
``iptables`` acts on its own network namespace). Every method blocks (the runtime calls them
in worker threads).
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping

import docker
import docker.errors

from rock_core.egress import ALWAYS_REFUSED, EgressPolicy, EgressRule
from rock_core.errors import RuntimeFailure
from rock_docker._resolve import resolve_all

__all__ = ["Firewall", "chain_names"]

log = logging.getLogger("rock.docker")

_TAG = "rock-egress:"
_JUMP = re.compile(r"^-A (DOCKER-USER|INPUT) (.*--comment \"?rock-egress:([0-9a-f]+)\"?.*)$")
_CHAIN = re.compile(r"^:(ROCK-EGI?-([0-9a-f]+)) ")
_SOURCE = re.compile(r"-s (\d+\.\d+\.\d+\.\d+)(?:/32)?\b")
_REFUSED = re.compile(r"^\[(\d+):\d+\] -A ROCK-EGI?-([0-9a-f]+) .*-j REJECT")
_REFUSED_LISTED = re.compile(r"^-A ROCK-EGI?-[0-9a-f]+ -c (\d+) \d+ .*-j REJECT")


def chain_names(unit_id: str) -> tuple[str, str]:
    """The chains of unit ``unit_id``: ``(forward, input)``."""
    key = unit_id[:16]
    return f"ROCK-EG-{key}", f"ROCK-EGI-{key}"


def _reject(chain: str, match: str, kind: str = "both") -> list[str]:
    """Lines refusing what ``match`` matches at once: ``both`` (a TCP reset for TCP, ICMP
    port-unreachable for the rest), ``tcp`` (``match`` is TCP only) or ``other``."""
    tcp = "-j REJECT --reject-with tcp-reset"
    icmp = "-j REJECT --reject-with icmp-port-unreachable"
    if kind == "both":
        lines = [f"-A {chain} {match} -p tcp {tcp}", f"-A {chain} {match} {icmp}"]
    else:
        lines = [f"-A {chain} {match} {tcp if kind == 'tcp' else icmp}"]
    return [" ".join(line.split()) for line in lines]


def _rule_lines(chain: str, rule: EgressRule) -> list[str]:
    protocols = [rule.protocol] if rule.protocol != "any" or not rule.ports else ["tcp", "udp"]
    lines: list[str] = []
    for protocol in protocols:
        where = f"-d {rule.cidr}"
        if protocol != "any":
            where += f" -p {protocol}"
        if rule.ports:
            where += " -m multiport --dports " + ",".join(p.replace("-", ":") for p in rule.ports)
        if rule.action == "allow":
            lines.append(f"-A {chain} {where} -j RETURN")
        else:
            kind = {"any": "both", "tcp": "tcp"}.get(protocol, "other")
            lines.extend(_reject(chain, where, kind))
    return lines


def _followed(addresses: Iterable[str]) -> set[str]:
    """The addresses a policy's domains resolved to that may be opened: none in
    :data:`~rock_core.egress.ALWAYS_REFUSED` (a DNS answer is not the operator's word; only a
    rule naming the metadata address opens it)."""
    refused = ipaddress.ip_network(ALWAYS_REFUSED)
    return {a for a in addresses if ipaddress.ip_address(a) not in refused}


def _body(
    chain: str, policy: EgressPolicy, addresses: Iterable[str], dns: Iterable[str]
) -> list[str]:
    lines = [f"-A {chain} -m conntrack --ctstate RELATED,ESTABLISHED -j RETURN"]
    for rule in policy.rules:
        lines.extend(_rule_lines(chain, rule))
    for address in sorted(_followed(addresses)):
        lines.append(f"-A {chain} -d {address}/32 -j RETURN")
    if policy.domains:
        for server in sorted(set(dns)):
            for protocol in ("udp", "tcp"):
                lines.append(f"-A {chain} -d {server}/32 -p {protocol} --dport 53 -j RETURN")
    return lines


#: Capabilities that let a container send from an address not its own (raw packets, its own
#: interfaces' addresses): the rules, keyed by its address, would not see those packets.
_FORGING = ("NET_ADMIN", "NET_RAW")


def _forging(host_config: Mapping[str, object]) -> list[str]:
    """What of :data:`_FORGING` (or privileged) a container has, from its ``HostConfig``
    (Docker's default set has ``NET_RAW`` unless dropped)."""

    def names(field: str) -> set[str]:
        value = host_config.get(field) or []
        return {str(c).upper().removeprefix("CAP_") for c in value}  # type: ignore[attr-defined]

    dropped, added = names("CapDrop"), names("CapAdd")
    if host_config.get("Privileged") or "ALL" in added:
        return ["privileged" if host_config.get("Privileged") else "ALL capabilities"]
    kept = added | (set() if "ALL" in dropped else {"NET_RAW"} - dropped)
    return sorted(kept & set(_FORGING))


class Firewall:
    """The egress rules this runtime put on the host, and the domains it follows.

    :param dns: the resolvers domains are resolved with (and sandboxes may reach on port 53
        when their policy lists domains): ``host`` or ``host:port`` each.
    :param resolve_interval: seconds between two resolutions of a policy's domains.
    """

    def __init__(self, dns: tuple[str, ...], resolve_interval: float) -> None:
        self._dns = dns
        self._interval = resolve_interval
        self._lock = threading.Lock()  # one change of the host's rules at a time (this process)
        self._bridges: dict[str, str] = {}  # Docker network id -> bridge interface
        # unit key -> (address, bridge, policy, resolved addresses, when resolved)
        self._applied: dict[str, tuple[str, str, EgressPolicy, frozenset[str], float]] = {}
        self._available: bool | None = None
        self._carried: dict[str, int] = {}  # unit key -> refusals counted before a rewrite
        self._seen: set[str] = set()  # unit keys with rules at the last sync (another run's)
        # unit key -> the address its jumps match (None: the host not read yet in this process)
        self._addresses: dict[str, str] | None = None
        # unit key -> its jumps ((chain, spec) each) and its chains on the host, as last read or
        # written by this process (meaningful once the host was read: _addresses not None)
        self._held: dict[str, tuple[tuple[tuple[str, str], ...], frozenset[str]]] = {}

    @staticmethod
    def usable() -> bool:
        """Whether this process can read and change the host's rules (iptables, as root)."""
        return shutil.which("iptables-save") is not None and os.geteuid() == 0

    def policed(self) -> bool:
        """Whether any unit has rules (put by this runtime, or seen at a sync)."""
        return bool(self._applied or self._seen)

    def knows(self, unit_id: str) -> bool:
        """Whether unit ``unit_id`` may have rules (put by this runtime, or seen at a sync)."""
        key = unit_id[:16]
        return key in self._applied or key in self._seen or key in (self._addresses or {})

    def clear_of_others(self, unit_id: str) -> bool:
        """Whether no other unit is known to have rules on the host (no I/O): then a new
        container's address cannot be in anyone's rules (:meth:`drop_stale`)."""
        known = self._addresses  # read without the lock: a size and a lookup, no iteration
        return known is not None and (not known or (len(known) == 1 and unit_id[:16] in known))

    def drop_stale(self, api: docker.APIClient, unit_id: str) -> None:
        """Drop the rules of other units keyed by the address of the container ``unit_id``, just
        started: a removed container's rules (removals run in the background; another process
        put them) would otherwise hold the new container to the old one's policy. The host's
        rules are read once per process; after that only an address in rock's rules is asked
        of Docker."""
        key = unit_id[:16]
        with self._lock:
            addresses = self._know_host()
            if not any(k != key for k in addresses):
                return
        networks = api.inspect_container(unit_id)["NetworkSettings"].get("Networks") or {}
        mine = {str(n["IPAddress"]) for n in networks.values() if n.get("IPAddress")}
        with self._lock:
            held = dict(self._know_host())
        stale = {k for k, address in held.items() if address in mine and k != key}
        if stale:
            log.info("dropping stale egress rules of %s (address now unit %s)", stale, key)
            self.drop_all(stale)

    def _know_host(self) -> dict[str, str]:
        """:attr:`_addresses` (and :attr:`_held`), the host read first if this process has not
        yet (once; the caller holds the lock)."""
        if self._addresses is None:
            self._addresses, self._held = {}, {}
            if self.usable():
                self._remember(self._save())
        assert self._addresses is not None
        return self._addresses

    def _remember(self, saved: list[str]) -> None:
        """:attr:`_addresses` and :attr:`_held` as the host's rules ``saved`` say."""
        jumps = self._jumps(saved)
        self._addresses = {key: m[1] for _chain, spec, key in jumps if (m := _SOURCE.search(spec))}
        chains: dict[str, set[str]] = {}
        for line in saved:
            if m := _CHAIN.match(line):
                chains.setdefault(m[2], set()).add(m[1])
        keys = chains.keys() | {key for _chain, _spec, key in jumps}
        self._held = {
            key: (
                tuple((chain, spec) for chain, spec, found in jumps if found == key),
                frozenset(chains.get(key, ())),
            )
            for key in keys
        }

    # -- reading the host ---------------------------------------------------------------------

    def _iptables(self, program: str, *args: str, text: str | None = None) -> str:
        if self._available is None:
            self._available = shutil.which(program) is not None
        if not self._available:
            raise RuntimeFailure(
                f"egress policies need {program} on the Docker host (not found on PATH)",
                attempted="egress",
            )
        done = subprocess.run(
            [program, "-w", *args] if program == "iptables-restore" else [program, *args],
            input=text,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeFailure(
                f"{program} failed: {done.stderr.strip() or done.returncode}", attempted="egress"
            )
        return done.stdout

    def _save(self, counters: bool = False) -> list[str]:
        args = ("-t", "filter", "-c") if counters else ("-t", "filter")
        return self._iptables("iptables-save", *args).splitlines()

    def _where(self, api: docker.APIClient, unit_id: str) -> tuple[str, str]:
        """The container's address and its bridge's interface."""
        inspected = api.inspect_container(unit_id)
        forging = _forging(inspected.get("HostConfig") or {})
        if forging:
            raise RuntimeFailure(
                f"container {unit_id[:12]} has {', '.join(forging)}: it can send from another "
                "address than its own, which no rule of an egress policy matches, so none is "
                "put on it (start it without these capabilities)",
                attempted="egress",
            )
        networks = inspected["NetworkSettings"].get("Networks") or {}
        for network in networks.values():
            if network.get("GlobalIPv6Address"):
                # The rules are iptables' (IPv4 only): IPv6 traffic would pass untouched.
                raise RuntimeFailure(
                    f"container {unit_id[:12]} has an IPv6 address "
                    f"({network['GlobalIPv6Address']}): rock's egress policies hold IPv4 only, "
                    "so none is put on a network with IPv6",
                    attempted="egress",
                )
        for network in networks.values():
            address, network_id = network.get("IPAddress"), network.get("NetworkID")
            if address and network_id:
                if network_id not in self._bridges:
                    options = api.inspect_network(network_id).get("Options") or {}
                    self._bridges[network_id] = options.get(
                        "com.docker.network.bridge.name", f"br-{network_id[:12]}"
                    )
                return str(address), self._bridges[network_id]
        raise RuntimeFailure(
            f"container {unit_id[:12]} has no address on a bridge: no egress policy can hold",
            attempted="egress",
        )

    def _dns_addresses(self) -> list[str]:
        return [
            server.rsplit(":", 1)[0] if server.count(":") == 1 else server for server in self._dns
        ]

    # -- changing it --------------------------------------------------------------------------

    def apply(self, api: docker.APIClient, unit_id: str, policy: EgressPolicy | None) -> None:
        """Put ``policy`` on the running container ``unit_id`` (``None``: drop its rules)."""
        if policy is None:
            self.drop(unit_id)
            return
        address, bridge = self._where(api, unit_id)
        resolved = frozenset(resolve_all(policy.domains, self._dns))
        with self._lock:
            self._write(unit_id[:16], address, bridge, policy, resolved)
            self._applied[unit_id[:16]] = (address, bridge, policy, resolved, time.monotonic())

    def _write(
        self, key: str, address: str, bridge: str, policy: EgressPolicy, resolved: frozenset[str]
    ) -> None:
        """Unit ``key``'s chains written for ``policy`` and its jumps put for ``address`` on
        ``bridge`` (its refusal count kept first): one commit of its own lines. The caller holds
        the lock."""
        self._know_host()
        self._counted(key)
        lines, jumps = self._lines(key, address, bridge, policy, resolved)
        try:
            self._iptables("iptables-restore", "--noflush", text=lines)
        except RuntimeFailure:
            # The host is not as this process knew it (another process changed this unit's
            # rules): read it, and make the change again from what is there.
            self._remember(self._save())
            lines, jumps = self._lines(key, address, bridge, policy, resolved)
            self._iptables("iptables-restore", "--noflush", text=lines)
        self._held[key] = (jumps, frozenset(chain_names(key)))
        if self._addresses is not None:
            self._addresses[key] = address

    def _lines(
        self, key: str, address: str, bridge: str, policy: EgressPolicy, resolved: frozenset[str]
    ) -> tuple[str, tuple[tuple[str, str], ...]]:
        """The ``iptables-restore`` text of :meth:`_write`, and the jumps it puts."""
        forward, local = chain_names(key)
        dns = self._dns_addresses()
        lines = ["*filter", f":{forward} - [0:0]", f":{local} - [0:0]"]
        lines += _body(forward, policy, resolved, dns)
        lines += _reject(forward, f"-d {ALWAYS_REFUSED}")
        if policy.default == "deny":
            lines += _reject(forward, "")
        # To the host itself, only rules and the resolvers: a listed domain's DNS answer naming
        # the host (its gateway, its own address) opens nothing of it.
        lines += _body(local, policy, (), dns)
        lines += _reject(local, "")
        jumps = {
            "DOCKER-USER": f"-s {address}/32 -i {bridge} ! -o {bridge} "
            f'-m comment --comment "{_TAG}{key}" -j {forward}',
            "INPUT": f'-s {address}/32 -i {bridge} -m comment --comment "{_TAG}{key}" -j {local}',
        }
        # The unit's old jumps (another address, after a restart) go in the same commit.
        lines += [f"-D {chain} {spec}" for chain, spec in self._held.get(key, ((), ()))[0]]
        lines += [f"-I {chain} 1 {spec}" for chain, spec in jumps.items()]
        lines.append("COMMIT")
        return "\n".join(lines) + "\n", tuple(jumps.items())

    @staticmethod
    def _jumps(saved: list[str]) -> list[tuple[str, str, str]]:
        found = []
        for line in saved:
            match = _JUMP.match(line)
            if match:
                found.append((match[1], match[2], match[3]))
        return found

    def drop(self, unit_id: str) -> None:
        """Remove every rule of unit ``unit_id`` (none: nothing to do)."""
        self.drop_all([unit_id])

    def drop_all(self, unit_ids: Iterable[str]) -> None:
        """Remove every rule of the units ``unit_ids``, in one change."""
        keys = {unit_id[:16] for unit_id in unit_ids}
        with self._lock:
            for key in keys:
                self._applied.pop(key, None)
                self._carried.pop(key, None)
                self._seen.discard(key)
            self._drop_keys(keys)

    def _drop_keys(self, keys: set[str]) -> None:
        """The jumps and chains of units ``keys`` removed, in one commit of their own lines (as
        this process knows them; the host read again if it differs). The caller holds the lock."""
        self._know_host()
        try:
            self._remove(keys)
        except RuntimeFailure:
            self._remember(self._save())  # another process changed them: from what is there
            self._remove(keys)
        for key in keys:
            (self._addresses or {}).pop(key, None)
            self._held.pop(key, None)

    def _remove(self, keys: set[str]) -> None:
        lines = ["*filter"]
        held = [self._held[key] for key in sorted(keys) if key in self._held]
        lines += [f"-D {chain} {spec}" for jumps, _chains in held for chain, spec in jumps]
        chains = sorted(chain for _jumps, named in held for chain in named)
        lines += [f"-F {chain}" for chain in chains] + [f"-X {chain}" for chain in chains]
        if len(lines) > 1:
            self._iptables(
                "iptables-restore", "--noflush", text="\n".join([*lines, "COMMIT"]) + "\n"
            )

    def sync(
        self,
        api: docker.APIClient,
        wanted: Mapping[str, EgressPolicy],
        running: Callable[[], set[str]],
    ) -> None:
        """Match the host's rules to ``wanted`` (``{unit_id: policy}``): rules put back where
        missing, domains resolved again when due (rules rewritten if an answer changed), and
        the rules of units that no longer run removed (``running()``: the ids of the running
        containers, asked of Docker once, only when some rules belong to no unit of ``wanted``)."""
        saved = self._save()
        chains = {m[1] for line in saved if (m := _CHAIN.match(line))}
        jumped = {(chain, key) for chain, _spec, key in self._jumps(saved)}
        keys = {m[2] for line in saved if (m := _CHAIN.match(line))} | {k for _c, k in jumped}
        self._seen = set(keys)
        with self._lock:
            self._remember(saved)
        for unit_id, policy in wanted.items():
            key = unit_id[:16]
            forward, local = chain_names(key)
            known = self._applied.get(key)
            whole = {forward, local} <= chains and {("DOCKER-USER", key), ("INPUT", key)} <= jumped
            due = known is None or (
                bool(policy.domains) and time.monotonic() - known[4] >= self._interval
            )
            if whole and not due and known is not None and known[2] == policy:
                continue
            try:
                if known is None or known[2] != policy or not whole:
                    self.apply(api, unit_id, policy)
                    continue
                resolved = frozenset(resolve_all(policy.domains, self._dns))
                with self._lock:
                    if resolved != known[3]:
                        self._write(key, known[0], known[1], policy, resolved)
                    self._applied[key] = (known[0], known[1], policy, resolved, time.monotonic())
            except (RuntimeFailure, docker.errors.APIError) as exc:
                log.warning("could not put back the egress rules of unit %s: %s", key, exc)
        others = keys - {u[:16] for u in wanted}
        alive = {unit_id[:16] for unit_id in running()} if others else set()
        gone = others - alive
        if gone:
            with self._lock:
                for key in gone:
                    self._applied.pop(key, None)
                    self._carried.pop(key, None)
                self._drop_keys(gone)

    def _counted(self, key: str) -> None:
        """The REJECT counters of unit ``key``'s chains, about to be written again, kept in
        :attr:`_carried` (a rewrite zeroes them): its own chains listed, no other unit's (a
        unit with no chains yet: nothing asked)."""
        count = 0
        for chain in sorted(self._held.get(key, ((), frozenset()))[1]):
            try:
                listed = self._iptables("iptables", "-w", "-t", "filter", "-v", "-S", chain)
            except RuntimeFailure:
                continue  # gone meanwhile: nothing to keep
            count += sum(
                int(m[1]) for line in listed.splitlines() if (m := _REFUSED_LISTED.match(line))
            )
        if count:
            self._carried[key] = self._carried.get(key, 0) + count

    @staticmethod
    def _count(lines: list[str]) -> dict[str, int]:
        counts: dict[str, int] = {}
        for line in lines:
            match = _REFUSED.match(line)
            if match:
                counts[match[2]] = counts.get(match[2], 0) + int(match[1])
        return counts

    def refused(self) -> dict[str, int]:
        """Connections refused so far by each unit's rules (packets its REJECT rules answered:
        one per refused TCP connection, one per refused UDP datagram): ``{unit key: count}``."""
        counts = self._count(self._save(counters=True))
        return {key: count + self._carried.get(key, 0) for key, count in counts.items()}
