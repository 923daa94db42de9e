"""HTTP routes a plugin adds to the admin server: :class:`AdminRoute`, with no web framework in sight.

A plugin returns a list of :class:`AdminRoute` from its ``rock_admin_routes`` hook; the admin
mounts each one before it serves requests (a plugin needs no ``rock-sdk`` import). A route's
handler is an ``async`` function of one :class:`RouteRequest`; it returns any JSON value (sent
with HTTP 200) or a :class:`RouteResponse` for another status::

    from rock_core import hookimpl
    from rock_core.routes import AdminRoute, RouteRequest, RouteResponse

    async def make(request: RouteRequest) -> object:
        body = request.json()
        if "env_id" not in body:
            return RouteResponse({"detail": "env_id is required"}, status=422)
        return {"sandbox_id": "...", "observation": "..."}

    @hookimpl
    def rock_admin_routes():
        return [AdminRoute("POST", "/apis/v1/envs/gem/make", make)]

By default the answer is the handler's JSON as it is (ROCK's GEM and EnvHub APIs answer so);
with ``envelope=True`` it is wrapped in ROCK's ``{status, message, error, result}`` envelope like
the admin's own sandbox routes. Errors: a :class:`~rock_core.errors.RockError` the handler raises
is HTTP 4xx/5xx ``{"detail": message}`` (or a ``Failed`` envelope); anything else is HTTP 500
``{"detail": ...}`` and logged. The request's API key (when the admin has keys) was checked
before the handler runs: :attr:`RouteRequest.tenant` names its tenant, and
:attr:`RouteRequest.operator` says whether it acts as the admin's operator. A route that keeps
anything a caller names keeps it in the caller's tenant's namespace.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import attrs

from rock_core.errors import InvalidParameter
from rock_core.tenancy import Quota

__all__ = ["AdminRoute", "RouteRequest", "RouteResponse", "RouteStream", "ROUTE_METHODS"]

#: The HTTP methods a route may serve.
ROUTE_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


def _method(instance: Any, attribute: attrs.Attribute[Any], value: str) -> None:
    if value not in ROUTE_METHODS:
        raise InvalidParameter(
            f"method: expected one of {', '.join(ROUTE_METHODS)}, got {value!r}",
            field="method",
            value=value,
        )


def _upper(value: str) -> str:
    return str.upper(value)


def _path(instance: Any, attribute: attrs.Attribute[Any], value: str) -> None:
    if not isinstance(value, str) or not value.startswith("/") or " " in value:
        raise InvalidParameter(
            f"path: expected a path starting with '/', got {value!r}", field="path", value=value
        )


@attrs.frozen
class RouteRequest:
    """What a plugin route's handler gets: the request, and the admin's engine.

    :param path_params: the ``{name}`` parts of the route's path, as matched.
    :param query: the query string's parameters (the last value of a repeated one).
    :param headers: the request's headers, names lower-cased.
    :param body: the raw body.
    :param engine: the admin's :class:`~rock_core.engine.manager.SandboxManager`.
    :param tenant: the tenant of the request's API key; ``None`` when the admin has no keys.
    :param operator: whether the request acts as the admin's operator: the admin has no keys,
        or the request's key is an operator key. An operator may act on what every tenant named;
        a tenant only on its own.
    :param quota: what the request's tenant may hold at once (``None``: no limit). A route that
        starts sandboxes for its caller passes it, with ``tenant``, to
        :meth:`~rock_core.engine.manager.SandboxManager.start_async`.
    :param admit: the admin's own admission of a start by this request's key: given a
        :class:`~rock_core.actions.SandboxStartRequest`, the one to start (the tenant in its
        metadata, the key's default egress policy) or
        :class:`~rock_core.errors.InvalidParameter` for what the key may not ask for (host
        network, a priority, capabilities, a wider egress policy). A route that starts
        sandboxes for its caller passes each start request through it, as the admin's
        ``/start`` does. ``None`` outside an admin (no key to admit for).
    """

    method: str
    path: str
    path_params: Mapping[str, str]
    query: Mapping[str, str]
    headers: Mapping[str, str]
    body: bytes
    engine: Any
    tenant: str | None = None
    operator: bool = False
    quota: Quota | None = None
    admit: Callable[[Any], Any] | None = None

    def json(self) -> Any:
        """The body as JSON (an empty body is ``{}``).

        :raises InvalidParameter: the body is not JSON (``field="body"``).
        """
        if not self.body.strip():
            return {}
        try:
            return json.loads(self.body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise InvalidParameter(f"body: malformed JSON: {exc}", field="body") from None


@attrs.frozen
class RouteResponse:
    """An answer with a status of its own: ``body`` (any JSON value) sent as JSON with ``status``."""

    body: Any
    status: int = 200
    headers: Mapping[str, str] = attrs.field(factory=dict)


@attrs.frozen
class RouteStream:
    """An answer sent as it is made, not JSON: ``chunks`` (bytes, read until they end) with
    ``status``, ``headers`` and ``media_type``. The admin stops reading ``chunks`` (and closes
    the iterator) when the client goes away. For binary answers and answers that stream (a file,
    a Connect RPC's server stream)."""

    chunks: AsyncIterator[bytes]
    status: int = 200
    headers: Mapping[str, str] = attrs.field(factory=dict)
    media_type: str = "application/octet-stream"


@attrs.frozen
class AdminRoute:
    """One route a plugin adds to the admin server.

    :param method: ``GET``, ``POST``, ``PUT``, ``PATCH`` or ``DELETE``.
    :param path: the path, with ``{name}`` parts for path parameters (Starlette's syntax); it must
        not be one the admin (or another plugin) already serves.
    :param handler: ``async def handler(request: RouteRequest) -> Any``.
    :param envelope: wrap the answer in ROCK's ``{status, message, error, result}`` envelope
        (the admin's sandbox routes do); by default the handler's JSON is the answer.
    :param summary: one line for the admin's OpenAPI document.
    :param json_body: the route takes JSON: a request with a body must say
        ``Content-Type: application/json``, else the admin answers HTTP 415 without calling the
        handler (a web page's ``text/plain`` post never reaches it). ``False``: any body.
    :param open: the admin checks no API key for this route (its path must have no ``{name}``
        parts): the handler authenticates the request itself, from its own credentials, and
        :attr:`RouteRequest.tenant` is ``None``. For protocols whose clients cannot send the
        admin's key (E2B's sandbox data plane sends a per-sandbox access token).
    """

    method: str = attrs.field(converter=_upper, validator=_method)
    path: str = attrs.field(validator=_path)
    handler: Callable[[RouteRequest], Awaitable[Any]]
    envelope: bool = False
    summary: str = ""
    json_body: bool = True
    open: bool = False
