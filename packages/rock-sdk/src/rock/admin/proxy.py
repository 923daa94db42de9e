"""Reaching a sandbox's own services through the admin: ROCK's HTTP and WebSocket proxy.

Routes (under :data:`~rock.admin.app.PREFIX`)::

    GET|POST|PUT|DELETE|PATCH|HEAD|OPTIONS /sandboxes/{id}/proxy[/{path}]    HTTP
    WS                                     /sandboxes/{id}/proxy[/{path}]    WebSocket
    HTTP and WS                            /sandboxes/{id}/vnc[/{path}]      ROCK's: always port 8006

The target port is given by exactly one of: a ``port/{N}/`` prefix of the path, the header
``X-ROCK-Target-Port`` or the query parameter ``rock_target_port``; none means 8080. More than
one is answered with HTTP 400 ``{"detail": "Cannot specify target port via multiple sources:
path, header"}`` (ROCK's words). A port must be 1..65535 and not the rocklet's own (22555).

Traffic never leaves through a published port: each connection is a tunnel through the
sandbox's rocklet (:meth:`RockletClient.open_tunnel`) to ``127.0.0.1:N`` inside the sandbox,
so any port works, also in sandboxes without a network. Kept-alive tunnels are reused
(:class:`~rock.admin.tunnels.TunnelPool`). Bodies stream both ways with back-pressure (no body is held whole), SSE
events pass as they are written, a 3xx ``Location`` pointing into the sandbox is rewritten
under the proxy's prefix, and hop-by-hop headers and the admin's own credentials are never
passed on. Failures are ROCK's ``{"detail": ...}`` with HTTP 400 (bad port), 404 (unknown
sandbox, or another tenant's), 409 (not running), 502 (nothing listens on the port, or the
service broke off) or 504 (no answer within ``proxy_timeout``).

WebSocket failures close the socket after accepting it: code 1008 for a request that cannot be
served (bad port, unknown sandbox), 1011 when the service cannot be reached or fails (ROCK's
codes). Messages pass both ways, text and binary, one at a time in each direction (so a slow
reader slows its writer).

Each request or connection runs inside :meth:`SandboxManager.call`: it counts as activity, and
the sandbox is not idle-stopped while it lasts.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

import anyio
import anyio.abc
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rock.admin.tunnels import ProxyRefused, Response, TunnelPool, UpstreamError
from rock_core.engine.manager import SandboxManager
from rock_core.errors import BadRequestRockError, SandboxNotFound
from rock_core.models import ROCKLET_PORT
from rock_core.rocklet_client import RockletClient
from rock_core.states import State

__all__ = [
    "DEFAULT_PORT",
    "PORT_HEADER",
    "PORT_QUERY",
    "SandboxAccess",
    "SandboxProxy",
    "choose_port",
    "check_port",
]

#: The port a request without a port goes to (ROCK: the sandbox's 8080).
DEFAULT_PORT = 8080
#: The header and query parameter that name the target port.
PORT_HEADER = "x-rock-target-port"
PORT_QUERY = "rock_target_port"

# Headers that belong to one connection, not to the message (RFC 9110 section 7.6.1).
_HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)
# Request headers of the WebSocket handshake: the proxy makes its own upstream.
_WS_HANDSHAKE = frozenset(
    {
        b"sec-websocket-key",
        b"sec-websocket-version",
        b"sec-websocket-extensions",
        b"sec-websocket-accept",
        b"sec-websocket-protocol",
    }
)
_PORT_PREFIX = re.compile(r"^/port/([^/]*)(/.*)?$", re.S)
_CHUNK = 65536
# ---------------------------------------------------------------------------------------------
# Ports


def check_port(value: str | int, source: str) -> int:
    """``value`` as a port the proxy may reach; :class:`ProxyRefused` (400) naming ``source`` if not."""
    try:
        port = int(value)
    except (TypeError, ValueError):
        raise ProxyRefused(
            400, f"{source}: expected a port number 1..65535, got {str(value)!r}"
        ) from None
    if not 1 <= port <= 65535:
        raise ProxyRefused(400, f"{source}: expected a port number 1..65535, got {port}")
    if port == ROCKLET_PORT:
        raise ProxyRefused(
            400, f"{source}: port {ROCKLET_PORT} is the rocklet's own and cannot be proxied"
        )
    return port


def choose_port(path: str, header: str | None, query: str | None) -> tuple[int, str, str]:
    """The target port, where it came from (``path``, ``header``, ``query`` or ``default``) and
    the path to request from the service (``path`` without its ``port/{N}`` prefix).

    :raises ProxyRefused: more than one source, or a bad port.
    """
    match = _PORT_PREFIX.match(path)
    sources = [
        name
        for name, given in (("path", match), ("header", header), ("query", query))
        if given is not None
    ]
    if len(sources) > 1:
        raise ProxyRefused(
            400, f"Cannot specify target port via multiple sources: {', '.join(sources)}"
        )
    if match is not None:
        return (
            check_port(unquote(match.group(1)), "port/{N}/ prefix"),
            "path",
            match.group(2) or "/",
        )
    if header is not None:
        return check_port(header.strip(), "X-ROCK-Target-Port"), "header", path or "/"
    if query is not None:
        return check_port(query.strip(), PORT_QUERY), "query", path or "/"
    return DEFAULT_PORT, "default", path or "/"


# ---------------------------------------------------------------------------------------------
# Which sandbox a request may reach


class SandboxAccess:
    """Finds the running sandbox a request names, with the tenancy rule of the admin.

    :param manager: a function returning the engine (it exists only while the admin runs).
    :param tenant_key: the metadata key holding a sandbox's tenant.
    """

    def __init__(self, manager: Callable[[], SandboxManager], tenant_key: str) -> None:
        self._manager = manager
        self._tenant_key = tenant_key

    @property
    def manager(self) -> SandboxManager:
        """The engine."""
        return self._manager()

    def rocklet(self, sandbox_id: str, tenant: str | None, attempted: str) -> RockletClient:
        """The rocklet of ``sandbox_id`` if the request's ``tenant`` may reach it and it runs.

        :raises ProxyRefused: 404 (unknown, or another tenant's: answered the same), 409 (not
            running), 403 (on the host's network: its ports are the host's).
        """
        manager = self.manager
        unknown = ProxyRefused(404, f"Sandbox {sandbox_id} not found")
        try:
            record = manager.get_record(sandbox_id)
        except SandboxNotFound:
            raise unknown from None
        if tenant is not None and record.spec.metadata.get(self._tenant_key) != tenant:
            raise unknown
        if record.spec.runtime_options.get("network") == "host":
            raise ProxyRefused(
                403,
                f"sandbox {sandbox_id} shares the host's network: its ports are the host's, which the proxy does not reach",
            )
        if record.state != State.RUNNING:
            raise ProxyRefused(409, f"sandbox {sandbox_id} is {record.state.value}, not running")
        try:
            return manager.rocklet(sandbox_id, attempted)
        except SandboxNotFound as exc:
            raise ProxyRefused(409, exc.message) from None
        except BadRequestRockError as exc:
            raise ProxyRefused(409, exc.message) from None


# ---------------------------------------------------------------------------------------------
# The ASGI layer

_ROUTE = re.compile(
    r"^/sandboxes/(?P<id>[^/]+)/(?P<kind>proxy|vnc|portforward|shell)(?P<rest>/.*)?$", re.S
)
#: The port of ROCK's ``/sandboxes/{id}/vnc`` route (a noVNC desktop in the sandbox).
VNC_PORT = 8006


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return None


def _raw_path(scope: Scope) -> str:
    raw = scope.get("raw_path")
    return raw.decode("latin-1").split("?", 1)[0] if raw else quote(scope["path"])


class SandboxProxy:
    """An ASGI layer serving the proxy routes (and, through ``sockets``, port-forward and shell)
    of ``prefix``; every other request goes on to ``app``.

    :param app: the rest of the admin.
    :param access: finds the sandbox a request may reach.
    :param prefix: where ROCK's sandbox routes live.
    :param timeout: ``proxy_timeout``: seconds to wait for an answer and between reads of it.
    :param max_message: the largest WebSocket message carried.
    :param credentials: whether a header value is one of the admin's API keys (never passed on).
    :param tenant_of_scope: the request's tenant, as the key gate left it in the scope.
    :param sockets: the handler of ``portforward`` and ``shell`` WebSockets
        (:class:`rock.admin.portforward.SandboxSockets`).
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        access: SandboxAccess,
        prefix: str,
        timeout: float,
        max_message: int,
        credentials: Callable[[str], bool],
        tenant_of_scope: Callable[[Scope], str | None],
        sockets: Any = None,
    ) -> None:
        self.app = app
        self.access = access
        self.prefix = prefix
        self.timeout = timeout
        self.max_message = max_message
        self._is_credential = credentials
        self._tenant = tenant_of_scope
        self.sockets = sockets
        self.pool = TunnelPool()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The ASGI entry point."""
        kind = scope["type"]
        path = scope.get("path", "")
        if kind not in ("http", "websocket") or not path.startswith(self.prefix + "/sandboxes/"):
            await self.app(scope, receive, send)
            return
        raw = _raw_path(scope)
        raw_prefix = quote(self.prefix)
        match = _ROUTE.match(raw[len(raw_prefix) :]) if raw.startswith(raw_prefix) else None
        if match is None:
            await self.app(scope, receive, send)
            return
        sandbox_id, route, rest = unquote(match["id"]), match["kind"], match["rest"] or ""
        base = scope.get("root_path", "") + raw_prefix + f"/sandboxes/{match['id']}/{route}"
        if route not in ("proxy", "vnc"):
            if rest not in ("", "/") or self.sockets is None:
                await self.app(scope, receive, send)
            elif kind == "websocket":
                await self.sockets(scope, receive, send, sandbox_id, route, self._tenant(scope))
            else:
                await _plain(
                    send, 400, f"{route} is a WebSocket: connect with 'Upgrade: websocket'"
                )
            return
        if kind == "http":
            await self._http(scope, receive, send, sandbox_id, rest, base, route)
        else:
            await self._websocket(scope, receive, send, sandbox_id, rest, base, route)

    async def aclose(self) -> None:
        """Close the kept-alive tunnels."""
        await self.pool.aclose()

    # -- HTTP ------------------------------------------------------------------------------

    def _target(
        self, scope: Scope, rest: str, base: str, route: str = "proxy"
    ) -> tuple[int, str, str, list[tuple[str, str]], str]:
        """Port, its source, path, the query pairs to send on, and the prefix a ``Location``
        is rewritten under. ROCK's ``vnc`` route always goes to port 8006."""
        query = [
            (k, v)
            for k, v in parse_qsl(
                scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True
            )
        ]
        if route == "vnc":
            return VNC_PORT, "vnc", rest or "/", query, base
        given = [v for k, v in query if k == PORT_QUERY]
        port, source, path = choose_port(
            rest, _header(scope, PORT_HEADER.encode()), given[0] if given else None
        )
        if len(given) > 1:
            raise ProxyRefused(400, f"{PORT_QUERY}: given {len(given)} times")
        query = [(k, v) for k, v in query if k != PORT_QUERY]
        location_base = base + (f"/port/{port}" if source == "path" else "")
        return port, source, path, query, location_base

    def _request_headers(
        self, scope: Scope, port: int, location_base: str
    ) -> list[tuple[bytes, bytes]]:
        named = {
            token.strip().lower().encode("latin-1")
            for key, value in scope["headers"]
            if key == b"connection"
            for token in value.decode("latin-1").split(",")
        }
        headers = [(b"host", f"localhost:{port}".encode())]
        forwarded_for = None
        for key, value in scope["headers"]:
            if (
                key in _HOP_BY_HOP
                or key in named
                or key in (b"host", PORT_HEADER.encode(), b"x-api-key", b"expect")
            ):
                continue
            if key == b"authorization" and self._is_credential(value.decode("latin-1")):
                continue
            if scope["type"] == "websocket" and key in _WS_HANDSHAKE:
                continue
            if key == b"x-forwarded-for":
                forwarded_for = value
                continue
            headers.append((key, value))
        client = scope.get("client")
        if client:
            peer = str(client[0]).encode()
            headers.append(
                (b"x-forwarded-for", forwarded_for + b", " + peer if forwarded_for else peer)
            )
        host = _header(scope, b"host")
        if host:
            headers.append((b"x-forwarded-host", host.encode("latin-1")))
        scheme = scope.get("scheme", "http").replace("ws", "http")
        headers.append((b"x-forwarded-proto", scheme.encode()))
        headers.append((b"x-forwarded-prefix", location_base.encode("latin-1")))
        return headers

    async def _http(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        sandbox_id: str,
        rest: str,
        base: str,
        route: str = "proxy",
    ) -> None:
        try:
            port, source, path, query, location_base = self._target(scope, rest, base, route)
            client = self.access.rocklet(sandbox_id, self._tenant(scope), "proxy")
        except ProxyRefused as exc:
            await _plain(send, exc.status, exc.detail)
            return
        manager = self.access.manager
        async with manager.call(sandbox_id):
            await self._forward(
                scope, receive, send, client, port, source, path, query, location_base
            )

    async def _forward(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        client: RockletClient,
        port: int,
        source: str,
        path: str,
        query: list[tuple[str, str]],
        location_base: str,
    ) -> None:
        headers = self._request_headers(scope, port, location_base)
        target = path + ("?" + urlencode(query) if query else "")
        length = _header(scope, b"content-length")
        chunked = "chunked" in (_header(scope, b"transfer-encoding") or "").lower()
        body: AsyncIterator[bytes] | None = None
        if length is not None:
            headers.append((b"content-length", length.encode()))
            if length.strip() != "0":
                body = _request_body(receive)
        elif chunked:
            headers.append((b"transfer-encoding", b"chunked"))
            body = _request_body(receive)
        try:
            response = await self.pool.request(
                client,
                port,
                scope["method"],
                target,
                headers,
                body,
                chunked and length is None,
                self.timeout,
            )
        except UpstreamError as exc:
            await _plain(
                send,
                exc.status,
                exc.detail
                if exc.detail.startswith("sandbox ")
                else f"sandbox {client.sandbox_id}, port {port}: {exc.detail}",
            )
            return
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": response.status,
                    "headers": self._response_headers(response, port, source, location_base),
                }
            )
            await _stream_response(response, receive, send)
        finally:
            await response.aclose()

    def _response_headers(
        self, response: Response, port: int, source: str, location_base: str
    ) -> list[tuple[bytes, bytes]]:
        named = {
            token.strip().lower().encode("latin-1")
            for key, value in response.headers
            if key.lower() == b"connection"
            for token in value.decode("latin-1").split(",")
        }
        headers = []
        for key, value in response.headers:
            low = key.lower()
            if low in _HOP_BY_HOP or low in named or low == b"date":
                continue  # the admin's server dates the answer itself (one Date header)
            if low == b"location" and 300 <= response.status < 400:
                value = _rewrite_location(
                    value.decode("latin-1"), port, source, location_base
                ).encode("latin-1")
            headers.append((low, value))
        return headers

    # -- WebSocket ------------------------------------------------------------------------------

    async def _websocket(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        sandbox_id: str,
        rest: str,
        base: str,
        route: str = "proxy",
    ) -> None:
        from rock.admin.portforward import ServiceSocket

        message = await receive()
        if message["type"] != "websocket.connect":
            return
        try:
            port, _source, path, query, location_base = self._target(scope, rest, base, route)
            client = self.access.rocklet(sandbox_id, self._tenant(scope), "proxy")
        except ProxyRefused as exc:
            await refuse_websocket(send, exc)
            return
        async with self.access.manager.call(sandbox_id):
            target = path + ("?" + urlencode(query) if query else "")
            headers = self._request_headers(scope, port, location_base)
            subprotocols = list(scope.get("subprotocols") or ())
            try:
                upstream = await ServiceSocket.connect(
                    client,
                    port,
                    target,
                    headers,
                    subprotocols,
                    max_message=self.max_message,
                    timeout=self.timeout,
                )
            except ProxyRefused as exc:
                await refuse_websocket(send, exc)
                return
            async with upstream:
                await send({"type": "websocket.accept", "subprotocol": upstream.subprotocol})
                await upstream.relay(receive, send)


