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
        { tenant = "eval", key = "...", max_priority = 9 },  # may ask for start priorities up to 9
        { tenant = "pool-ops", sha256 = "...", operator = true },  # manages warm pools
        { tenant = "team-c", sha256 = "...",                # what the tenant may hold at once
          max_sandboxes = 50, max_memory = "64g", max_cpus = 32,
          allowed_cap_add = ["NET_RAW"] },                  # capabilities its sandboxes may add
    ]

    ROCK_ADMIN_API_KEYS="team-a=sha256:9f86d0...,team-b=a-long-random-token..."

``python -m rock.admin.auth TENANT`` reads a key from stdin (or makes a new one) and prints the
``api_keys`` entry with its hash.

A sandbox started with a key carries its tenant in ``spec.metadata["rock.tenant"]``
(:data:`TENANT_METADATA_KEY`, reserved: a start request may not set it itself), and the engine
knows it as the sandbox's tenant (:mod:`rock_core.tenancy`): its network group and archive are
the tenant's, and the tenant's quotas count it.

What an entry grants, each checked per key:

- ``operator`` (default false): manages the warm pools (``POST /warmup/tasks`` with ``size``,
  ``GET /warm_pools``) and sees every tenant in ``/admin/status``. Any key's starts may claim a
  pool's members (fresh sandboxes nobody used), which then count for the claiming tenant.
- ``max_sandboxes``, ``max_memory`` (a size: ``"16g"``), ``max_cpus``: quotas over the tenant's
  pending and running sandboxes (stopped and archived ones hold neither memory nor CPU, and do
  not count); a start or restart past one is refused with code 4029 naming the quota, the use
  and what was asked. Memory counts each sandbox's ``memory``, CPUs its ``limit_cpus`` if set,
  else its ``cpus``.
