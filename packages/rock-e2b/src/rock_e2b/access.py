"""Who may act on which sandbox, through E2B's API: the tenant of a request's API key (the control
plane), the sandbox's access token (the data plane), and E2B's error shape.

A sandbox belongs to the tenant in its metadata (``rock.tenant``, as the admin's own routes set
it); a key sees only its tenant's sandboxes, another tenant's id is answered as an unknown one.

E2B's data plane carries no API key: E2B's SDK sends the ``envdAccessToken`` that creating or
connecting answered, as ``X-Access-Token``, with the sandbox in ``E2b-Sandbox-Id``. The token is
an HMAC of the sandbox id and its tenant under this admin's secret (``[plugins.e2b]
access_token_secret``, else a random one per admin process), so only whoever was shown it (its
tenant, through the control plane) can present it, and nothing is stored.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Any

from rock_core.errors import SandboxNotFound
from rock_core.models import SandboxRecord
from rock_core.routes import RouteResponse

__all__ = [
    "TENANT_KEY",
    "E2BError",
    "access_token",
    "configure_secret",
    "error_response",
    "owned_record",
    "token_matches",
]

#: The metadata key where the admin keeps a sandbox's tenant (rock.admin.auth's).
TENANT_KEY = "rock.tenant"

_secret = secrets.token_bytes(32)


def configure_secret(secret: str | None) -> None:
    """Use ``secret`` for access tokens (admins of one cluster share it), else a random one."""
    global _secret
    _secret = secret.encode() if secret else secrets.token_bytes(32)


def access_token(record: SandboxRecord) -> str:
    """The data-plane token of ``record``'s sandbox."""
    tenant = record.spec.metadata.get(TENANT_KEY, "")
    message = f"{record.sandbox_id}\n{tenant}".encode()
    return hmac.new(_secret, message, hashlib.sha256).hexdigest()


def token_matches(record: SandboxRecord, token: str | None) -> bool:
    """Whether ``token`` is ``record``'s sandbox's access token."""
    return token is not None and hmac.compare_digest(access_token(record), token)


class E2BError(Exception):
    """An answer in E2B's error shape, ``{"code": status, "message": ...}`` with HTTP ``status``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def error_response(exc: E2BError) -> RouteResponse:
    return RouteResponse({"code": exc.status, "message": exc.message}, status=exc.status)


def owned_record(engine: Any, sandbox_id: str, tenant: str | None) -> SandboxRecord:
    """The record of ``sandbox_id`` if the caller's tenant owns it (no tenant: the admin has no
    keys, every sandbox); else E2B's 404, worded as for an id nobody has."""
    try:
        record: SandboxRecord = engine.get_record(sandbox_id)
    except SandboxNotFound:
        record = None  # type: ignore[assignment]
    if record is None or (tenant is not None and record.spec.metadata.get(TENANT_KEY) != tenant):
        raise E2BError(404, f"sandbox {sandbox_id!r} not found")
    return record