# ---------------------------------------------------------------------------------------------
# Helpers


async def _plain(send: Send, status: int, detail: str) -> None:
    """ROCK's error answer: ``{"detail": ...}`` with ``status``."""
    import json

    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def refuse_websocket(send: Send, exc: ProxyRefused) -> None:
    """Accept, then close with ROCK's code for ``exc`` and its reason (so a client can read both)."""
    await send({"type": "websocket.accept"})
    reason = exc.detail.encode()[:120].decode("utf-8", "ignore")  # a close reason fits in 123 bytes
    await send({"type": "websocket.close", "code": exc.ws_code, "reason": reason})


async def _request_body(receive: Receive) -> AsyncIterator[bytes]:
    """The request's body as it arrives (ASGI ``http.request`` messages)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise UpstreamError(400, "the client went away while sending its body")
        chunk = message.get("body", b"")
        if chunk:
            yield chunk
        if not message.get("more_body", False):
            return


async def _stream_response(response: Response, receive: Receive, send: Send) -> None:
    """Send the body of ``response`` as it arrives.

    A body without a length (server-sent events, a chunked stream) may never end by itself, so
    while it is sent the client's disconnect is watched for, and ends the copy; a body with a
    length ends on its own (and costs no watcher: the round trip is the proxy's hot path).
    """
    endless = not any(
        k.lower() == b"content-length" for k, _ in response.headers
    ) and response.status not in (204, 304)
    try:
        if not endless:
            async for chunk in response.body():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
            return
        async with anyio.create_task_group() as tg:

            async def watch() -> None:
                while True:
                    message: Message = await receive()
                    if message["type"] == "http.disconnect":
                        tg.cancel_scope.cancel()
                        return

            tg.start_soon(watch)
            async for chunk in response.body():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
            tg.cancel_scope.cancel()
    except UpstreamError:
        # The service broke off after the answer began: end the answer early, as it did.
        raise _BrokenAnswer() from None


class _BrokenAnswer(Exception):
    """The service's answer broke off after it began: the client's connection is cut."""


def _rewrite_location(location: str, port: int, source: str, location_base: str) -> str:
    """A ``Location`` pointing into the sandbox, under the proxy's prefix; others unchanged."""
    parts = urlsplit(location)
    if parts.scheme or parts.netloc:
        if parts.scheme not in ("http", "https", "ws", "wss") or parts.hostname not in (
            "localhost",
            "127.0.0.1",
            "0.0.0.0",
            "::1",
        ):
            return location  # somewhere else: the client goes there itself
        if (parts.port or (443 if parts.scheme in ("https", "wss") else 80)) != port:
            return location
    elif not location.startswith("/"):
        return location  # relative: resolves under the proxy's prefix already
    path = parts.path or "/"
    query = parts.query
    if source == "query":
        query = "&".join(filter(None, [query, urlencode({PORT_QUERY: port})]))
    result = location_base + path
    if query:
        result += "?" + query
    if parts.fragment:
        result += "#" + parts.fragment
    return result
