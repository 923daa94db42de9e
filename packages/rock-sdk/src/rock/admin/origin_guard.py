"""The admin serves its machine's tools, never a web page: a pure ASGI layer in front of
everything that refuses a foreign ``Origin`` and an unexpected ``Host``, and the check that a
JSON route's body is JSON (HTTP 415).

A page in a browser can send a request to the admin's address (a form post, ``fetch`` with a
"simple" content type such as ``text/plain``, a WebSocket) without any preflight, and, after
*DNS rebinding* (a name of the attacker's that first resolves to its server, then to
``127.0.0.1``), read the answers as its own origin's. So, on every route but :data:`OPEN_PATHS`,
HTTP and WebSocket alike, with or without API keys:

- ``Host`` must name this admin: an IP address (a rebinding needs a name the attacker owns),
  ``localhost``, the name the admin is bound to, the host of ``engine.rocklet_url``, or a name
  in ``[admin] allowed_hosts`` (a DNS name the operator serves it under; ``"*"``: any). A
  request without ``Host`` (HTTP/1.0) passes. Ports are not compared: a forwarded port
  (``ssh -L 9000:localhost:8080``) keeps working, and rebinding is about the name.
- ``Origin``, when a request carries one (browsers do; curl, SDKs and the ``rock`` CLI do not),
  must be listed in ``[admin] allowed_origins`` (``"https://dashboard.example"``). The one
  exception is a page the admin's own proxy served (``/sandboxes/{id}/proxy/...``,
  ``.../vnc/...``), which may call back the proxy and VNC routes of its own origin (noVNC opens
  its WebSocket so); never ROCK's API routes, port-forward or the shell.

A refusal is HTTP 403 with ROCK's ``Failed`` envelope (``result.code`` :data:`FORBIDDEN_CODE`)
naming the header, its value and the setting that would allow it; a WebSocket is closed with
1008 before its handshake completes.

:func:`require_json` is the 415 check: a JSON route's body must come with
``Content-Type: application/json`` (or ``...+json``); an empty body may come without one.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from rock.admin.envelope import failure
from rock.admin.metrics import Metrics
from rock_core.errors import BadRequestRockError

__all__ = [
    "FORBIDDEN_CODE",
    "UNSUPPORTED_MEDIA_CODE",
    "OriginGuard",
    "UnsupportedMediaType",
    "host_name",
    "require_json",
]

#: ``result.code`` of a request refused for its ``Origin`` or ``Host`` (a 4xxx client error).
FORBIDDEN_CODE = 4031
#: ``result.code`` of a JSON route's body sent as another media type.
UNSUPPORTED_MEDIA_CODE = 4015

#: Paths served to any ``Host`` and ``Origin``: they reveal nothing (ROCK's greeting, liveness,
#: the public rocklet a Nomad node downloads by whatever name it was given).
OPEN_PATHS = frozenset({"/", "/healthz", "/rocklet.pyz"})

# The routes whose pages the admin serves from a sandbox: such a page may call back its own origin.
_PROXIED_PAGE = re.compile(r"^/apis/envs/sandbox/v1/sandboxes/[^/]+/(proxy|vnc)(/|$)")


class UnsupportedMediaType(BadRequestRockError):
    """A JSON route's body came with another ``Content-Type``."""

    code = UNSUPPORTED_MEDIA_CODE


def require_json(headers: Mapping[str, str], has_body: bool) -> None:
    """Check that a JSON route's request says its body is JSON.

    :param headers: the request's headers (names lower-cased).
    :param has_body: whether the request carries a body (``Content-Length`` > 0 or chunked).
    :raises UnsupportedMediaType: naming the expected and the given content type.
    """
    given = headers.get("content-type")
    if given is None and not has_body:
        return
    media = (given or "").split(";", 1)[0].strip().lower()
    if media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    ):
        return
    raise UnsupportedMediaType(
        "unsupported media type: this route takes Content-Type: application/json, got "
        + (repr(given) if given is not None else "a body without Content-Type")
    )


def host_name(authority: str) -> str:
    """The host of a ``Host`` header or an origin's authority, lower-cased, without its port
    (``[::1]:8080`` -> ``::1``, ``Admin.Example.:80`` -> ``admin.example``)."""
    value = authority.strip().lower()
    if value.startswith("["):
        return value[1:].split("]", 1)[0]
    if value.count(":") == 1:
        value = value.split(":", 1)[0]
    return value.rstrip(".")


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


class OriginGuard:
    """Refuses requests whose ``Host`` is not this admin's or whose ``Origin`` is foreign (see
    the module docstring).

    :param app: the rest of the admin.
    :param allowed_hosts: host names besides IP addresses and ``localhost`` (``"*"``: any).
    :param allowed_origins: origins (``scheme://host[:port]``) whose pages may call the admin.
    :param metrics: where refusals are counted (one label, ``(forbidden)``).
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        allowed_hosts: Iterable[str],
        allowed_origins: Iterable[str],
        metrics: Metrics,
    ) -> None:
        self.app = app
        self.allowed_hosts = frozenset(host_name(h) for h in allowed_hosts if h.strip()) | {
            "localhost"
        }
        self.allowed_origins = frozenset(
            o.strip().rstrip("/").lower() for o in allowed_origins if o.strip()
        )
        self.metrics = metrics

    def host_allowed(self, host: str) -> bool:
        """Whether a ``Host`` header's value names this admin."""
        name = host_name(host)
        return _is_ip(name) or name in self.allowed_hosts or "*" in self.allowed_hosts

    def refusal(self, scope: Scope) -> str | None:
        """Why the request may not be served (``None``: it may)."""
        host = origin = None
        for name, value in scope["headers"]:
            if name == b"host":
                host = value.decode("latin-1")
            elif name == b"origin":
                origin = value.decode("latin-1")
        if host is not None and not self.host_allowed(host):
            return (
                f"Host {host!r} is not a name of this admin (a DNS-rebinding page uses such names); "
                "add it to [admin] allowed_hosts if the admin is served under it"
            )
        if origin is None or origin.strip().rstrip("/").lower() in self.allowed_origins:
            return None
        if host is not None and _PROXIED_PAGE.match(scope["path"]):
            parts = urlsplit(origin.strip())
            if parts.scheme in ("http", "https") and parts.netloc.lower() == host.strip().lower():
                return None  # a page of the admin's own proxy calling back its own origin
        return (
            f"Origin {origin!r} is not allowed: a web page may not drive the admin; "
            "list it in [admin] allowed_origins if it should"
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The ASGI entry point."""
        if scope["type"] not in ("http", "websocket") or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        why = self.refusal(scope)
        if why is None:
            await self.app(scope, receive, send)
            return
        self.metrics.count("(forbidden)", "forbidden")
        if scope["type"] == "websocket":
            await receive()  # websocket.connect
            reason = why.encode()[:120].decode(
                "utf-8", "ignore"
            )  # a close reason fits in 123 bytes
            await send({"type": "websocket.close", "code": 1008, "reason": reason})
            return
        response = failure("forbidden", BadRequestRockError(why, code=FORBIDDEN_CODE))
        response.status_code = 403
        await response(scope, receive, send)
