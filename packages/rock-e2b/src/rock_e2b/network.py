"""E2B's network settings (``allow_internet_access``, ``network={"allow_out", "deny_out"}``, and
``update_network``) as rock's egress policy (:mod:`rock_core.egress`), enforced on the host.

- ``allow_internet_access=False``, or ``0.0.0.0/0`` in ``deny_out``: the policy denies by default;
- addresses and CIDRs in ``allow_out``: allow rules, tried first (E2B's allow wins over deny);
  domain names in ``allow_out``: the policy's domains (their addresses followed while it runs);
- other addresses and CIDRs in ``deny_out``: deny rules.

Refused, naming what is missing: a domain in ``deny_out`` (rock denies addresses, not names),
E2B's request rules and transforms, egress proxy, DNS servers, request-host masking, HTTPS
ports, and ``allow_public_traffic=True`` (rock's ports are reached through the admin, with a
key). A policy wider than the caller's key may ask for is refused by the admin's own check.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from rock_e2b.access import E2BError

__all__ = ["ALL_TRAFFIC", "egress_of"]

ALL_TRAFFIC = "0.0.0.0/0"
_UNSERVED = {
    "rules": "request rules and transforms",
    "egressProxy": "an egress proxy",
    "dnsServers": "DNS servers",
    "maskRequestHost": "request-host masking",
    "httpsPorts": "HTTPS ports",
}


def _address(text: str) -> str | None:
    try:
        return str(ipaddress.ip_network(text, strict=False))
    except ValueError:
        return None


def _strings(value: Any, field: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise E2BError(400, f"network.{field}: a list of addresses, CIDRs or domains")
    return [v.strip() for v in value if v.strip()]


def egress_of(network: Any, allow_internet_access: Any = None) -> dict[str, Any] | None:
    """The egress policy (its wire form) E2B's settings ask for; ``None``: they ask for none."""
    network = network or {}
    if not isinstance(network, dict):
        raise E2BError(400, "network: an object")
    for key, what in _UNSERVED.items():
        if network.get(key):
            raise E2BError(501, f"network.{key}: rock does not serve {what}")
    if network.get("allowPublicTraffic") is True:
        raise E2BError(
            501,
            "network.allowPublicTraffic: rock serves a sandbox's ports through its admin, to "
            "the sandbox's API key only",
        )
    allow = _strings(network.get("allowOut"), "allowOut")
    deny = _strings(network.get("denyOut"), "denyOut")
    if allow_internet_access is None and not allow and not deny:
        return None
    rules: list[dict[str, Any]] = []
    domains: list[str] = []
    for item in allow:
        cidr = _address(item)
        if cidr is not None:
            rules.append({"action": "allow", "cidr": cidr})
        else:
            domains.append(item)
    default = "deny" if allow_internet_access is False else "allow"
    for item in deny:
        cidr = _address(item)
        if cidr is None:
            raise E2BError(
                400,
                f"network.denyOut: {item!r}: rock denies addresses and CIDRs, not domain names "
                "(deny all, then allow the names: deny_out=['0.0.0.0/0'], allow_out=[...])",
            )
        if cidr == ALL_TRAFFIC:
            default = "deny"
        else:
            rules.append({"action": "deny", "cidr": cidr})
    return {"default": default, "rules": rules, "domains": domains}
