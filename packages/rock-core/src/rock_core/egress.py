"""Where a sandbox may connect: its :class:`EgressPolicy` (``SandboxConfig(egress=...)``).

A policy has a default (``allow`` or ``deny``), rules that allow or deny IPv4 CIDRs (with
optional ports and a protocol), tried in order before the default, and an allow-list of domain
names whose addresses the runtime follows while the sandbox runs. Whatever the default,
link-local addresses (``169.254.0.0/16``, the cloud metadata address) and the host's own
addresses (the bridge's gateway included) are refused unless a rule names them. The runtime
enforces it on the host, out of the sandbox's reach (capability ``egress``; rock-docker's
``_firewall``); a refused connection fails at once (a TCP reset, an ICMP port-unreachable).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from rock_core.errors import InvalidParameter

__all__ = [
    "ALWAYS_REFUSED",
    "EgressPolicy",
    "EgressRule",
    "egress_policy",
    "wider_than",
    "with_mirrors",
]

#: Refused whatever the default, unless a rule names them: link-local (the metadata address).
ALWAYS_REFUSED = "169.254.0.0/16"

_DOMAIN = re.compile(
    r"^(?=.{1,253}$)([a-zA-Z0-9_]([a-zA-Z0-9_-]{0,61}[a-zA-Z0-9])?\.)*[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?$"
)
_PORTS = re.compile(r"^(\d{1,5})(?:-(\d{1,5}))?$")


def _refuse(field: str, reason: str, value: Any) -> InvalidParameter:
    return InvalidParameter(f"{field}: {reason}", field=field, value=value, attempted="egress")


def _cidr(value: Any) -> str:
    try:
        network = ipaddress.ip_network(str(value).strip(), strict=False)
    except ValueError:
        raise ValueError(
            f"expected an IPv4 address or CIDR (A.B.C.D or A.B.C.D/N), got {value!r}"
        ) from None
    if network.version != 4:
        raise ValueError(f"only IPv4 is filtered (sandboxes have no IPv6), got {value!r}")
    return str(network)


def _ports(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, (int, str)):
        value = [value]
    ports: list[str] = []
    for item in value:
        match = _PORTS.match(str(item).strip()) if not isinstance(item, bool) else None
        low, high = (int(match[1]), int(match[2] or match[1])) if match else (0, 0)
        if not match or not 1 <= low <= high <= 65535:
            raise ValueError(f"expected ports like 443 or '8000-8100' (1 to 65535), got {item!r}")
        ports.append(str(low) if low == high else f"{low}-{high}")
    return tuple(ports)


@attrs.frozen
class EgressRule:
    """Allow or deny connections to ``cidr`` (an address or an IPv4 network), on ``ports``
    (numbers or ranges ``"8000-8100"``; none: every port) over ``protocol`` (``tcp``, ``udp``
    or ``any``; ports need ``tcp`` or ``udp``, and ``any`` with ports means both)."""

    action: str
    cidr: str
    ports: tuple[str, ...] = ()
    protocol: str = "any"

    @classmethod
    def allow(cls, cidr: str, ports: Iterable[int | str] = (), protocol: str = "any") -> EgressRule:
        """``EgressRule.allow("A.B.C.D", [443])``."""
        return cls("allow", cidr, tuple(str(p) for p in ports), protocol)

    @classmethod
    def deny(cls, cidr: str, ports: Iterable[int | str] = (), protocol: str = "any") -> EgressRule:
        """``EgressRule.deny("A.B.C.D/N")``."""
        return cls("deny", cidr, tuple(str(p) for p in ports), protocol)

    def to_dict(self) -> dict[str, Any]:
        """The rule as the wire carries it."""
        return {
            "action": self.action,
            "cidr": self.cidr,
            "ports": list(self.ports),
            "protocol": self.protocol,
        }


@attrs.frozen
class EgressPolicy:
    """A sandbox's egress policy: ``default`` (``allow`` or ``deny``), ``rules`` tried in order
    before it, and ``domains`` whose current addresses are allowed (all ports)."""

    default: str = "allow"
    rules: tuple[EgressRule, ...] = ()
    domains: tuple[str, ...] = ()

    @classmethod
    def deny_all(
        cls, allow: Iterable[EgressRule | str] = (), domains: Iterable[str] = ()
    ) -> EgressPolicy:
        """Deny by default, allowing ``allow`` (rules, or CIDRs on every port) and ``domains``."""
        rules = tuple(r if isinstance(r, EgressRule) else EgressRule.allow(r) for r in allow)
        return egress_policy(cls("deny", rules, tuple(domains)))

    def to_dict(self) -> dict[str, Any]:
        """The policy as the wire carries it (``egress`` of a start or an update)."""
        return {
            "default": self.default,
            "rules": [rule.to_dict() for rule in self.rules],
            "domains": list(self.domains),
        }

    def describe(self) -> str:
        """In words, for a status: ``deny by default; allow A.B.C.D/32 tcp 443; domains example.org``."""
        parts = [f"{self.default} by default"]
        for rule in self.rules:
            ports = f" {rule.protocol} {','.join(rule.ports)}" if rule.ports else ""
            if not ports and rule.protocol != "any":
                ports = f" {rule.protocol}"
            parts.append(f"{rule.action} {rule.cidr}{ports}")
        if self.domains:
            parts.append("domains " + ", ".join(self.domains))
        return "; ".join(parts)


def _rule(value: Any, field: str) -> EgressRule:
    if isinstance(value, EgressRule):
        value = value.to_dict()
    if not isinstance(value, Mapping):
        raise _refuse(field, "expected a rule like {'action': 'allow', 'cidr': ...}", value)
    unknown = set(value) - {"action", "cidr", "ports", "protocol"}
    if unknown:
        raise _refuse(field, f"unknown key(s) {sorted(unknown)}", value)
    action = value.get("action")
    if action not in ("allow", "deny"):
        raise _refuse(f"{field}.action", f"expected 'allow' or 'deny', got {action!r}", action)
    protocol = value.get("protocol") or "any"
    if protocol not in ("tcp", "udp", "any"):
        raise _refuse(f"{field}.protocol", f"expected tcp, udp or any, got {protocol!r}", protocol)
    try:
        cidr = _cidr(value.get("cidr"))
    except ValueError as exc:
        raise _refuse(f"{field}.cidr", str(exc), value.get("cidr")) from None
    try:
        ports = _ports(value.get("ports"))
    except ValueError as exc:
        raise _refuse(f"{field}.ports", str(exc), value.get("ports")) from None
    return EgressRule(action, cidr, ports, protocol)


def egress_policy(value: Any, field: str = "egress") -> EgressPolicy:
    """A checked :class:`EgressPolicy` from one or its wire form (a mapping).

    :raises InvalidParameter: naming the part that is wrong (``egress.rules[1].cidr: ...``).
    """
    if isinstance(value, EgressPolicy):
        value = value.to_dict()
    if not isinstance(value, Mapping):
        raise _refuse(field, "expected a policy like {'default': 'deny', 'rules': [...]}", value)
    unknown = set(value) - {"default", "rules", "domains"}
    if unknown:
        raise _refuse(field, f"unknown key(s) {sorted(unknown)}", value)
    default = value.get("default") or "allow"
    if default not in ("allow", "deny"):
        raise _refuse(f"{field}.default", f"expected 'allow' or 'deny', got {default!r}", default)
    rules_in = value.get("rules") or []
    if isinstance(rules_in, (str, Mapping)):
        raise _refuse(f"{field}.rules", "expected a list of rules", rules_in)
    rules = tuple(_rule(rule, f"{field}.rules[{i}]") for i, rule in enumerate(rules_in))
    domains_in = value.get("domains") or []
    if isinstance(domains_in, str):
        domains_in = [domains_in]
    domains: list[str] = []
    for i, name in enumerate(domains_in):
        text = str(name).strip().rstrip(".").lower() if isinstance(name, str) else ""
        if not _DOMAIN.match(text) or _is_address(text):
            raise _refuse(f"{field}.domains[{i}]", f"expected a domain name, got {name!r}", name)
        if text not in domains:
            domains.append(text)
    return EgressPolicy(default, rules, tuple(domains))


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def with_mirrors(policy: EgressPolicy, mirrors: Iterable[str]) -> EgressPolicy:
    """``policy`` with the speedup mirrors ``mirrors`` allowed when it denies by default: a
    mirror named by address as a rule on its URL's port (``http``: 80, ``https``: 443, a bare
    address: both), one named by host name as a domain. An allowing policy is returned as is."""
    if policy.default != "deny":
        return policy
    rules, domains = list(policy.rules), list(policy.domains)
    for mirror in mirrors:
        scheme, _, rest = mirror.strip().rpartition("://")
        authority = rest.split("/", 1)[0].rsplit("@", 1)[-1]
        host, _, port = (
            authority.partition(":") if authority.count(":") == 1 else (authority, "", "")
        )
        host = host.strip("[]").lower()
        if not host:
            continue
        if _is_address(host):
            if ipaddress.ip_address(host).version != 4:
                continue
            default_ports = {"http": ["80"], "https": ["443"]}.get(scheme.lower(), ["80", "443"])
            rule = _rule(EgressRule.allow(host, [port] if port else default_ports, "tcp"), "mirror")
            if rule not in rules:
                rules.insert(0, rule)
        elif host not in domains:
            domains.append(host)
    return egress_policy(EgressPolicy(policy.default, tuple(rules), tuple(domains)))


def _net(rule: EgressRule) -> ipaddress.IPv4Network:
    return ipaddress.IPv4Network(rule.cidr)


def _ports_of(rule: EgressRule) -> list[tuple[int, int]] | None:
    """The rule's port ranges (``None``: every port)."""
    if not rule.ports:
        return None
    spans = []
    for port in rule.ports:
        low, _, high = port.partition("-")
        spans.append((int(low), int(high or low)))
    return spans


