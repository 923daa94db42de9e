"""API keys and tenancy for the admin server.

When keys are configured, every request but ``GET /healthz`` and ``GET /`` must carry one, as
``X-API-Key: <key>`` or ``Authorization: Bearer <key>``. Each key belongs to a *tenant* (a name);
a tenant sees and acts on only the sandboxes it started. The admin keeps only the SHA-256 of each
key: keys are meant to be long random tokens (at least :data:`MIN_KEY_LENGTH` characters), for
which a plain hash is as good as a salted one. A key is never logged, stored or echoed back.

Configuring keys (both sources add up)::

    [admin]
    api_keys = [
        { tenant = "team-a", sha256 = "9f86d081884c7d65..." },   # preferred: only the hash
        { tenant = "team-b", key = "a-long-random-token..." },   # hashed when the file is read
        { tenant = "ops", sha256 = "...", allow_host_network = true },  # may start network="host"
    ]

    ROCK_ADMIN_API_KEYS="team-a=sha256:9f86d0...,team-b=a-long-random-token..."

``python -m rock.admin.auth TENANT`` reads a key from stdin (or makes a new one) and prints the
``api_keys`` entry with its hash.

A sandbox started with a key carries its tenant in ``spec.metadata["rock.tenant"]``
(:data:`TENANT_METADATA_KEY`, reserved: a start request may not set it itself).
"""

from __future__ import annotations

import hashlib
import re
import secrets
import sys
from collections.abc import Iterable, Mapping
from typing import Any

import attrs
from rock_core.errors import InvalidParameter

__all__ = [
    "ApiKey",
    "KeyRing",
    "TENANT_METADATA_KEY",
    "MIN_KEY_LENGTH",
    "hash_key",
    "parse_api_keys",
    "key_from_headers",
]

#: The ``spec.metadata`` key holding the tenant of a sandbox started with an API key.
TENANT_METADATA_KEY = "rock.tenant"

#: Shortest plaintext key accepted: keys are stored as a plain SHA-256, so they must be hard to guess.
MIN_KEY_LENGTH = 16

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_TENANT = re.compile(r"^[A-Za-z0-9_.@:-]{1,128}$")


