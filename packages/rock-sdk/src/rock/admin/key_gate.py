"""The admin's API-key gate: a pure ASGI layer in front of everything, so no body is read (and
no WebSocket accepted) for a stranger. The keys themselves are :mod:`rock.admin.auth`'s.

When the admin has keys, every request but :data:`OPEN_PATHS` needs ``X-API-Key: <key>`` or
``Authorization: Bearer <key>``; a missing or unknown key is answered with HTTP 401 and a
``Failed`` envelope (``result.code`` :data:`UNAUTHORIZED_CODE`), a WebSocket closed with 1008.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from rock.admin.auth import ApiKey, KeyRing, key_from_headers
from rock.admin.envelope import failure
from rock.admin.metrics import Metrics
from rock_core.errors import BadRequestRockError, SandboxNotFound

__all__ = [
    "ApiKeyGate",
    "OPEN_PATHS",
    "UNAUTHORIZED_CODE",
    "scope_key",
    "scope_tenant",
    "unknown_sandbox",
]

#: Paths served without a key: liveness probes and ROCK's greeting reveal nothing.
OPEN_PATHS = frozenset({"/healthz", "/", "/rocklet.pyz"})

#: ``result.code`` of a request refused for its key (ROCK has none; a 4xxx client error).
UNAUTHORIZED_CODE = 4011

#: Where :class:`ApiKeyGate` leaves the request's tenant in the ASGI scope.
_TENANT_SCOPE_KEY = "rock.tenant"
#: Where :class:`ApiKeyGate` leaves the request's :class:`~rock.admin.auth.ApiKey` (what it grants).
_KEY_SCOPE_KEY = "rock.api_key"


def scope_tenant(scope: Mapping[str, Any]) -> str | None:
    """The tenant of the request's key, as the gate left it in its ASGI ``scope`` (``None``: keys are off)."""
    return scope.get(_TENANT_SCOPE_KEY)


def scope_key(scope: Mapping[str, Any]) -> ApiKey | None:
    """The configured key the request carried, as the gate left it (``None``: keys are off)."""
    return scope.get(_KEY_SCOPE_KEY)


class ApiKeyGate:
    """Answers HTTP 401 unless the request carries a configured key (``X-API-Key`` or
    ``Authorization: Bearer``); puts the key's tenant in the scope for the routes."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        keys: KeyRing,
        metrics: Metrics,
        open_paths: frozenset[str] = frozenset(),
    ) -> None:
        self.app = app
        self.keys = keys
        self.metrics = metrics
        #: :data:`OPEN_PATHS` and the paths of plugins' open routes (they check their own
        #: credentials: :attr:`rock_core.routes.AdminRoute.open`).
        self.open_paths = OPEN_PATHS | open_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The ASGI entry point."""
        if scope["type"] not in ("http", "websocket") or scope["path"] in self.open_paths:
            await self.app(scope, receive, send)
            return
        key = key_from_headers(scope["headers"])
        api_key = self.keys.key_of(key)
        tenant = None if api_key is None else api_key.tenant
        if tenant is None and scope["type"] == "websocket":
            self.metrics.count("(unauthorized)", "unauthorized")
            await receive()  # websocket.connect
            await send(
                {
                    "type": "websocket.close",
                    "code": 1008,
                    "reason": "unauthorized: no valid API key",
                }
            )
            return
        if tenant is None:
            # One label for every refusal: a stranger must not grow the metrics with paths.
            self.metrics.count("(unauthorized)", "unauthorized")
            why = "no API key given" if key is None else "the API key is not valid"
            exc = BadRequestRockError(
                f"{why}: send X-API-Key: <key> or Authorization: Bearer <key>",
                code=UNAUTHORIZED_CODE,
            )
            response = failure("unauthorized", exc)
            response.status_code = 401
            response.headers["www-authenticate"] = 'Bearer realm="rock"'
            await response(scope, receive, send)
            return
        await self.app({**scope, _TENANT_SCOPE_KEY: tenant, _KEY_SCOPE_KEY: api_key}, receive, send)


def unknown_sandbox(sandbox_id: str, attempted: str) -> SandboxNotFound:
    """What a key is told of another tenant's sandbox: word for word what the engine says of an
    id it never saw."""
    return SandboxNotFound(
        f"Sandbox {sandbox_id} not found", sandbox_id=sandbox_id, attempted=attempted
    )