def _covers(outer: EgressRule, inner: EgressRule) -> bool:
    """Whether every connection ``inner`` matches, ``outer`` matches too."""
    if not _net(inner).subnet_of(_net(outer)):
        return False
    if outer.protocol != "any" and inner.protocol != outer.protocol:
        return False
    outer_ports, inner_ports = _ports_of(outer), _ports_of(inner)
    if outer_ports is None:
        return True
    if inner_ports is None:
        return False
    return all(any(a <= lo and hi <= b for a, b in outer_ports) for lo, hi in inner_ports)


def _overlaps(one: EgressRule, other: EgressRule) -> bool:
    if not _net(one).overlaps(_net(other)):
        return False
    if "any" not in (one.protocol, other.protocol) and one.protocol != other.protocol:
        return False
    mine, theirs = _ports_of(one), _ports_of(other)
    if mine is None or theirs is None:
        return True
    return any(lo <= b and a <= hi for lo, hi in mine for a, b in theirs)


def _name_within(name: str, allowed: Iterable[str]) -> bool:
    return any(name == a or name.endswith("." + a) for a in allowed)


def wider_than(asked: EgressPolicy | None, widest: EgressPolicy) -> str | None:
    """What of ``asked`` lets a sandbox connect where ``widest`` does not, in words (the rule
    named: ``rules[1] (allow A.B.C.D/N)``); ``None`` when it stays within it. No policy at all
    allows everything. A widest policy that denies by default admits allow rules inside its own
    allow rules and domains among (or under) its domains; one that allows by default admits
    any policy that keeps denying what its deny rules deny."""
    if asked is None:
        return "no egress policy (everything allowed)"
    if widest.default == "deny":
        if asked.default != "deny":
            return "default allow"
        allows = [r for r in widest.rules if r.action == "allow"]
        for i, rule in enumerate(asked.rules):
            if rule.action == "allow" and not any(_covers(w, rule) for w in allows):
                return f"rules[{i}] ({EgressPolicy('allow', (rule,)).describe().split('; ', 1)[1]})"
        for i, name in enumerate(asked.domains):
            if not _name_within(name, widest.domains):
                return f"domains[{i}] ({name})"
        return None
    for denied in (r for r in widest.rules if r.action == "deny"):
        for i, rule in enumerate(asked.rules):
            if rule.action == "deny" and _covers(rule, denied):
                break
            if rule.action == "allow" and _overlaps(rule, denied):
                shown = EgressPolicy("allow", (rule,)).describe().split("; ", 1)[1]
                return f"rules[{i}] ({shown}) opens what the key denies"
        else:
            if asked.default != "deny":
                shown = EgressPolicy("allow", (denied,)).describe().split("; ", 1)[1]
                return f"default allow without the key's rule {shown}"
    return None