def hash_key(key: str) -> str:
    """The hex SHA-256 of ``key`` (what the admin keeps instead of the key)."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


@attrs.frozen(kw_only=True)
class ApiKey:
    """One configured key: its tenant, the SHA-256 of the key (never the key itself), and what
    its tenant may do beyond the defaults (``allow_host_network``: start sandboxes on the
    host's network, which only trusted code should have)."""

    tenant: str
    sha256: str = attrs.field(repr=lambda h: h[:8] + "...")
    allow_host_network: bool = False


def _bad(source: str, why: str) -> InvalidParameter:
    # Never put the value in the message: it may be a key.
    return InvalidParameter(f"{source}: api_keys: {why}", field="api_keys")


def _tenant(source: str, value: Any) -> str:
    if not isinstance(value, str) or not _TENANT.match(value):
        raise _bad(source, f"tenant {value!r} is not a name (letters, digits, '_', '.', '@', ':', '-'; at most 128)")
    return value


def _entry(source: str, tenant: Any, key: Any = None, sha256: Any = None, allow_host_network: Any = False) -> ApiKey:
    name = _tenant(source, tenant)
    if not isinstance(allow_host_network, bool):
        raise _bad(source, f"allow_host_network of tenant {name!r} must be true or false, got {allow_host_network!r}")
    if (key is None) == (sha256 is None):
        raise _bad(source, f"the key of tenant {name!r} needs exactly one of 'key' or 'sha256'")
    if sha256 is not None:
        digest = str(sha256).strip().lower() if isinstance(sha256, str) else ""
        if not _HEX64.match(digest):
            raise _bad(source, f"the sha256 of tenant {name!r} is not 64 hex digits")
        return ApiKey(tenant=name, sha256=digest, allow_host_network=allow_host_network)
    if not isinstance(key, str) or len(key.strip()) < MIN_KEY_LENGTH:
        raise _bad(source, f"the key of tenant {name!r} is shorter than {MIN_KEY_LENGTH} characters")
    return ApiKey(tenant=name, sha256=hash_key(key.strip()), allow_host_network=allow_host_network)


def parse_api_keys(source: str, value: Any) -> tuple[ApiKey, ...]:
    """Keys from a TOML list of tables (``tenant`` and ``key`` or ``sha256``) or from text
    ``TENANT=KEY`` / ``TENANT=sha256:HEX``, comma-separated (``ROCK_ADMIN_API_KEYS``).

    :raises InvalidParameter: a malformed entry, named by its tenant (the key is never echoed).
    """
    out: list[ApiKey] = []
    if isinstance(value, str):
        for part in value.split(","):
            part = part.strip()
            if not part:
                continue
            tenant, sep, secret = part.partition("=")
            if not sep:
                raise _bad(source, "each entry is TENANT=KEY or TENANT=sha256:HEX")
            secret = secret.strip()
            if secret.lower().startswith("sha256:") and _HEX64.match(secret[7:].strip().lower()):
                out.append(_entry(source, tenant.strip(), sha256=secret[7:]))
            else:
                out.append(_entry(source, tenant.strip(), key=secret))
    elif isinstance(value, (list, tuple)):
        for item in value:
            if isinstance(item, ApiKey):
                out.append(item)
                continue
            if not isinstance(item, Mapping):
                raise _bad(source, "each entry is a table: { tenant = ..., sha256 = ... } or { tenant = ..., key = ... }")
            unknown = set(item) - {"tenant", "name", "key", "sha256", "allow_host_network"}
            if unknown:
                raise _bad(
                    source, f"unknown field(s) {', '.join(sorted(unknown))} (known: tenant, key, sha256, allow_host_network)"
                )
            tenant = item.get("tenant", item.get("name"))
            out.append(_entry(
                source, tenant, key=item.get("key"), sha256=item.get("sha256"),
                allow_host_network=item.get("allow_host_network", False),
            ))
    else:
        raise _bad(source, "expected a list of tables or TENANT=KEY text")
    return tuple(out)


def key_from_headers(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """The key a request carries: ``X-API-Key``, else ``Authorization: Bearer``; ``None`` if neither."""
    bearer = None
    for name, value in headers:
        if name == b"x-api-key":
            text = value.decode("latin-1").strip()
            if text:
                return text
        elif name == b"authorization":
            scheme, _, token = value.decode("latin-1").strip().partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                bearer = token.strip()
    return bearer


class KeyRing:
    """The configured keys, looked up by hash. Empty: authentication is off."""

    def __init__(self, keys: Iterable[ApiKey]) -> None:
        keys = tuple(keys)
        self._by_hash = {k.sha256: k.tenant for k in keys}
        #: Tenants whose keys may start sandboxes on the host's network.
        self.host_network_tenants = frozenset(k.tenant for k in keys if k.allow_host_network)

    def __bool__(self) -> bool:
        return bool(self._by_hash)

    def tenant_of(self, key: str | None) -> str | None:
        """The tenant of ``key``, or ``None`` for a missing or unknown key."""
        if not key:
            return None
        # Looked up by hash: timing reveals at most something about a hash, not about a key.
        return self._by_hash.get(hash_key(key))


def _main(argv: list[str]) -> int:
    """``python -m rock.admin.auth TENANT``: print an ``api_keys`` entry for a key read from
    stdin, or for a new random key (printed once, to stderr)."""
    if len(argv) != 1:
        print("usage: python -m rock.admin.auth TENANT  (key on stdin, or none to make one)", file=sys.stderr)
        return 2
    tenant = _tenant("command line", argv[0])
    key = "" if sys.stdin.isatty() else sys.stdin.read().strip()
    if not key:
        key = secrets.token_urlsafe(32)
        print(f"new key for {tenant} (shown once): {key}", file=sys.stderr)
    entry = _entry("stdin", tenant, key=key)
    print(f'{{ tenant = "{entry.tenant}", sha256 = "{entry.sha256}" }}')
    return 0


if __name__ == "__main__":  # pragma: no cover - a helper for people configuring keys
    raise SystemExit(_main(sys.argv[1:]))