- ``max_snapshots``: how many snapshots the tenant may keep (``rock sandbox snapshots``; a
  fork's snapshot counts); a snapshot or fork past it is refused with code 4029 naming it.
- ``allowed_cap_add`` (default none): the capabilities (``NET_RAW``, ``SYS_PTRACE``, ...) the
  key's starts may ask for in ``cap_add``, within the engine's own ``allowed_cap_add``.
- ``max_egress`` (default any) and ``default_egress`` (default the admin's): the widest egress
  policy the key's starts and updates may ask for, and the one its starts without a policy get
  (:func:`rock_core.egress.wider_than`; a refusal names the rule).

Without keys, whoever reaches the admin is its operator: every capability the engine allows, no
quota, the warm pools.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import sys
from collections.abc import Iterable
from typing import Any

import attrs

from rock_core.converters import capability_names, structure_value
from rock_core.egress import EgressPolicy, egress_policy
from rock_core.errors import InvalidParameter
from rock_core.models import (
    PRIORITY_NORMAL,
    ByteSize,
    PositiveFloat,
    PositiveInt,
    Priority,
    constrained,
    must,
)
from rock_core.tenancy import Quota

__all__ = [
    "ApiKey",
    "KeyRing",
    "TENANT_METADATA_KEY",
    "MIN_KEY_LENGTH",
    "ApiKeyEntry",
    "hash_key",
    "api_key_tables",
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
    host's network, which only trusted code should have; ``max_priority``: the highest start
    priority its requests may ask for, 5 (normal) unless raised; ``operator``: manages warm
    pools; ``quota``: what the tenant may hold at once; ``allowed_cap_add``: the capabilities
    its starts may add)."""

    tenant: str
    sha256: str = attrs.field(repr=lambda h: h[:8] + "...")
    allow_host_network: bool = False
    max_priority: int = PRIORITY_NORMAL
    operator: bool = False
    quota: Quota = attrs.field(factory=Quota)
    allowed_cap_add: tuple[str, ...] = ()
    #: The widest egress policy its starts and updates may ask for (``None``: any), and the
    #: one its starts without a policy get (``None``: the admin's ``default_egress``).
    max_egress: EgressPolicy | None = None
    default_egress: EgressPolicy | None = None


def optional_egress(value: Any) -> EgressPolicy | None:
    """An egress policy from its TOML table (``None`` stays ``None``), checked part by part."""
    return None if value is None else egress_policy(value)


def _is_tenant(value: Any) -> bool:
    return isinstance(value, str) and _TENANT.match(value) is not None


def _is_key(value: Any) -> bool:
    return value is None or (isinstance(value, str) and len(value.strip()) >= MIN_KEY_LENGTH)


def _is_digest(value: Any) -> bool:
    return value is None or (isinstance(value, str) and _HEX64.match(value) is not None)


def _digest_text(value: Any) -> Any:
    return value.strip().lower() if isinstance(value, str) else value


def _capabilities(value: Any) -> Any:
    # Names as Docker takes them (upper case, no CAP_); anything else is left for the check to refuse.
    try:
        return capability_names(value)
    except ValueError:
        return value


def _are_capabilities(value: Any) -> bool:
    return isinstance(value, tuple) and all(isinstance(name, str) for name in value)


@attrs.frozen(kw_only=True)
class ApiKeyEntry:
    """One entry of ``api_keys`` as it is written: a tenant and its key, or the key's SHA-256.

    Read from a TOML table by rock-core's converter (unknown fields refused, ``allow_host_network``
    true or false), so a bad entry is named by its path: ``admin.api_keys[2].sha256: expected 64
    hex digits, got a value not shown (a secret)``. Neither a key nor a digest is ever echoed.
    """

    tenant: str = attrs.field(
        validator=must(
            _is_tenant, "a name of letters, digits, '_', '.', '@', ':', '-' (at most 128)"
        )
    )
    # Any: a key of the wrong type must not be quoted by the converter's "expected a string".
    key: Any = attrs.field(
        default=None,
        repr=False,
        validator=must(_is_key, f"a key of at least {MIN_KEY_LENGTH} characters", secret=True),
    )
    sha256: Any = attrs.field(
        default=None,
        repr=False,
        converter=_digest_text,
        validator=must(_is_digest, "64 hex digits", secret=True),
    )
    allow_host_network: bool = False
    max_priority: Priority = constrained(Priority, default=PRIORITY_NORMAL)
    operator: bool = False
    max_sandboxes: PositiveInt | None = constrained(PositiveInt, optional=True, default=None)
    max_memory: ByteSize | None = constrained(ByteSize, optional=True, default=None)
    max_cpus: PositiveFloat | None = constrained(PositiveFloat, optional=True, default=None)
    max_snapshots: PositiveInt | None = constrained(PositiveInt, optional=True, default=None)
    # Any: a bare string must be refused as one, not read as a list of its letters.
    allowed_cap_add: Any = attrs.field(
        default=(),
        converter=_capabilities,
        validator=must(
            _are_capabilities, "a list of capability names like ['NET_RAW'] (see capabilities(7))"
        ),
    )
    # Any: a policy is read by rock_core.egress (each part named), not by the converter.
    max_egress: Any = attrs.field(default=None, converter=optional_egress)
    default_egress: Any = attrs.field(default=None, converter=optional_egress)

    def __attrs_post_init__(self) -> None:
        if (self.key is None) == (self.sha256 is None):
            raise InvalidParameter(
                f"the key of tenant {self.tenant!r} needs exactly one of 'key' or 'sha256'"
            )

    def api_key(self) -> ApiKey:
        """The :class:`ApiKey` this entry configures (the key hashed, never kept)."""
        digest = self.sha256 if self.sha256 is not None else hash_key(self.key.strip())
        return ApiKey(
            tenant=self.tenant,
            sha256=digest,
            allow_host_network=self.allow_host_network,
            max_priority=self.max_priority,
            operator=self.operator,
            allowed_cap_add=self.allowed_cap_add,
            max_egress=self.max_egress,
            default_egress=self.default_egress,
            quota=Quota(
                max_sandboxes=self.max_sandboxes,
                max_memory=self.max_memory,
                max_cpus=self.max_cpus,
                max_snapshots=self.max_snapshots,
            ),
        )


def api_key_tables(text: str, *, path: str = "api_keys") -> list[dict[str, str]]:
    """The entries of ``TENANT=KEY`` / ``TENANT=sha256:HEX`` text, comma-separated
    (``ROCK_ADMIN_API_KEYS``), as the tables :class:`ApiKeyEntry` reads.

    :raises InvalidParameter: a part without ``=``, named by its place (``api_keys[1]``) and
        not echoed (it may be a key).
    """
    tables: list[dict[str, str]] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        tenant, sep, secret = part.partition("=")
        if not sep:
            where = f"{path}[{len(tables)}]"
            raise InvalidParameter(
                f"{where}: each entry is TENANT=KEY or TENANT=sha256:HEX", field=where
            )
        secret = secret.strip()
        if secret.lower().startswith("sha256:") and _HEX64.match(secret[7:].strip().lower()):
            tables.append({"tenant": tenant.strip(), "sha256": secret[7:]})
        else:
            tables.append({"tenant": tenant.strip(), "key": secret})
    return tables


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
        self._keys = {k.sha256: k for k in keys}
        self._by_hash = {k.sha256: k.tenant for k in keys}
        #: Tenants whose keys may start sandboxes on the host's network.
        self.host_network_tenants = frozenset(k.tenant for k in keys if k.allow_host_network)
        #: The highest start priority each tenant may ask for.
        self.max_priority = {k.tenant: k.max_priority for k in keys}
        #: Each tenant's quota (``/admin/status``; a start is checked against its own key's).
        self.quotas = {k.tenant: k.quota for k in keys}

    def __bool__(self) -> bool:
        return bool(self._by_hash)

    def tenant_of(self, key: str | None) -> str | None:
        """The tenant of ``key``, or ``None`` for a missing or unknown key."""
        if not key:
            return None
        # Looked up by hash: timing reveals at most something about a hash, not about a key.
        return self._by_hash.get(hash_key(key))

    def key_of(self, key: str | None) -> ApiKey | None:
        """The configured :class:`ApiKey` of ``key`` (what it grants), or ``None``."""
        return self._keys.get(hash_key(key)) if key else None


def _main(argv: list[str]) -> int:
    """``python -m rock.admin.auth TENANT``: print an ``api_keys`` entry for a key read from
    stdin, or for a new random key (printed once, to stderr)."""
    usage = "usage: python -m rock.admin.auth TENANT  (key on stdin, or none to make one)"
    if argv[:1] in (["-h"], ["--help"]):
        print(usage + "\nPrints the api_keys entry of [admin] for TENANT's key.")
        return 0
    if len(argv) != 1 or argv[0].startswith("-"):
        print(usage, file=sys.stderr)
        return 2
    key = "" if sys.stdin.isatty() else sys.stdin.read().strip()
    made = not key
    if made:
        key = secrets.token_urlsafe(32)
    try:
        entry = structure_value({"tenant": argv[0], "key": key}, ApiKeyEntry, path="").api_key()
    except InvalidParameter as exc:
        print(exc.message, file=sys.stderr)
        return 2
    if made:
        print(f"new key for {entry.tenant} (shown once): {key}", file=sys.stderr)
    print(f'{{ tenant = "{entry.tenant}", sha256 = "{entry.sha256}" }}')
    return 0


if __name__ == "__main__":  # pragma: no cover - a helper for people configuring keys
    raise SystemExit(_main(sys.argv[1:]))
